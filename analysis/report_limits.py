"""The report's topic of ``limits`` rows: the curve of utilisation against training compute
per scenario, and a finding naming where each falls and where no layout finishes in time,
beside Erdil and Schneider-Joseph's thresholds."""

from __future__ import annotations

from typing import Callable, Iterable, List, Optional

import pandas as pd

from analysis import figures
from analysis.figures.limits import PAPER_THRESHOLDS, limit_curves
from analysis.report_cache import FigureCache, kind_digest
from analysis.report_render import Section, Topic, figure_topic
from sweeps.lake.kinds import LIMITS

__all__ = ["limits_topic"]


def limits_topic(cache: FigureCache, con, rows: Optional[pd.DataFrame],
                 when: Callable[[Iterable[str]], float]) -> Topic:
    """The figure (skipped, naming ``commscale limits``, without rows) and its finding."""
    section = Section("Limits of scale", "The best utilisation a run of a family scaled with its compute reaches "
                      "within the duration, against its training compute (`commscale limits`; Erdil and "
                      "Schneider-Joseph, arXiv 2411.01137).")
    entry = cache.make("limits", "Best utilisation within the duration vs training compute", kind_digest(con, LIMITS),
                       lambda: figures.draw_limits(rows),
                       lambda: ("Each point the fewest devices whose best layout finishes the member's training in "
                                "time; a cross where none does. Dotted: where each curve stays under its share of "
                                "the smallest run's utilisation, and where runs stop finishing; dash-dotted: where the "
                                "runs' latency floors alone stop fitting; dashed: the paper's."))
    return figure_topic(section, entry, rows, "sweep", lambda: _lines(rows), when)


def _flop(value: Optional[float]) -> str:
    return "beyond the grid" if value is None else f"{value:.1e} FLOP"


def _lines(rows: pd.DataFrame) -> List[str]:
    paper = ", ".join(f"{label} {flop:.0e}" for label, flop in PAPER_THRESHOLDS.items())
    lines = [f"{sweep}, {scenario}: utilisation {turn.plateau:.0%} at the smallest run, under {turn.drop:.0%} of it "
             f"from {_flop(turn.drop_flop)}; no layout finishes within {curve['duration_days'].iloc[0]:g} days "
             f"beyond {_flop(turn.wall_flop)}; its runs' latency floors alone outlast that beyond "
             f"{_flop(turn.floor_wall_flop)}." for sweep, scenario, curve, turn in limit_curves(rows)]
    return lines + [f"Erdil and Schneider-Joseph: {paper}."]
