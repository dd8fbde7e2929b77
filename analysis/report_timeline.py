"""The report's timeline of one projected step: the default search's layout (its stored best,
or the exhaustive optimum), drawn from the events the command hands the report
(``sweeps.search.timeline``), keyed by what decides them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Sequence

from analysis import figures
from analysis.report_cache import FigureCache
from analysis.report_render import Section, Topic

__all__ = ["TimelinePicture", "timeline_topic"]


@dataclass(frozen=True)
class TimelinePicture:
    """A step to draw: its events (``tasks.model.step.timeline.TimelineEvent``), the stages drawn
    (index: name), a title, a caption, and a key that changes whenever any of them does."""

    events: Sequence
    stage_names: Dict[int, str]
    title: str
    about: str
    key: str


def timeline_topic(cache: FigureCache, picture: TimelinePicture) -> Topic:
    """One figure: the step's Gantt chart, a row per stage and track."""
    section = Section("Timeline of one step", "One projected training step of the default search's layout, as "
                      "`commscale timeline` writes it for Perfetto: a row per pipeline stage and track (compute, TP, "
                      "PP, DP communication); bars that overlap compute hide behind it.")
    section.figures.append(cache.make(
        "timeline", picture.title, picture.key,
        lambda: figures.draw_timeline(picture.events, picture.stage_names, picture.title, picture.about),
        lambda: picture.about))
    return Topic(section, names=frozenset({"timeline"}))
