"""An fp8 run's scaling recipe (``Stack.fp8_recipe``): per-tensor current scaling (tensorwise)
reads each 16-bit GEMM input once more for its amax before the cast, except the inputs a
Transformer Engine norm writes with the amax (``layer_cost.NORM_FED_GEMMS``); delayed, MXFP8
and blockwise scaling find their scales without that pass."""

from __future__ import annotations

import csv

import pytest

from conf import CONF_DIR
from sweeps.config import load_preset
from tasks.model.kernels import layer
from tasks.model.kernels.layer_cost import FP8_AMAX_PASS_BYTES, NORM_FED_GEMMS, layer_cost
from tasks.model.kernels.model_blocks import model_block
from tasks.model.kernels.roofline import memory_bound_time
from tasks.model.terms.stack import FP8_RECIPES, Stack
from tasks.validation.runs import read_runs

DATA = CONF_DIR / "data"

#: Llama 3 70B at TP 4, one sequence of 8,192 tokens: every cast far above a kernel's launch floor.
H, HEADS, SL, B, TP = 8192.0, 64.0, 8192.0, 1.0, 4.0


def _cost(llama, hw, recipe: str):
    block = model_block(llama, flash=True)
    return layer_cost(H, HEADS, SL, B, TP, hw, block=block,
                      stack=Stack(attention="flash", gemm_precision="fp8", fp8_recipe=recipe))


def _amax_time(gemms, elements, hw) -> float:
    """Seconds of the amax pass over ``elements(g)`` of each GEMM in ``gemms``."""
    return float(sum(memory_bound_time(FP8_AMAX_PASS_BYTES * elements(g), hw, floored=False) for g in gemms))


def test_current_scaling_reads_the_unnormed_inputs_and_every_incoming_gradient_once_more(llama, h100):
    delayed, current = _cost(llama, h100, "delayed"), _cost(llama, h100, "tensorwise")
    forward = [g for g in layer.gemm_shapes(H, HEADS, SL, B, TP, model_block(llama, flash=True))
               if g.pass_ == "fwd" and g.name in ("qkv", "attn_out", "fc1", "fc2")]
    assert {g.name for g in forward} - set(NORM_FED_GEMMS) == {"attn_out", "fc2"}
    unnormed = [g for g in forward if g.name not in NORM_FED_GEMMS]
    assert float(current.elementwise_fwd - delayed.elementwise_fwd) == pytest.approx(
        _amax_time(unnormed, lambda g: g.batch * g.m * g.k, h100), rel=1e-9)
    assert float(current.elementwise_bwd - delayed.elementwise_bwd) == pytest.approx(
        _amax_time(forward, lambda g: g.batch * g.m * g.n, h100), rel=1e-9)
    # the recipe moves bytes only: the GEMMs and the kernels counted stay as they were
    assert float(current.gemm_fwd) == float(delayed.gemm_fwd) and current.kernels_fwd == delayed.kernels_fwd


def test_latent_attentions_normed_latents_are_spared_the_pass_its_other_inputs_are_not(h100):
    """DeepSeek-V3's layer: the up-projections read the latents a fused norm wrote
    (``qk_layernorm``); the down-projections, the router, the experts and the shared expert
    read inputs no norm of theirs wrote (a MoE layer's pre-MLP norm is a module of its own)."""
    block = model_block(load_preset("model", "deepseek-v3"), flash=True)
    h, heads, tp, ep = 7168.0, 128.0, 1.0, 8.0

    def forward_casts(recipe: str) -> float:
        stack = Stack(attention="flash", gemm_precision="fp8", fp8_recipe=recipe)
        return float(layer_cost(h, heads, 4096.0, 1.0, tp, h100, block=block, stack=stack, ep=ep).elementwise_fwd)

    forward = [g for g in layer.gemm_shapes(h, heads, 4096.0, 1.0, tp, block, ep=ep) if g.pass_ == "fwd"]
    spared = {g.name for g in forward if g.name in NORM_FED_GEMMS}
    assert spared == {"q_up", "kv_up"} and {"q_down", "kv_down", "expert_fc1", "shared_fc1"} <= \
        {g.name for g in forward} - spared
    assert forward_casts("tensorwise") - forward_casts("delayed") == pytest.approx(
        _amax_time([g for g in forward if g.name not in spared], lambda g: g.batch * g.m * g.k, h100), rel=1e-9)


def test_recipes_that_find_their_scales_in_the_quantizing_kernel_cost_as_delayed_scaling(llama, h100):
    delayed = _cost(llama, h100, "delayed")
    for recipe in ("mxfp8", "blockwise"):
        other = _cost(llama, h100, recipe)
        assert (float(other.elementwise_fwd), float(other.elementwise_bwd)) == \
            (float(delayed.elementwise_fwd), float(delayed.elementwise_bwd)), recipe


def test_a_recipe_is_one_of_megatron_cores_and_scales_fp8_gemms_only():
    assert FP8_RECIPES == ("delayed", "tensorwise", "mxfp8", "blockwise")
    assert Stack().fp8_recipe == "delayed"
    with pytest.raises(ValueError, match="stack.fp8_recipe='current': choose one of delayed, tensorwise"):
        Stack(gemm_precision="fp8", fp8_recipe="current")
    with pytest.raises(ValueError, match="stack.fp8_recipe='tensorwise' needs stack.gemm_precision=fp8, not 'bf16'"):
        Stack(fp8_recipe="tensorwise")


def test_the_runs_files_name_each_fp8_runs_recipe_as_its_source_does():
    """Megatron-Bridge's FP8-CS rows are tensorwise, FP8-MX mxfp8, FP8-blockwise blockwise (the
    converted file is the converter's output: ``test_blackwell_ultra``); the held-out Bridge
    FP8-CS rows say tensorwise, NeMo's 2024 rows (delayed scaling) leave it blank."""
    source = list(csv.DictReader((DATA / "moe_runs.csv").open(encoding="utf-8")))
    converted = list(csv.DictReader((DATA / "moe_bridge_runs.csv").open(encoding="utf-8")))
    pairs = {(s["precision"], c["fp8_recipe"]) for s, c in zip(source, converted)}
    assert pairs == {("BF16", ""), ("FP8-CS", "tensorwise"), ("FP8-MX", "mxfp8"), ("FP8-blockwise", "blockwise")}
    held_out = list(csv.DictReader((DATA / "holdout_runs.csv").open(encoding="utf-8")))
    by_source = {(r["source"], r["fp8_recipe"]) for r in held_out if r["precision"] == "fp8"}
    assert {s for s, recipe in by_source if recipe == "tensorwise"} == \
        {"bridge2511_fp8", "bridge2604_fp8", "bridge2606_fp8"}
    assert ("nemo2407_h100_fp8", "") in by_source and ("nemo2403_longseq_h100_fp8", "") in by_source
    assert {(r.source, r.fp8_recipe) for r in read_runs(DATA / "holdout_runs.csv", skipped=[])} >= \
        {("bridge2511_fp8", "tensorwise"), ("nemo2407_h100_fp8", "delayed")}
