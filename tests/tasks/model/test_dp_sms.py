"""The SMs NCCL holds while a DP collective runs (``LinkTier.channels``: its CTAs, one SM
each): the compute beside the hidden part of the step's DP collectives runs on the device's
other SMs, so it takes hidden x channels / SMs longer (``step.dp_comm.dp_sm_share``), with
the scale-out tier's channels where the DP group spans nodes; what the step waits for is
not charged, and a profile without a source for its channels (0) is not charged at all."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from sweeps.config import load_preset
from tasks.model.step.context import as_layouts
from tasks.model.collectives.dp_protocol import HIDING_WINDOWS
from tasks.model.step.dp_comm import dp_by_window, dp_sm_share, sm_hold_basis
from tasks.model.step.plan import StepContext, step_plan
from tasks.model.step.timeline import step_timeline
from tasks.model.terms.layout import Layout
from tasks.model.terms.specs import fingerprint

ROOT = Path(__file__).resolve().parents[3]


def _plan(hw, model, layout: Layout, devices: int, batch: int = 256):
    ctx = StepContext(model=model, hardware=hw, devices=devices, global_batch=batch, memory_fraction=float("inf"))
    return step_plan(as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx), ctx)


def _hidden(plan) -> float:
    """Seconds of the step's DP collectives that run beside compute, as the step charges them:
    each tick (the busiest stage's, bubble included) the hidden part of a micro-batch's, then
    the hidden part of those run once per step, window by window."""
    windows = dp_by_window(plan.layouts, plan.ctx, plan.compute)
    hidden = {name: sum(float(windows[f"{name}_{w}"][0] - windows[f"{name}_{w}_exposed"][0]) for w in HIDING_WINDOWS)
              for name in ("microbatch", "step")}
    return float(plan.ticks[0]) * hidden["microbatch"] + hidden["step"]


@pytest.mark.parametrize("layout, devices, channels", [
    (Layout(tp=8, pp=1, dp=8, micro_batch=1, zero="zero1"), 64, 16),   # the DP group spans 8 nodes
    (Layout(tp=1, pp=1, dp=8, micro_batch=1, zero="zero1"), 8, 24),    # all of it on one node
    (Layout(tp=2, pp=2, dp=16, micro_batch=1, zero="zero3"), 64, 16),  # gathers per micro-batch too
])
def test_hidden_dp_collectives_slow_the_compute_by_the_share_of_sms_nccl_holds(
        h100, h100_without_nccl_sms, llama, layout, devices, channels):
    plan, free = _plan(h100, llama, layout, devices), _plan(h100_without_nccl_sms, llama, layout, devices)
    hidden = _hidden(plan)
    assert hidden > 0
    assert float(dp_sm_share(plan.layouts, plan.ctx)[0]) == pytest.approx(channels / 132)
    assert float(plan.compute_time[0] - free.compute_time[0]) == pytest.approx(hidden * channels / 132, rel=1e-9)
    # what the step waits for is the same: the contention adds to the step as compute
    assert float(plan.step_time[0] - free.step_time[0]) == pytest.approx(hidden * channels / 132, rel=1e-9)
    assert float(free.dp["contention_microbatch"][0] + free.dp["contention_step"][0]) == 0.0


def test_a_step_that_hides_no_dp_collective_is_not_charged(h100, llama):
    plan = _plan(h100, llama, Layout(tp=8, pp=1, dp=1, micro_batch=1), 8, batch=16)
    assert float(plan.dp["total"][0]) == 0.0
    assert float(plan.dp["contention_microbatch"][0]) == float(plan.dp["contention_step"][0]) == 0.0


@pytest.mark.parametrize("zero, per", [("zero3", "contention_microbatch"), ("zero1", "contention_step")])
def test_the_timeline_draws_the_contention_and_ends_at_the_step(h100, llama, zero, per):
    """ZeRO-3's gathers hide behind each micro-batch; the distributed optimizer's gradient
    reduction behind the step's last backward, drawn after it."""
    plan = _plan(h100, llama, Layout(tp=2, pp=2, dp=16, micro_batch=1, zero=zero), 64)
    assert float(plan.dp[per][0]) > 0
    events = step_timeline(plan)
    assert max(e.start_s + e.duration_s for e in events) == pytest.approx(float(plan.step_time[0]), rel=1e-9)
    tail = [e for e in events if e.name.startswith("SMs held by the hidden DP collectives")]
    assert all(e.duration_s == pytest.approx(float(plan.dp["contention_step"][0])) for e in tail)
    assert bool(tail) == (float(plan.dp["contention_step"][0]) > 0)  # drawn where the step pays it


#: mi300x's fingerprint before ``LinkTier.channels`` existed (f95eb6e): its figures have not changed since.
MI300X_FINGERPRINT_BEFORE_CHANNELS = "f419be75956326b9"


def test_a_profile_without_channels_keeps_its_fingerprint():
    """Channels 0 (no source) hash as a profile written before the field existed did, so its
    stored rows keep their keys; a profile that states channels hashes them."""
    mi300x = load_preset("hardware", "mi300x")
    assert mi300x.intra_node.channels == mi300x.inter_node.channels == 0
    assert fingerprint(mi300x) == MI300X_FINGERPRINT_BEFORE_CHANNELS, "mi300x's figures changed? then update"
    h100 = load_preset("hardware", "h100")
    assert fingerprint(h100) != fingerprint(dataclasses.replace(
        h100, inter_node=dataclasses.replace(h100.inter_node, channels=8)))


def test_validate_says_where_the_sms_nccl_holds_come_from():
    """A run with DP collectives names its profile's basis; a run without them says nothing."""
    from tasks.validation.runs import read_runs
    from tasks.validation.validate import SM_HOLD_WORDS, detail_parts, validate_runs
    from sweeps.jobs.validation import load_profiles

    assert sm_hold_basis(load_preset("hardware", "h100")) == "read"
    assert sm_hold_basis(load_preset("hardware", "gb200")) == "assumed"
    assert sm_hold_basis(load_preset("hardware", "mi300x")) == "none"
    records = validate_runs(read_runs(ROOT / "conf" / "data" / "holdout_runs.csv", []), load_profiles(),
                            dataset="holdout")
    said = {}
    for record in records:
        words = [w for w in SM_HOLD_WORDS.values() if w in detail_parts(record.detail)]
        layout = f" {record.detail.split(';')[0]} "
        said.setdefault((record.hardware, " dp1 " in layout and " cp" not in layout), set()).update(words)
    assert said[("h100", False)] == {SM_HOLD_WORDS["read"]}
    assert said[("gb200", False)] == {SM_HOLD_WORDS["assumed"]}
    assert all(not words for (hw, alone), words in said.items() if alone)
