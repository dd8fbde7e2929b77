"""A mixture of experts' all-to-alls under Megatron-Core's combined 1F1B schedule
(``Stack.moe_a2a_overlap``): the passes no other micro-batch's pass runs beside (the first
forward and last backward without a pipeline; the first stage's warm-up forwards and cool-down
backwards when interleaved) wait for their exchange once a step; a 1F1B pipeline, which
Megatron-Core refuses the overlap, waits for every exchange; and the timeline still ends at
the step time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sweeps.config import load_preset
from tasks.model.step.comm import lone_microbatches
from tasks.model.step.context import as_layouts
from tasks.model.step.plan import StepContext, step_columns, step_plan
from tasks.model.step.timeline import step_timeline
from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import Stack

QWEN3_30B = load_preset("model", "qwen3-30b-a3b")
OVERLAP = Stack(attention="flash", gemm_precision="bf16", cross_entropy="te", moe_a2a_overlap=True)


def _context(hw, stack=OVERLAP, devices=64, batch=256):
    return StepContext(model=QWEN3_30B, hardware=hw, devices=devices, global_batch=batch, stack=stack,
                       memory_fraction=float("inf"))


def _plan(layout: Layout, ctx: StepContext):
    return step_plan(as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx), ctx)


@pytest.mark.parametrize("pp, schedule, v, microbatches, lone", [
    (1, "1f1b", 1, 16, 1.0),                          # the first forward and the last backward
    (4, "interleaved", 4, 64, (2 * 3 + 3 * 4 + 1) / 4),   # 19 warm-up chunks, as many cool-down
    (8, "interleaved", 2, 64, (2 * 7 + 1 * 8 + 1) / 2),
    (8, "interleaved", 4, 4, 4.0),                    # more warm-up than the step has: all of it
])
def test_the_lone_passes_are_megatron_cores_warm_up_and_cool_down(h100, pp, schedule, v, microbatches, lone):
    ctx = _context(h100, devices=8 * pp, batch=8 * microbatches)
    layout = Layout(tp=1, pp=pp, dp=8, micro_batch=1, schedule=schedule, virtual_stages=v, ep=8, zero="zero1")
    lay = as_layouts(layout.columns(), np.asarray([8.0]), ctx)
    assert float(lay.microbatches[0]) == microbatches
    assert float(lone_microbatches(lay)[0]) == pytest.approx(lone)


def test_the_unpartnered_passes_wait_for_their_exchange_once_a_step(h100):
    ctx = _context(h100)
    layout = Layout(tp=1, pp=4, dp=16, micro_batch=1, schedule="interleaved", virtual_stages=4, ep=16, zero="zero1")
    plan = _plan(layout, ctx)
    ep = plan.ep
    hidden = float(ep["total"][0] - ep["exposed"][0])
    assert hidden > 0.0                                                   # the overlap hides some of it
    assert float(ep["lone"][0]) == pytest.approx(float(lone_microbatches(plan.layouts)[0]) * hidden)
    step = float(plan.ticks[0] * plan.tick[0] + plan.dp["contention_step"][0] + plan.dp["per_step"][0]
                 + ep["lone"][0] + plan.optimizer[0])
    assert float(plan.step_time[0]) == pytest.approx(step, rel=1e-12)
    out = step_columns(layout.columns(), ctx)
    assert float(out["ep_exposed_s"][0]) == pytest.approx(float(plan.ticks[0] * ep["exposed"][0] + ep["lone"][0]))
    events = step_timeline(plan)
    assert max(e.start_s + e.duration_s for e in events) == pytest.approx(float(plan.step_time[0]), rel=1e-3)
    assert any(e.track == "ep" and "nothing hides" in e.name for e in events)
    # without the overlap nothing is hidden and nothing waits again
    plain = _plan(layout, _context(h100, stack=dataclasses.replace(OVERLAP, moe_a2a_overlap=False)))
    assert float(plain.ep["lone"][0]) == 0.0
    assert float(plain.ep["exposed"][0]) == pytest.approx(float(plain.ep["total"][0]))


def test_a_1f1b_pipeline_waits_for_every_exchange(h100):
    ctx = _context(h100)
    one_f_one_b = _plan(Layout(tp=1, pp=4, dp=16, micro_batch=1, ep=16, zero="zero1"), ctx)
    assert float(one_f_one_b.ep["exposed"][0]) == pytest.approx(float(one_f_one_b.ep["total"][0]))
    assert float(one_f_one_b.ep["lone"][0]) == 0.0
    no_pipeline = _plan(Layout(tp=1, pp=1, dp=64, micro_batch=1, ep=16, zero="zero1"), ctx)
    assert float(no_pipeline.ep["exposed"][0]) < float(no_pipeline.ep["total"][0])
