"""GPT-OSS's experts carry biases and clamp their gated activation's inputs; outside
Transformer Engine's fused MLP Megatron-Core runs both as kernels of their own
(``layer.MOE_UNFUSED_KERNELS``, ``moe_kernels.EXPERT_CLAMP_KERNELS`` and ``EXPERT_BIAS_KERNELS``):
their bytes and launches are priced as the source has them, only where the model and the stack
say so, and runs files, presets and exports read or refuse the fields naming them."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from sweeps.config import load_preset
from sweeps.config.specs import validate_model
from sweeps.errors import ConfigError
from tasks.model.kernels import layer
from tasks.model.kernels.model_blocks import model_block, moe_problem
from tasks.model.kernels.moe_kernels import moe_mlp_kernels
from tasks.validation.predict_runs import find_profile, predict_run, run_model, run_stack
from tasks.validation.records import RowError
from tasks.validation.runs import read_runs

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def profiles():
    return {name: load_preset("hardware", name) for name in ("h100", "b200", "gb200")}
GPT_OSS = load_preset("model", "gpt-oss-120b")
H, HEADS, SL, B, TP = 2880.0, 64.0, 4096.0, 1.0, 1.0


def _kernels(block, fused=False):
    return {k.name: k for k in layer.elementwise_kernels(H, HEADS, SL, B, TP, 2.0, block=block, moe_fused_mlp=fused)}


def test_the_clamp_and_the_bias_move_the_bytes_the_source_runs_and_only_outside_a_fused_mlp():
    block = model_block(GPT_OSS, flash=True)
    assert block.expert_bias and block.expert_clamp
    kernels = _kernels(block)
    half = SL * B * 4 * 2880 / TP           # routed rows x the expert's width: one half of FC1's output
    rows_h = SL * B * 4 * H / TP             # routed rows x H: FC2's output
    clamp, concat, bias = kernels["expert_clamp"], kernels["expert_clamp_concat"], kernels["expert_bias"]
    assert (clamp.fwd_count, clamp.fwd_bytes, clamp.bwd_bytes) == (2, pytest.approx(2 * 2 * half),
                                                                     pytest.approx(2 * 3 * half))
    assert (concat.fwd_count, concat.fwd_bytes, concat.bwd_bytes) == (1, pytest.approx(2 * 2 * 2 * half),
                                                                       pytest.approx(2 * 2 * 2 * half))
    assert (bias.fwd_bytes, bias.bwd_bytes) == (pytest.approx(2 * 14 * rows_h), pytest.approx(2 * 20 * rows_h))
    assert not set(layer.MOE_UNFUSED_KERNELS) & set(_kernels(block, fused=True))
    plain = model_block(dataclasses.replace(GPT_OSS, expert_bias=False, expert_clamp=0.0), flash=True)
    assert not set(layer.MOE_UNFUSED_KERNELS) & set(_kernels(plain))
    only_bias = model_block(dataclasses.replace(GPT_OSS, expert_clamp=0.0), flash=True)
    assert set(layer.MOE_UNFUSED_KERNELS) & set(_kernels(only_bias)) == {"expert_bias"}


def test_the_bias_launches_grow_with_the_local_experts_and_the_clamp_adds_three_a_pass():
    base = np.array(moe_mlp_kernels([2.0, 16.0], False, False))
    clamped = np.array(moe_mlp_kernels([2.0, 16.0], False, False, clamp=True))
    biased = np.array(moe_mlp_kernels([2.0, 16.0], False, False, bias=True))
    np.testing.assert_array_equal(clamped - base, [[3, 3], [3, 3]])
    np.testing.assert_array_equal(biased - base, [[2 + 2 * 2, 2 + 2 * 16], [3 + 5 * 2, 3 + 5 * 16]])


def test_the_fields_are_refused_where_they_cannot_describe_experts():
    dense = load_preset("model", "llama3-70b")
    assert moe_problem(dataclasses.replace(dense, expert_bias=True))[0] == "model.expert_bias"
    assert moe_problem(dataclasses.replace(GPT_OSS, expert_clamp=-1.0))[0] == "model.expert_clamp"
    assert moe_problem(dataclasses.replace(GPT_OSS, gated_mlp=False))[0] == "model.expert_clamp"
    with pytest.raises(ConfigError, match="model.expert_clamp"):
        validate_model(load_preset("model", "gpt-oss-120b", ["expert_clamp=-2"]))


def _gpt_oss_rows(tmp_path, edits):
    """The H100 GPT-OSS-120B row of the shipped Megatron-Bridge runs (bridge2602), once per
    ``edits`` (column -> value), as a runs file."""
    with (ROOT / "conf" / "data" / "moe_bridge_runs.csv").open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        fields = reader.fieldnames
        row = next(r for r in reader if r["source"] == "bridge2602" and r["model"] == "GPT-OSS-120B"
                   and r["hw"] == "H100")
    path = tmp_path / "gpt_oss.csv"
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows({**row, **edit} for edit in edits)
    return path


def test_a_runs_row_prices_its_experts_extras_unless_its_mlp_is_fused(tmp_path, profiles):
    path = _gpt_oss_rows(tmp_path, [{}, {"expert_bias": "false", "expert_clamp": ""}, {"moe_fused_mlp": "true"}])
    as_run, plain, fused = read_runs(path)
    assert (as_run.expert_bias, as_run.expert_clamp, as_run.moe_fused_mlp) == (True, 7.0, False)
    assert run_model(as_run).expert_clamp == 7.0 and run_stack(fused).moe_fused_mlp
    hw = find_profile(as_run.hw, profiles)
    steps = [predict_run(run, hw).step_time_s for run in (as_run, plain, fused)]
    assert steps[0] > 1.1 * steps[1] and steps[2] == pytest.approx(steps[1])
    path = _gpt_oss_rows(tmp_path, [{"expert_clamp": "-1"}])
    with pytest.raises(RowError, match="row 1: expert_clamp='-1'"):
        read_runs(path)
