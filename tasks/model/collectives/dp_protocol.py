"""The data-parallel protocol of each way of sharding model states (``layout.ZERO_MODES``):
which model states it splits over the DP group, which collectives it runs on a stage's
weights, how often, and what compute each may hide behind. The one statement of it: the
step's DP time, its DP traffic, its latency floor, the memory of its model states and a
winner's per-layer comparison all read ``SHARDING`` (a new mode is one entry here).

Sources: Rajbhandari et al. 2020 (ZeRO, arXiv 1910.02054) §5 for what each stage shards and
moves; PyTorch FSDP FULL_SHARD with gradient accumulation under ``no_sync`` (Zhao et al.
2023, arXiv 2304.11277: parameters gathered before the forward and again before the backward
of each unit, gradients kept unsharded across micro-batches and reduce-scattered once);
Megatron-LM's DDP and distributed optimizer (gradients reduced once per step behind
the last micro-batch's backward with ``overlap_grad_reduce``, the updated weights gathered
after the optimizer step).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, FrozenSet, Tuple

import numpy as np

from tasks.model.terms.layout import ZERO_MODES, code

__all__ = ["DpCollective", "ShardingMode", "SHARDING", "HIDING_WINDOWS", "by_mode", "shards", "windows"]

#: What compute a DP collective may run behind: the micro-batch's forward or backward on
#: the stage, or nothing (the step waits for all of it).
HIDING_WINDOWS: Tuple[str, ...] = ("forward", "backward", "none")


@dataclass(frozen=True)
class DpCollective:
    """One collective a sharding mode runs on each of a stage's weight tensors (a layer's, and
    the stage's embedding matrices').

    ``op``: all_reduce, reduce_scatter or all_gather (its bytes per value:
    ``step.comm.dp_widths``). ``per_microbatch``: it runs every micro-batch, else once per
    step. ``hidden_by``: a ``HIDING_WINDOWS`` entry. ``needs_dp_overlap``: it hides only
    when the stack overlaps gradient reduction (``Stack.dp_overlap``); otherwise always where
    its window lasts (a prefetched gather)."""

    op: str
    per_microbatch: bool
    hidden_by: str
    needs_dp_overlap: bool = False


@dataclass(frozen=True)
class ShardingMode:
    """A ``layout.ZERO_MODES`` entry: the model states it splits over DP ("weights",
    "gradients", "optimizer") and the collectives it runs, in the order they run."""

    name: str
    shards: FrozenSet[str]
    collectives: Tuple[DpCollective, ...]


_REDUCE_BEHIND_BACKWARD = dict(hidden_by="backward", needs_dp_overlap=True)

#: Every sharding mode, in ``ZERO_MODES`` order.
SHARDING: Dict[str, ShardingMode] = {
    # plain DP: gradients all-reduced once per step
    "none": ShardingMode("none", frozenset(), (
        DpCollective("all_reduce", False, **_REDUCE_BEHIND_BACKWARD),)),
    # ZeRO-1 / distributed optimizer: gradients reduce-scattered once, updated weights all-gathered after the optimizer
    "zero1": ShardingMode("zero1", frozenset({"optimizer"}), (
        DpCollective("reduce_scatter", False, **_REDUCE_BEHIND_BACKWARD),
        DpCollective("all_gather", False, "none"))),
    # ZeRO-3: weights gathered for the forward and again for the backward, gradients reduce-scattered every micro-batch
    "zero3": ShardingMode("zero3", frozenset({"weights", "gradients", "optimizer"}), (
        DpCollective("all_gather", True, "forward"),
        DpCollective("all_gather", True, "backward"),
        DpCollective("reduce_scatter", True, "backward"))),
    # FSDP FULL_SHARD under no_sync: weights gathered twice every micro-batch, gradients reduce-scattered once per step
    "fsdp": ShardingMode("fsdp", frozenset({"weights", "optimizer"}), (
        DpCollective("all_gather", True, "forward"),
        DpCollective("all_gather", True, "backward"),
        DpCollective("reduce_scatter", False, **_REDUCE_BEHIND_BACKWARD))),
}
assert tuple(SHARDING) == ZERO_MODES and all(code("zero", name) == i for i, name in enumerate(SHARDING)), \
    "one sharding mode per layout.ZERO_MODES entry, in its order, numbered as its code"


def by_mode(zero, value: Callable[[ShardingMode], object]) -> np.ndarray:
    """``value(mode)`` for each layout's mode: ``zero`` holds codes (``layout.code``, which
    number the modes in ``SHARDING``'s order); each value is a scalar or an array shaped like
    ``zero``. One pass over the layouts, whatever the number of modes."""
    zero = np.asarray(zero)
    return np.choose(zero, [np.asarray(value(mode), dtype=np.float64) for mode in SHARDING.values()])


def shards(zero, state: str) -> np.ndarray:
    """Whether each layout's mode (codes) splits ``state`` ("weights", "gradients",
    "optimizer") over its DP group."""
    return np.asarray([state in mode.shards for mode in SHARDING.values()])[np.asarray(zero)]


def windows(mode: ShardingMode, per_microbatch: bool) -> Dict[Tuple[str, bool], Tuple[str, ...]]:
    """The ops of ``mode``'s collectives that run per micro-batch (or once per step), grouped
    by what hides them: {(hidden_by, needs_dp_overlap): ops in running order}. Collectives
    sharing a window hide together: the window's compute covers their sum."""
    grouped: Dict[Tuple[str, bool], Tuple[str, ...]] = {}
    for c in mode.collectives:
        if c.per_microbatch == per_microbatch:
            key = (c.hidden_by, c.needs_dp_overlap)
            grouped[key] = grouped.get(key, ()) + (c.op,)
    return grouped
