"""One projected training step laid out in time, from its plan (``tasks.model.step.plan``), as
complete events of the Trace Event format that Chrome's tracing and Perfetto open.

The step model charges every pipeline stage the busiest stage's tick: one micro-batch's
forward pass (``forward_s``) and backward pass (``backward_s``), each its compute and then
the communication it waits for (TP, CP's exchange of keys and values, PP, and DP collectives
run per micro-batch). The passes
run in Megatron-LM's order (``pass_order``: 1F1B, or the interleaved schedule's chunks of
``virtual_stages``), each starting when its stage is free and its input has arrived from the
stage before (forward) or after (backward). After a stage's last backward come the DP
collectives run once per step and the optimizer step. A communication event ends where the
step stops waiting for it and lasts its whole time, so what hid behind compute shows as
overlap. With the analytic model's uniform stages the last event ends at the step model's
step time. Seconds inside, microseconds in the trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from tasks.model.collectives.dp_protocol import HIDING_WINDOWS
from tasks.model.step.plan import StepPlan
from tasks.model.step.dp_comm import dp_by_window

__all__ = ["TRACKS", "PassTimes", "TimelineEvent", "pass_times", "pass_order", "schedule", "shown_stages",
           "step_timeline", "trace_json"]

#: One track (a trace "thread") per kind of work on each stage, in this order.
TRACKS: Tuple[str, ...] = ("compute", "tp", "cp", "ep", "pp", "dp")


@dataclass(frozen=True)
class PassTimes:
    """One micro-batch's passes on the busiest stage, from one layout of a plan (seconds).

    ``forward_s``/``backward_s``: each pass as the step waits for it. ``compute``,
    ``exposed`` and ``total`` map a pass ("forward", "backward") to its compute, the
    communication it waits for by track, and all of each track's communication.
    ``step_tail``: what follows a stage's last backward, in order: (track, name, exposed,
    total); a weight gather the stack overlaps with the next step's forward
    (``Stack.param_gather_overlap``) is drawn last, its wait where the step waits for it.
    ``ticks``, ``step_s``: the plan's ticks and step time."""

    forward_s: float
    backward_s: float
    compute: Dict[str, float]
    exposed: Dict[str, Dict[str, float]]
    total: Dict[str, Dict[str, float]]
    step_tail: Tuple[Tuple[str, str, float, float], ...]
    ticks: float
    step_s: float


def pass_times(plan: StepPlan, row: int = 0) -> PassTimes:
    """The passes of layout ``row`` of ``plan``: the forward holds the layers' forward, the
    logits GEMM and the loss, the TP collectives of the forward and the embedding's, half of
    the PP sends, the CP exchange and the MoE dispatch and combine of the first forward, and the
    DP collectives hidden by the forward; the backward holds the rest (recomputation's repeats
    of TP, CP and EP among them)."""
    lay, compute, tp, pp, cp, ep = plan.layouts, plan.compute, plan.tp, plan.pp, plan.cp, plan.ep
    dp = dp_by_window(lay, plan.ctx, compute)

    def at(values) -> float:
        return float(np.asarray(values).reshape(-1)[row])

    # The SMs the hidden DP collectives hold slow the compute beside them: each pass by its own
    # window's (``dp_comm.dp_by_window``), the collectives run once per step after the last backward.
    forward_compute = at(compute["forward"]) + at(dp["microbatch_forward_contention"])
    compute_s = {"forward": forward_compute,
                 "backward": at(compute["per_microbatch"]) - at(compute["forward"])
                 + at(dp["microbatch_backward_contention"]) + at(dp["microbatch_none_contention"])}
    step_contention = sum(at(dp[f"step_{window}_contention"]) for window in HIDING_WINDOWS)
    exposed = {"forward": {"tp": at(tp["forward_exposed"]), "cp": at(cp["forward_exposed"]),
                           "ep": at(ep["forward_exposed"]), "pp": at(pp["exposed"]) / 2.0,
                           "dp": at(dp["microbatch_forward_exposed"])},
               "backward": {"tp": at(tp["backward_exposed"]), "cp": at(cp["exposed"]) - at(cp["forward_exposed"]),
                            "ep": at(ep["exposed"]) - at(ep["forward_exposed"]), "pp": at(pp["exposed"]) / 2.0,
                            "dp": at(dp["microbatch_backward_exposed"]) + at(dp["microbatch_none_exposed"])}}
    total = {"forward": {"tp": at(tp["forward_total"]), "cp": at(cp["forward_total"]),
                         "ep": at(ep["forward_total"]), "pp": at(pp["total"]) / 2.0,
                         "dp": at(dp["microbatch_forward"])},
             "backward": {"tp": at(tp["backward_total"]), "cp": at(cp["total"]) - at(cp["forward_total"]),
                          "ep": at(ep["total"]) - at(ep["forward_total"]), "pp": at(pp["total"]) / 2.0,
                          "dp": at(dp["microbatch_backward"]) + at(dp["microbatch_none"])}}
    lone = at(ep["lone"])
    tail = (("ep", "dispatch and combine of the passes nothing hides", lone, lone),
            ("dp", "reduce gradients", at(dp["step_backward_exposed"]), at(dp["step_backward"])),
            ("compute", "SMs held by the hidden DP collectives run once per step", step_contention,
             step_contention),
            ("compute", "optimizer step", at(plan.optimizer), at(plan.optimizer)),
            ("dp", "gather updated weights", at(dp["step_none_exposed"]), at(dp["step_none"])),
            ("dp", "gather updated weights behind the next forward", at(dp["step_forward_exposed"]),
             at(dp["step_forward"])))
    return PassTimes(forward_s=compute_s["forward"] + sum(exposed["forward"].values()),
                     backward_s=compute_s["backward"] + sum(exposed["backward"].values()),
                     compute=compute_s, exposed=exposed, total=total, step_tail=tail,
                     ticks=at(plan.ticks), step_s=at(plan.step_time))


