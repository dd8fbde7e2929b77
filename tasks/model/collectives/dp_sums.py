"""DP collectives' figures summed over each layout's own sharding mode (``dp_protocol``, as a
stack's DP engine runs it: ``dp_protocol.sharding_for``), by class: whether a collective runs
per micro-batch or once per step, whether it runs again under recomputation
(``DpCollective.under_recompute``), and the window that hides it. ``mode_sums`` adds the
collectives' figures up where the layouts are few and distinct (``step.dp_comm`` works them
out per distinct group structure, the sharding mode among it); what multiplies a class (the
micro-batch count, the recomputed share, the compute that hides a window) applies over all
the layouts (``step_sum``, ``per_pass``, ``waited``). Seconds and bytes, as the figures summed."""

from __future__ import annotations

from functools import lru_cache, reduce
from typing import Dict, List, Optional, Tuple

import numpy as np

from tasks.model.collectives import dp_protocol
from tasks.model.terms import metrics

__all__ = ["DpKey", "figure", "unhidden_tail", "mode_sums", "step_sum", "per_pass", "waited"]

#: The key of a DP collective's figure over a stage: (op, ``dp_protocol.DP_GROUPS`` entry,
#: ``dp_protocol.GRANULARITIES`` entry).
DpKey = Tuple[str, str, str]
#: The figures ``mode_sums`` adds up by (per micro-batch, repeated under recomputation).
SUMMED = ("times", "bytes", "latency")


def figure(figures: Dict[DpKey, np.ndarray], c: dp_protocol.DpCollective):
    """``c``'s figure (time or bytes over a stage) in ``figures``, 0 where it is not costed."""
    return figures.get((c.op, c.group, c.granularity), 0.0)


def unhidden_tail(c: dp_protocol.DpCollective, hidden_by: str) -> bool:
    """Whether ``c``'s tail waits however long its window lasts: a reduction's last call
    starts once the backward it sits beside has produced its gradients (Megatron-Core's
    ``finish_grad_sync``, FSDP's post-backward callback wait for it), and a weight gather
    behind the forward has nothing before its first call to hide it (the forward's first
    layer waits for its weights). A gather behind the backward is prefetched from the
    forward's end."""
    return c.op != "all_gather" or hidden_by == "forward"


def _windows(modes: List[dp_protocol.ShardingMode]) -> List[Tuple[bool, str, bool]]:
    """(per micro-batch, hidden by, needs DP overlap) of every window some mode runs, in order."""
    return list(dict.fromkeys((per_mb, *key) for per_mb in (True, False) for mode in modes
                              for key in dp_protocol.windows(mode, per_mb)))


def mode_sums(zero, table: Dict[str, dp_protocol.ShardingMode],
              figures: Dict[str, Dict[DpKey, np.ndarray]], *, per_call: bool = False) -> Dict[tuple, np.ndarray]:
    """``figures`` (per collective: ``times``, ``tails``, ``bytes``, ``latency`` and, with
    ``per_call``, ``calls``: arrays over the layouts) summed over the collectives of each
    layout's mode (``zero``: codes, as ``dp_protocol.by_mode`` reads them; ``table``: the modes
    as the engine runs them), a class a key, where some mode has one:
    (figure, per micro-batch, repeated) for ``SUMMED``; ("window", per micro-batch, hidden by,
    needs DP overlap, repeated): the window's time; ("tail", the same): the longest tail among
    the window's collectives whose tail waits (``unhidden_tail``). With ``per_call``, also each
    window's i-th collective alone: ("member", i, per micro-batch, hidden by, needs DP overlap,
    repeated) its time and ("member_calls", i, ...) its calls (``waited``'s ``call_cap``).
    Which collectives each class holds in each mode depends on ``table`` alone
    (``_class_members``, found once a table)."""
    out: Dict[tuple, np.ndarray] = {}
    for key, (name, members) in _class_members(tuple(table.values()), per_call).items():
        combine = np.maximum if key[0] == "tail" else np.add
        out[key] = dp_protocol.by_mode(zero, lambda mode, n=name, m=members, f=combine: reduce(
            f, (figure(figures[n], c) for c in m[mode.name]), 0.0), table)
    return out


@lru_cache(maxsize=32)
def _class_members(modes: Tuple[dp_protocol.ShardingMode, ...],
                   per_call: bool = False) -> Dict[tuple, Tuple[str, Dict[str, tuple]]]:
    """Each class ``mode_sums`` keys that some mode of ``modes`` has: (the figure it reads, the
    collectives it combines in each mode, by the mode's name); a tail's members are those whose
    tail waits (``unhidden_tail``); with ``per_call``, a window's i-th collective's time and calls."""
    out: Dict[tuple, Tuple[str, Dict[str, tuple]]] = {}

    def add(key: tuple, name: str, chosen) -> None:
        members = {mode.name: tuple(chosen(mode)) for mode in modes}
        if any(members.values()):
            out[key] = (name, members)

    for name in SUMMED:
        for per_mb in (True, False):
            for repeated in (False, True):
                add((name, per_mb, repeated), name,
                    lambda mode, p=per_mb, r=repeated: [c for c in mode.collectives
                                                        if c.per_microbatch == p and c.under_recompute == r])
    for per_mb, hidden_by, needs_overlap in _windows(list(modes)):
        for repeated in (False, True):
            def in_window(mode, key=(hidden_by, needs_overlap), p=per_mb, r=repeated):
                return [c for c in dp_protocol.windows(mode, p).get(key, ()) if c.under_recompute == r]
            window = ("window", per_mb, hidden_by, needs_overlap, repeated)
            add(window, "times", in_window)
            if window in out:
                out[("tail", *window[1:])] = ("tails", {mode: tuple(c for c in chosen if unhidden_tail(c, hidden_by))
                                                        for mode, chosen in out[window][1].items()})
            if per_call and window in out and hidden_by != "none":
                for i in range(max(len(chosen) for chosen in out[window][1].values())):
                    def nth(mode, w=in_window, n=i):
                        return w(mode)[n:n + 1]
                    add(("member", i, *window[1:]), "times", nth)
                    add(("member_calls", i, *window[1:]), "calls", nth)
    return out


