"""The host's launch path (Stack.host_launch_us): a micro-batch lasts at least its kernels
times the host's time per kernel, however fast the device."""

from __future__ import annotations

import dataclasses

import pytest

from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import HOST_LAUNCH_US, Stack
from tasks.model.step.plan import StepContext, step_columns


def _compute_s(ctx: StepContext, layout: Layout) -> float:
    return float(step_columns(layout.columns(), ctx)["compute_s"][0])


def test_a_device_far_faster_than_its_host_waits_for_the_host(gpt3, h100_without_nccl_sms):
    layout = Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1")
    eager = StepContext(gpt3, h100_without_nccl_sms, devices=64, global_batch=64, memory_fraction=1e6, flop_vs_bw=1e4)
    graphs = dataclasses.replace(eager, stack=Stack(host_launch_us=0.0))
    today = dataclasses.replace(eager, flop_vs_bw=1.0)
    # Today's device takes longer than its host (about 3x at this layout): the host never paces it.
    assert _compute_s(today, layout) > 2 * _compute_s(eager, layout)
    # 10^4 times faster, it waits for the host's launches, and the step's compute is the
    # host's time, in proportion to it; with no host work between kernels (CUDA graphs) the
    # step keeps the device's own time.
    assert _compute_s(eager, layout) > 100 * _compute_s(graphs, layout)
    slower_host = dataclasses.replace(eager, stack=Stack(host_launch_us=2 * HOST_LAUNCH_US))
    assert _compute_s(slower_host, layout) == pytest.approx(2 * _compute_s(eager, layout), rel=1e-9)


def test_a_negative_host_time_is_refused():
    with pytest.raises(ValueError, match="host_launch_us=-1.0"):
        Stack(host_launch_us=-1.0)


def test_the_kernels_the_model_counts_are_those_the_measured_layer_launched(h100):
    """The host's figure is per kernel: the plain torch.nn layer measured on an H200 (run2 of
    conf/data/device/h200-2026-11-27, H 256, 4 heads, SL 128, fused attention, no dropout) ran 52
    kernels a training step, unfused; the model counts that layer's kernels, eager, within 10 %."""
    import json

    from conf import CONF_DIR
    from tasks.model.kernels.layer import Block
    from tasks.model.kernels.layer_cost import layer_cost

    run = json.loads((CONF_DIR / "data/device/h200-2026-11-27/run2/device_check.json").read_text())
    measured = next(r for r in run["launch"]["layers"] if r["layer"] == "plain" and r["shape"]["h"] == 256)
    cost = layer_cost(256.0, 4.0, 128.0, 1.0, 1.0, h100, block=Block(flash=True, dropout=False),
                      stack=Stack(attention="flash", elementwise="eager"))
    assert 3 * cost.kernels_fwd == pytest.approx(measured["kernels"], rel=0.10)
    assert measured["host_us_per_kernel"] == pytest.approx(HOST_LAUNCH_US, rel=0.01)
