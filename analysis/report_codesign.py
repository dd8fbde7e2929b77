"""The report's topic of ``codesign`` rows: each study's trials and Pareto front of step time
against cluster cost, and a finding naming the front's ends."""

from __future__ import annotations

from typing import Callable, Iterable, List, Optional

import pandas as pd

from analysis import figures
from analysis.figures.codesign import study_fronts
from analysis.report_cache import FigureCache, kind_digest
from analysis.report_render import Section, Topic, figure_topic
from sweeps.lake.kinds import CODESIGN

__all__ = ["codesign_topic"]


def codesign_topic(cache: FigureCache, con, rows: Optional[pd.DataFrame],
                   when: Callable[[Iterable[str]], float]) -> Topic:
    """The figure (skipped, naming ``commscale codesign``, without rows) and its finding."""
    section = Section("Hardware co-design", "Hardware knobs (scale-up domain and bandwidth, scale-out bandwidth, HBM, "
                      "FLOP rate, device count) and layouts searched together against the cluster's cost at an "
                      "assumed price per knob (`commscale codesign`).")
    entry = cache.make("codesign", "Step time vs cluster cost, trials and Pareto front", kind_digest(con, CODESIGN),
                       lambda: figures.draw_codesign(rows),
                       lambda: ("Each dot a feasible trial of the study; the line its Pareto front: no other trial "
                                "is both faster and cheaper."))
    return figure_topic(section, entry, rows, "study", lambda: _lines(rows), when)


def _lines(rows: pd.DataFrame) -> List[str]:
    lines = []
    for study, trials, front in study_fronts(rows):
        fast, cheap = front.iloc[0], front.iloc[-1]
        lines.append(f"{study}: {len(front)} of {len(trials):,} feasible trials on the front, from "
                     f"{fast['step_time_s']:.3g} s a step at ${fast['cost_usd'] / 1e6:,.0f}M ({fast['devices']:,} "
                     f"devices, domain {fast['domain']}, {fast['flops']:g}x FLOPs) to {cheap['step_time_s']:.3g} s at "
                     f"${cheap['cost_usd'] / 1e6:,.0f}M.")
    return lines
