"""The report's timeline of one projected step: the default search's layout (its stored best,
or the exhaustive optimum), drawn from the events the command hands the report
(``sweeps.search.timeline``), keyed by what decides them and built only when drawn."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Dict, Sequence, Tuple

from analysis import figures
from analysis.report_cache import FigureCache
from analysis.report_render import Section, Topic

__all__ = ["TimelinePicture", "timeline_topic"]


@dataclass(frozen=True)
class TimelinePicture:
    """A step to draw, built only when its figure is drawn: ``key`` changes whenever what
    decides the step does (the layout chosen, the cost model, the code that lays it out);
    ``build()`` returns its events (``tasks.model.step.timeline.TimelineEvent``), the stages
    drawn (index: name), a title and a caption."""

    key: str
    build: Callable[[], Tuple[Sequence, Dict[int, str], str, str]]


def timeline_topic(cache: FigureCache, picture: TimelinePicture) -> Topic:
    """One figure: the step's Gantt chart, a row per stage and track (built at most once, and
    not at all when the figure kept from the former report still holds)."""
    section = Section("Timeline of one step", "One projected training step of the default search's layout, as "
                      "`commscale timeline` writes it for Perfetto: a row per pipeline stage and track (compute, TP, "
                      "PP, DP communication); bars that overlap compute hide behind it.")
    built = functools.lru_cache(maxsize=1)(picture.build)
    section.figures.append(cache.make("timeline", "One projected step of the default search's layout", picture.key,
                                      lambda: figures.draw_timeline(*built()), lambda: built()[3]))
    return Topic(section, names=frozenset({"timeline"}))