def pass_order(stage: int, stages: int, microbatches: int, chunks: int) -> List[Tuple[str, int, int]]:
    """The passes one pipeline stage runs, in order, as (pass, micro-batch, model chunk), the
    way Megatron-LM's schedules order them: warm-up forwards, then one forward and one
    backward in turn, then the remaining backwards. 1F1B (``chunks`` 1) warms up with
    ``stages - stage - 1`` forwards; the interleaved schedule with
    ``2 (stages - stage - 1) + (chunks - 1) stages``, and runs the micro-batches in groups
    of ``stages``, each group through every chunk (backwards through the chunks in reverse)."""
    total = microbatches * chunks

    def unit(k: int, backward: bool) -> Tuple[int, int]:
        group, within = divmod(k, stages * chunks)
        size = min(stages, microbatches - group * stages)
        chunk, offset = divmod(within, size)
        return group * stages + offset, (chunks - 1 - chunk) if backward else chunk

    warmup = stages - stage - 1 if chunks == 1 else 2 * (stages - stage - 1) + (chunks - 1) * stages
    warmup = min(warmup, total)
    order = [("forward", *unit(k, False)) for k in range(warmup)]
    for k in range(total - warmup):
        order += [("forward", *unit(warmup + k, False)), ("backward", *unit(k, True))]
    order += [("backward", *unit(k, True)) for k in range(total - warmup, total)]
    return order


def schedule(stages: int, microbatches: int, chunks: int, forward_s: float,
             backward_s: float) -> Dict[int, List[Tuple[str, int, int, float, float]]]:
    """Start and end (seconds) of every pass of every stage: stage -> [(pass, micro-batch,
    chunk, start, end)]. A chunk's pass lasts its pass time over ``chunks``; a forward waits
    for the same micro-batch's forward on the stage (and chunk) before it, a backward for its
    backward on the stage after (the last stage's, for its own forward)."""
    orders = {s: pass_order(s, stages, microbatches, chunks) for s in range(stages)}
    duration = {"forward": forward_s / chunks, "backward": backward_s / chunks}
    done: Dict[Tuple[str, int, int, int], float] = {}
    position = {s: 0 for s in range(stages)}
    free = {s: 0.0 for s in range(stages)}
    out: Dict[int, List[Tuple[str, int, int, float, float]]] = {s: [] for s in range(stages)}
    remaining = sum(len(o) for o in orders.values())
    while remaining:
        progressed = False
        for s in range(stages):
            while position[s] < len(orders[s]):
                kind, mb, chunk = orders[s][position[s]]
                ready = _ready(done, kind, mb, chunk, s, stages, chunks)
                if ready is None:
                    break
                start = max(free[s], ready)
                free[s] = start + duration[kind]
                done[(kind, mb, chunk, s)] = free[s]
                out[s].append((kind, mb, chunk, start, free[s]))
                position[s] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError("the pipeline schedule deadlocked")  # a bug in pass_order, never input
    return out


def _ready(done, kind: str, mb: int, chunk: int, stage: int, stages: int, chunks: int) -> Optional[float]:
    """When a pass's input is there (None: not yet). Virtual stage ``chunk * stages + stage``
    follows the one before it for the forward and the one after it for the backward."""
    virtual = chunk * stages + stage
    last = chunks * stages - 1
    if kind == "forward":
        if virtual == 0:
            return 0.0
        prev_chunk, prev_stage = divmod(virtual - 1, stages)
        return done.get(("forward", mb, prev_chunk, prev_stage))
    if virtual == last:
        return done.get(("forward", mb, chunk, stage))
    next_chunk, next_stage = divmod(virtual + 1, stages)
    return done.get(("backward", mb, next_chunk, next_stage))


