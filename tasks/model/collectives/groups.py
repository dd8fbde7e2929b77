"""Distinct groups of ranks: thousands of layouts share a few (ranks, crosses nodes, ranks per
node) groups, and what depends on the group alone (``collectives.nccl``'s latencies and bus
bandwidths) is worked out once per distinct one."""

from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

__all__ = ["DISTINCT_MIN", "distinct_groups", "per_group"]

#: Fewer group elements than this are costed as they come (finding the distinct ones costs more).
DISTINCT_MIN = 256


def distinct_groups(n, crosses_nodes, local_ranks):
    """((n, crosses_nodes, local_ranks) of each distinct group, the index of each element's
    group, the elements' shape), or None where there are fewer than ``DISTINCT_MIN`` elements
    or a rank count is not a whole number (each group then costed as it comes)."""
    n, crosses, local = np.broadcast_arrays(np.asarray(n, dtype=np.float64), np.asarray(crosses_nodes, dtype=bool),
                                            np.asarray(local_ranks, dtype=np.float64))
    if n.size < DISTINCT_MIN or not (np.all(n == np.floor(n)) and np.all(local == np.floor(local))
                                     and np.all(n >= 0) and np.all(local >= 0)):
        return None
    span = int(local.max()) + 1
    keys = ((n.astype(np.int64) * span + local.astype(np.int64)) * 2 + crosses).ravel()
    distinct, inverse = _unique(keys)
    rest = distinct // 2
    return ((rest // span).astype(np.float64), (distinct % 2).astype(bool), (rest % span).astype(np.float64)), \
        inverse, n.shape


#: The largest key a table of present keys is kept for (``_unique``); beyond it, a sort.
DENSE_KEYS_MAX = 1 << 22


def _unique(keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(the distinct values of non-negative integer ``keys``, ascending; each key's index
    among them), as ``np.unique(keys, return_inverse=True)``; in linear time through a table
    of the keys present where the largest is at most ``DENSE_KEYS_MAX``."""
    top = int(keys.max()) if keys.size else 0
    if top > DENSE_KEYS_MAX:
        return np.unique(keys, return_inverse=True)
    present = np.zeros(top + 1, dtype=bool)
    present[keys] = True
    distinct = np.flatnonzero(present)
    position = np.cumsum(present) - 1
    return distinct, position[keys]


def per_group(figures: Callable[..., Tuple[np.ndarray, ...]], n, crosses_nodes, local_ranks) -> Tuple[np.ndarray, ...]:
    """``figures(n, crosses_nodes, local_ranks)``, a tuple of arrays over the groups (each with
    the groups on its last axes, any per-protocol axis first), worked out once per distinct
    group and given to every element; called as it comes where ``distinct_groups`` is None."""
    groups = distinct_groups(n, crosses_nodes, local_ranks)
    if groups is None:
        return figures(n, crosses_nodes, local_ranks)
    (n_u, crosses_u, local_u), inverse, shape = groups
    return tuple(np.asarray(x)[..., inverse].reshape(np.shape(x)[:-1] + shape)
                 for x in figures(n_u, crosses_u, local_u))
