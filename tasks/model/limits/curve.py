"""Where a utilisation-against-compute curve turns: the training FLOP beyond which the best
achievable utilisation stays under a share of its small-run level (the data-movement limit),
and the FLOP beyond which no layout finishes within the duration (the wall). Erdil and
Schneider-Joseph (arXiv 2411.01137) call them the point where data movement "begins to
significantly lower hardware utilization" and the "latency wall"."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

__all__ = ["Thresholds", "thresholds"]


@dataclass(frozen=True)
class Thresholds:
    """``plateau``: the utilisation of the curve's smallest run that finishes; ``drop_flop``:
    the FLOP beyond which utilisation stays under ``drop`` x plateau (log-linear between the
    last point at or above that level and the next; a point that does not finish counts as
    0), so that one point dipping under it on the grid's coarse device counts does not set
    it; ``wall_flop``: the geometric midpoint between the last run that finishes and the
    first after it that does not. None where the curve does not get there within its grid."""

    plateau: float
    drop: float
    drop_flop: Optional[float]
    wall_flop: Optional[float]


def _crossing(x0: float, y0: float, x1: float, y1: float, level: float) -> float:
    """The x (FLOP) where the line through (log x0, y0), (log x1, y1) meets ``level``."""
    if y0 == y1:
        return x1
    share = (y0 - level) / (y0 - y1)
    return 10 ** (math.log10(x0) + share * (math.log10(x1) - math.log10(x0)))


def thresholds(flop: Sequence[float], utilization: Sequence[float], finished: Sequence[bool],
               drop: float) -> Thresholds:
    """The curve's ``Thresholds`` (class docstring), its points in increasing ``flop``; a point
    that does not finish has no utilisation (``utilization`` is read only where ``finished``)."""
    points = sorted(zip(flop, utilization, finished), key=lambda p: p[0])
    first = next((i for i, p in enumerate(points) if p[2]), None)
    if first is None:
        return Thresholds(plateau=0.0, drop=drop, drop_flop=None, wall_flop=None)
    plateau = points[first][1]
    level = drop * plateau
    values = [(x, y if ok else 0.0) for x, y, ok in points[first:]]
    last_above = max(i for i, (_, y) in enumerate(values) if y >= level)
    drop_flop = None
    if last_above + 1 < len(values):
        (x0, y0), (x1, y1) = values[last_above], values[last_above + 1]
        drop_flop = _crossing(x0, y0, x1, y1, level)
    wall_flop = next((math.sqrt(a[0] * b[0]) for a, b in zip(points[first:], points[first + 1:]) if a[2] and not b[2]),
                     None)
    return Thresholds(plateau=plateau, drop=drop, drop_flop=drop_flop, wall_flop=wall_flop)