def _with_repeats(sums: Dict[tuple, np.ndarray], key: tuple, recomputed_share):
    """The class ``key`` (without its last, repeated, field) once, and its repeated part times
    ``recomputed_share``; 0 where neither exists."""
    once, again = sums.get((*key, False)), sums.get((*key, True))
    out = 0.0 if once is None else once
    return out if again is None else out + recomputed_share * again


def step_sum(sums: Dict[tuple, np.ndarray], name: str, *, microbatches, recomputed_share) -> np.ndarray:
    """A step's sum of the figure ``name`` over each layout's collectives: once per micro-batch
    (``microbatches`` a step) for those run per micro-batch, and again for the share of the
    layers recomputed (``recomputed_share``) for those repeated."""
    shape = np.broadcast(np.asarray(microbatches), np.asarray(recomputed_share)).shape
    return microbatches * _with_repeats(sums, (name, True), recomputed_share) \
        + _with_repeats(sums, (name, False), recomputed_share) + np.zeros(shape)


def per_pass(sums: Dict[tuple, np.ndarray], name: str, *, recomputed_share) -> Tuple[np.ndarray, np.ndarray]:
    """(per micro-batch, once per step) sums of the figure ``name``, the repeated collectives'
    times ``recomputed_share``."""
    zeros = np.zeros(np.shape(recomputed_share))
    return (zeros + _with_repeats(sums, (name, True), recomputed_share),
            zeros + _with_repeats(sums, (name, False), recomputed_share))


def waited(sums: Dict[tuple, np.ndarray], per_microbatch: bool, *, hide: Dict[str, np.ndarray], recomputed_share,
           dp_overlap: bool, slowdown: float = 1.0, only: Optional[str] = None, exposed: bool = True,
           call_cap: Optional[Dict[str, np.ndarray]] = None) -> np.ndarray:
    """What of each layout's DP collectives run per micro-batch (or once per step) the step
    waits for, window by window (``only``: that window alone): all of a window's time beyond
    what its compute hides (``hide``, seconds by window; overlapped communication slowed by
    ``slowdown``), and never less than the longest tail of its collectives (``unhidden_tail``);
    a window needing DP overlap hides only under ``dp_overlap``. With ``call_cap`` (seconds by
    window: what one call may hide behind, ``dp_protocol.DpEngine.overlap_kernels``; the sums
    need ``mode_sums``' ``per_call``), never less than what each collective's calls last beyond
    their caps either. With ``exposed`` False, all of their time. A window a layout's mode does
    not run adds 0."""
    out = np.zeros(np.shape(recomputed_share))
    for per_mb, hidden_by, needs_overlap in dict.fromkeys(key[1:4] for key in sums if key[0] == "window"):
        if per_mb != per_microbatch or (only is not None and hidden_by != only):
            continue
        t = _with_repeats(sums, ("window", per_mb, hidden_by, needs_overlap), recomputed_share)
        if exposed and hidden_by != "none" and (dp_overlap or not needs_overlap):
            tail = sums.get(("tail", per_mb, hidden_by, needs_overlap, False), 0.0)
            again = sums.get(("tail", per_mb, hidden_by, needs_overlap, True))
            if again is not None:
                tail = np.maximum(tail, again * (np.asarray(recomputed_share) > 0))
            t = np.maximum(metrics.exposed_communication(0.0, t, hide[hidden_by], slowdown), tail)
            if call_cap is not None:
                t = np.maximum(t, _beyond_caps(sums, (per_mb, hidden_by, needs_overlap), call_cap[hidden_by],
                                               recomputed_share, slowdown))
        out = out + t
    return out


def _beyond_caps(sums: Dict[tuple, np.ndarray], window: tuple, cap, recomputed_share, slowdown: float) -> np.ndarray:
    """What a window's collectives last beyond the compute each call may hide behind (``cap``
    seconds a call): each collective's time (slowed by ``slowdown``) less its calls times the
    cap, at least 0, summed over the window's collectives (``mode_sums``' ``member`` classes)."""
    out = np.zeros(np.shape(recomputed_share))
    for i in dict.fromkeys(key[1] for key in sums if key[0] == "member" and key[2:5] == window):
        t = _with_repeats(sums, ("member", i, *window), recomputed_share)
        calls = _with_repeats(sums, ("member_calls", i, *window), recomputed_share)
        out = out + np.maximum(metrics.overlapped_communication(t, slowdown) - np.asarray(calls) * cap, 0.0)
    return out
