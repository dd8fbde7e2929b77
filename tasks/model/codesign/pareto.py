"""The Pareto front of points minimising two objectives, and its hypervolume: the area the
front dominates up to a reference point (Zitzler and Thiele 1998), the measure a sampler's
front is compared with the exhaustive one by."""

from __future__ import annotations

import numpy as np

__all__ = ["front_indices", "hypervolume"]


def front_indices(first, second) -> np.ndarray:
    """Indices of the points no other beats on both objectives (both minimised; of equal
    points, the first), ordered by the first objective."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    order = np.lexsort((b, a))
    keep, best = [], np.inf
    for i in order:
        if b[i] < best:
            keep.append(i)
            best = b[i]
    return np.asarray(keep, dtype=np.int64)


def hypervolume(first, second, reference) -> float:
    """The area dominated by the points (both objectives minimised) and bounded by
    ``reference`` (a pair); points beyond it add nothing."""
    a, b = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    inside = (a < reference[0]) & (b < reference[1])
    a, b = a[inside], b[inside]
    area, ceiling = 0.0, float(reference[1])
    for i in front_indices(a, b):
        area += (float(reference[0]) - a[i]) * (ceiling - b[i])
        ceiling = b[i]
    return area