def shown_stages(stages: int) -> List[int]:
    """Stages drawn: all of up to four; of more, the first, the last and the busiest. Every
    stage is charged the busiest's tick, and the first, which holds the most micro-batches
    in flight, finishes last: it stands for the busiest."""
    return list(range(stages)) if stages <= 4 else [0, stages - 1]


@dataclass
class TimelineEvent:
    """One complete event: ``stage`` (a trace process), ``track`` (``TRACKS``), a name,
    start and duration in seconds, and details."""

    stage: int
    track: str
    name: str
    start_s: float
    duration_s: float
    args: Dict[str, object] = field(default_factory=dict)


def step_timeline(plan: StepPlan, row: int = 0, stages: Optional[Sequence[int]] = None) -> List[TimelineEvent]:
    """Every event of layout ``row``'s step on ``stages`` (default ``shown_stages``)."""
    lay = plan.layouts
    pp, chunks = int(np.asarray(lay.pp).reshape(-1)[row]), int(np.asarray(lay.stages).reshape(-1)[row])
    microbatches = int(np.asarray(lay.microbatches).reshape(-1)[row])
    times = pass_times(plan, row)
    runs = schedule(pp, microbatches, chunks, times.forward_s, times.backward_s)
    events: List[TimelineEvent] = []
    for stage in (shown_stages(pp) if stages is None else stages):
        track_end = {track: 0.0 for track in TRACKS}
        for kind, mb, chunk, start, _ in runs[stage]:
            events += _pass_events(stage, kind, mb, chunk, start, chunks, times, track_end)
        events += _tail_events(stage, runs[stage][-1][4], times, track_end)
    return events


def _pass_events(stage: int, kind: str, mb: int, chunk: int, start: float, chunks: int, times: PassTimes,
                 track_end: Dict[str, float]) -> Iterator[TimelineEvent]:
    """A pass's compute, then what it waits for of each track; each track's event ends where
    its wait ends and lasts its whole time (no earlier than the track's last event)."""
    label = f"{kind} mb{mb}" + (f" chunk{chunk}" if chunks > 1 else "")
    compute = times.compute[kind] / chunks
    yield from _placed(stage, "compute", label, start, compute, track_end, {"micro_batch": mb, "chunk": chunk})
    at = start + compute
    for track in ("tp", "cp", "ep", "pp", "dp"):
        exposed, total = times.exposed[kind][track] / chunks, times.total[kind][track] / chunks
        at += exposed
        if total > 0.0:
            yield from _placed(stage, track, f"{track} {label}", at - total, total, track_end,
                               {"exposed_us": exposed * 1e6})


def _tail_events(stage: int, start: float, times: PassTimes,
                 track_end: Dict[str, float]) -> Iterator[TimelineEvent]:
    at = start
    for track, name, exposed, total in times.step_tail:
        at += exposed
        if total > 0.0:
            yield from _placed(stage, track, name, at - total, total, track_end, {"exposed_us": exposed * 1e6})


def _placed(stage: int, track: str, name: str, start: float, duration: float, track_end: Dict[str, float],
            args: Dict[str, object]) -> Iterator[TimelineEvent]:
    """The event, moved no earlier than its track's last event's end (events of a track never
    overlap), keeping its end where it can."""
    begin = max(start, track_end[track])
    end = max(start + duration, begin)
    track_end[track] = end
    yield TimelineEvent(stage, track, name, begin, end - begin, args)


def trace_json(events: Sequence[TimelineEvent], stage_names: Dict[int, str],
               metadata: Dict[str, object]) -> Dict[str, object]:
    """The Trace Event format (JSON object form): a process per stage named by
    ``stage_names``, a thread per ``TRACKS`` entry, complete ("X") events in microseconds,
    and ``metadata`` under ``otherData``."""
    trace: List[Dict[str, object]] = []
    for stage, name in stage_names.items():
        trace.append({"ph": "M", "name": "process_name", "pid": stage, "tid": 0, "args": {"name": name}})
        trace.append({"ph": "M", "name": "process_sort_index", "pid": stage, "tid": 0, "args": {"sort_index": stage}})
        for tid, track in enumerate(TRACKS, start=1):
            trace.append({"ph": "M", "name": "thread_name", "pid": stage, "tid": tid, "args": {"name": track}})
    tids = {track: tid for tid, track in enumerate(TRACKS, start=1)}
    for e in events:
        trace.append({"ph": "X", "name": e.name, "cat": e.track, "pid": e.stage, "tid": tids[e.track],
                      "ts": e.start_s * 1e6, "dur": e.duration_s * 1e6, "args": e.args})
    return {"traceEvents": trace, "displayTimeUnit": "ms", "otherData": metadata}
