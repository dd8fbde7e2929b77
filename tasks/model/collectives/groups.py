"""Distinct groups of ranks: thousands of layouts share a few (ranks, crosses nodes, ranks per
node) groups, and what depends on the group alone (``collectives.nccl``'s latencies and bus
bandwidths) is worked out once per distinct one. ``distinct_rows`` finds the distinct rows
of any few columns of numbers the same way (``step.context.on_distinct`` reads it)."""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Tuple

import numpy as np

__all__ = ["DISTINCT_MIN", "GROUP_DISTINCT_MIN", "DENSE_KEYS_MAX", "distinct_groups", "per_group", "unique_inverse",
           "number_column", "distinct_rows", "distinct_numbered"]

#: Fewer rows than this are worked out as they come by ``step.context.on_distinct`` (finding the
#: distinct ones costs more than a whole-step part does on them).
DISTINCT_MIN = 256
#: Fewer group elements than this are costed as they come by ``per_group``: NCCL's figures of
#: a group cost about 0.1 ms plus 0.09 us an element as they come, finding the distinct groups
#: about 0.2 ms plus 0.035 us an element (one core, the scaling space's calls), so the distinct
#: path pays from about 2,000 elements.
GROUP_DISTINCT_MIN = 2048


def distinct_groups(n, crosses_nodes, local_ranks):
    """((n, crosses_nodes, local_ranks) of each distinct group, the index of each element's
    group, the elements' shape), or None where there are fewer than ``GROUP_DISTINCT_MIN`` elements
    or a rank count is not a whole number (each group then costed as it comes)."""
    n, crosses, local = np.broadcast_arrays(np.asarray(n, dtype=np.float64), np.asarray(crosses_nodes, dtype=bool),
                                            np.asarray(local_ranks, dtype=np.float64))
    n_shape = n.shape
    if n.size < GROUP_DISTINCT_MIN or not (np.all(n == np.floor(n)) and np.all(local == np.floor(local))
                                     and np.all(n >= 0) and np.all(local >= 0)):
        return None
    n, crosses, local = n.ravel(), crosses.ravel(), local.ravel()
    first, inverse = distinct_rows([n, local, crosses])
    return (n[first], crosses[first], local[first]), inverse, n_shape


#: The largest key a table of present keys is kept for (``unique_inverse``); beyond it, a sort.
DENSE_KEYS_MAX = 1 << 22
#: Keys per element up to which the table pays (walking it costs more than sorting beyond).
DENSE_KEYS_PER_ELEMENT = 8


def unique_inverse(keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(the distinct values of non-negative integer ``keys``, ascending; each key's index
    among them), as ``np.unique(keys, return_inverse=True)``; in linear time through a table
    of the keys present where the largest is at most ``DENSE_KEYS_MAX`` and at most
    ``DENSE_KEYS_PER_ELEMENT`` per key (a sort otherwise)."""
    top = int(keys.max()) if keys.size else 0
    if top > _dense_limit(keys.size):
        return np.unique(keys, return_inverse=True)
    present = np.zeros(top + 1, dtype=bool)
    present[keys] = True
    distinct = np.flatnonzero(present)
    position = np.empty(top + 1, dtype=np.int64)    # read only where a key is present
    position[distinct] = np.arange(len(distinct))
    return distinct, position[keys]


def _dense_limit(size: int) -> int:
    """The largest key a table of present keys is walked for, among ``size`` keys."""
    return min(DENSE_KEYS_MAX, DENSE_KEYS_PER_ELEMENT * size + 1024)


def number_column(column) -> Tuple[int, np.ndarray]:
    """(a count ``c``; a number from 0 to ``c`` - 1 per element of the 1-D ``column`` of
    numbers, equal exactly where the values are): whole numbers from 0 up to ``_dense_limit``
    are their own numbers (``c``: the largest + 1); other columns are numbered by their
    distinct values, by comparing where they are few (``_few_values``), else in ascending
    order (a sort)."""
    column = np.asarray(column)
    if column.dtype.kind == "b":
        return 2, column.astype(np.int64)
    top = column.max() if column.size else -1
    if 0 <= column.min(initial=0) and 0 <= top <= _dense_limit(column.size):   # False for NaN
        keys = column.astype(np.int64, copy=False)
        if keys is column or np.array_equal(keys, column):
            return int(top) + 1, keys
    few = _few_values(column)
    if few is not None:
        return few
    values, digits = np.unique(column, return_inverse=True)
    return len(values), digits


#: At most this many distinct values are told apart by comparing (``_few_values``) before a sort.
FEW_VALUES = 8


def _few_values(column: np.ndarray) -> Optional[Tuple[int, np.ndarray]]:
    """``number_column``'s (count, numbers) of a column of at most ``FEW_VALUES`` distinct values
    (numbered in order of first appearance), found by comparing with each in turn; None where
    it holds more (or NaN)."""
    digits = np.full(column.shape, -1, dtype=np.int64)
    for count in range(FEW_VALUES):
        left = np.flatnonzero(digits < 0)
        if not left.size:
            return count, digits
        digits[column == column[left[0]]] = count
    return (FEW_VALUES, digits) if not np.any(digits < 0) else None


def distinct_numbered(numbered: Sequence[Tuple[int, np.ndarray]]) -> Tuple[np.ndarray, np.ndarray]:
    """``distinct_rows`` of columns already numbered (``number_column``'s (count, numbers)):
    the numbers are a row's digits in mixed radix. Before a digit would take the key past
    ``_dense_limit``, the column's numbers, then the rows so far, are renumbered densely
    (``unique_inverse``)."""
    key = np.zeros(len(numbered[0][1]), dtype=np.int64)
    span, limit = 1, _dense_limit(len(key))
    for radix, digits in numbered:
        if span * radix > limit:          # a whole-number column's own numbers: number its values
            values, digits = unique_inverse(digits)
            radix = len(values)
        if span > 1 and span * radix > limit:
            values, key = unique_inverse(key)
            span = len(values)
        span *= radix
        key = key * radix + digits
    distinct, inverse = unique_inverse(key)
    first = np.empty(len(distinct), dtype=np.int64)
    first[inverse] = np.arange(len(key))
    return first, inverse


def distinct_rows(columns: Sequence[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """(one row index per distinct row of ``columns``, equal-length 1-D arrays of numbers; each
    row's index among those): rows that agree in every column share one. Each column's values
    are numbered (``number_column``) and the numbers are a row's digits in mixed radix."""
    return distinct_numbered([number_column(column) for column in columns])


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
