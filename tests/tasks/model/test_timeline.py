"""The projected step laid out in time (tasks.model.step.timeline): Megatron-LM's pass order, the
Trace Event format Perfetto reads, and a timeline that ends at the step model's step time."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest

from tasks.model.terms.layout import CODED_FIELDS, ZERO_MODES, Layout, decode
from tasks.model.step.plan import step_plan
from tasks.model.search.space import LayoutSpace, enumerate_layouts
from tasks.model.terms.stack import Stack
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.step.context import as_layouts
from tasks.model.step.timeline import TRACKS, pass_order, schedule, shown_stages, step_timeline, trace_json


def _plan(layout: Layout, ctx: StepContext):
    return step_plan(as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx), ctx)


@pytest.mark.parametrize("stages, microbatches, chunks", [(4, 8, 1), (4, 2, 1), (1, 3, 1), (4, 8, 2), (3, 6, 3)])
def test_every_stage_runs_each_pass_once_forward_before_backward(stages, microbatches, chunks):
    for stage in range(stages):
        order = pass_order(stage, stages, microbatches, chunks)
        assert Counter(order) == Counter([(kind, mb, c) for kind in ("forward", "backward")
                                          for mb in range(microbatches) for c in range(chunks)])
        position = {unit: i for i, unit in enumerate(order)}
        assert all(position[("forward", mb, c)] < position[("backward", mb, c)]
                   for mb in range(microbatches) for c in range(chunks))


def test_1f1b_warms_up_with_the_stages_after_it():
    # Narayanan et al. 2021 (PipeDream-Flush): stage s runs p - s - 1 forwards before its first backward
    for stage in range(4):
        order = pass_order(stage, 4, 8, 1)
        assert [kind for kind, _, _ in order].index("backward") == 4 - stage


def test_the_schedule_takes_m_plus_p_minus_1_ticks_over_v():
    # with uniform passes the pipeline takes (M + (p-1)/v) ticks (Narayanan et al. 2021)
    for stages, microbatches, chunks in ((4, 8, 1), (8, 3, 1), (4, 8, 2), (4, 12, 3)):
        runs = schedule(stages, microbatches, chunks, forward_s=1.0, backward_s=2.0)
        end = max(run[-1][4] for run in runs.values())
        assert end == pytest.approx((microbatches + (stages - 1) / chunks) * 3.0)
        assert runs[0][-1][4] == end                    # the first stage finishes last


def _feasible_layouts(ctx: StepContext, every: int):
    space = LayoutSpace(tp=[1, 2, 4, 8], pp=[1, 2, 4, 8], micro_batch=[1, 2], virtual_stages=[2])
    layouts = enumerate_layouts(space, ctx.devices)
    columns = step_columns(layouts, ctx)
    keep = np.flatnonzero(columns["status_code"] == 0)[::every]
    names = {name: decode(name, layouts[name]) for name in CODED_FIELDS}
    for i in keep:
        row = {name: values[i] for name, values in layouts.items()}
        row.update({name: str(decoded[i]) for name, decoded in names.items()})
        row["dp"] = int(columns["dp"][i])
        yield Layout(**{k: (bool(v) if k == "sequence_parallel" else v if isinstance(v, str) else int(v))
                        for k, v in row.items() if k in Layout.__dataclass_fields__}), float(columns["step_time_s"][i])


@pytest.mark.parametrize("stack", [Stack(), Stack(attention="flash", tp_overlap=True, pp_overlap=True),
                                   Stack(dp_engine="deepspeed-zero3-2021"), Stack(dp_engine="pytorch-fsdp2"),
                                   Stack(attention="flash", tp_overlap=True, pp_overlap=True,
                                         param_gather_overlap=True)],
                         ids=["megatron-2022", "overlapping", "deepspeed-zero3-2021", "pytorch-fsdp2",
                              "gather-overlap"])
def test_the_timeline_ends_at_the_step_models_step_time(gpt3, h100, stack):
    ctx = StepContext(gpt3, h100, devices=64, global_batch=64, memory_fraction=1e6, stack=stack)
    checked = Counter()
    for layout, step_time in _feasible_layouts(ctx, every=7):
        events = step_timeline(_plan(layout, ctx))
        end = max(e.start_s + e.duration_s for e in events)
        assert end == pytest.approx(step_time, rel=1e-3), layout.describe()
        checked[(layout.schedule, layout.zero)] += 1
    assert {zero for _, zero in checked} == set(ZERO_MODES) and len(checked) == 2 * len(ZERO_MODES)


def test_the_trace_is_complete_events_in_microseconds_that_nest_per_track(gpt3, h100):
    ctx = StepContext(gpt3, h100, devices=512, global_batch=256, memory_fraction=1e6)
    layout = Layout(tp=8, pp=8, dp=8, micro_batch=1, schedule="interleaved", virtual_stages=3, zero="zero1",
                    sequence_parallel=True, recompute="selective")
    events = step_timeline(_plan(layout, ctx))
    names = {stage: f"stage {stage}" for stage in shown_stages(8)}
    trace = json.loads(json.dumps(trace_json(events, names, {"layout": layout.describe()})))
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    meta = [e for e in trace["traceEvents"] if e["ph"] == "M"]
    assert {e["ph"] for e in trace["traceEvents"]} == {"X", "M"} and complete
    assert {(e["pid"], e["args"]["name"]) for e in meta if e["name"] == "process_name"} == set(names.items())
    assert {e["args"]["name"] for e in meta if e["name"] == "thread_name"} == set(TRACKS)
    by_track = defaultdict(list)
    for e in complete:
        assert isinstance(e["ts"], float) and e["ts"] >= 0 and e["dur"] >= 0 and e["cat"] in TRACKS
        by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():          # one track's events never overlap (nor, so, partly nest)
        spans.sort()
        assert all(end <= next_start + 1e-6 for (_, end), (next_start, _) in zip(spans, spans[1:]))
    step_us = float(step_columns(layout.columns(), ctx)["step_time_s"][0]) * 1e6
    assert max(end for spans in by_track.values() for _, end in spans) == pytest.approx(step_us, rel=1e-3)
    assert trace["otherData"] == {"layout": layout.describe()}


def test_hidden_communication_overlaps_compute_and_serial_communication_follows_it(gpt3, h100):
    layout = Layout(tp=8, pp=1, dp=8, micro_batch=1)
    for stack, overlapped in ((Stack(tp_overlap=False), False), (Stack(tp_overlap=True), True)):
        ctx = StepContext(gpt3, h100, devices=64, global_batch=8, memory_fraction=1e6, stack=stack)
        events = step_timeline(_plan(layout, ctx))
        compute = next(e for e in events if e.track == "compute" and e.name.startswith("forward"))
        tp = next(e for e in events if e.track == "tp" and e.name.startswith("tp forward"))
        assert (tp.start_s < compute.start_s + compute.duration_s) == overlapped
    reduce = next(e for e in events if e.name == "reduce gradients")
    last_backward = [e for e in events if e.track == "compute" and e.name.startswith("backward")][-1]
    assert reduce.start_s < last_backward.start_s + last_backward.duration_s   # hidden behind the last backward
