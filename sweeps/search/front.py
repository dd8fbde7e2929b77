"""The Pareto case of a layout search (objective ``pareto``: exposed-communication share
against tokens/s per device): the exhaustive front of the space beside the search's, and why
the search's front is what it is. Plain pandas over ``search`` rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pandas as pd

from sweeps.config import SearchSetup
from sweeps.search.results import exhaustive_frame, layout_of, pareto
from tasks.model.terms.layout import LAYOUT_FIELDS

__all__ = ["FrontGap", "front_gap", "WhyFront", "why_front"]


@dataclass(frozen=True)
class FrontGap:
    """The exhaustive Pareto front of a space: how many layouts it holds, how many of them
    the search tried, and its span: the least exposed share (a fraction of the step) and the
    most tokens/s per device on it."""

    layouts: int
    found: int
    least_share: float
    most_tokens_per_s: float


def front_gap(setup: SearchSetup, rows: pd.DataFrame, limit: int = 100_000) -> Optional[FrontGap]:
    """The exhaustive front of ``setup``'s space against the search's trial ``rows``; None
    for a space of more than ``limit`` layouts, or no feasible layout."""
    if setup.spec.space.size > limit:
        return None
    frame = exhaustive_frame(setup)
    if frame.empty:
        return None
    front = pareto(frame.assign(status="ok"))
    tried = rows[rows["status"] == "ok"][list(LAYOUT_FIELDS)].drop_duplicates()
    found = len(front[list(LAYOUT_FIELDS)].merge(tried, on=list(LAYOUT_FIELDS)))
    return FrontGap(len(front), found, float(front["exposed_comm_share"].min()),
                    float(front["tokens_per_s_per_device"].max()))


@dataclass(frozen=True)
class WhyFront:
    """The ends of a Pareto front: the fastest layout and the one exposing least (labels,
    tokens/s per device, exposed share), the layouts on it, and the feasible ones tried."""

    fastest: str
    fastest_speed: float
    fastest_share: float
    leanest: str
    leanest_speed: float
    leanest_share: float
    size: int
    tried: int


def why_front(front: pd.DataFrame, rows: pd.DataFrame) -> Optional[WhyFront]:
    """The ends of ``front`` (``pareto`` of ``rows``, by share); None when it is empty."""
    if front.empty:
        return None
    fastest = front.loc[front["tokens_per_s_per_device"].idxmax()]
    leanest = front.iloc[0]
    tried = len(rows[rows["status"] == "ok"].drop_duplicates(subset=list(LAYOUT_FIELDS)))
    return WhyFront(layout_of(fastest).describe(), float(fastest["tokens_per_s_per_device"]),
                    float(fastest["exposed_comm_share"]), layout_of(leanest).describe(),
                    float(leanest["tokens_per_s_per_device"]), float(leanest["exposed_comm_share"]), len(front), tried)
