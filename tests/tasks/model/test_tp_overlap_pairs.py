"""A TP collective overlapped with compute hides behind the GEMMs it feeds or drains, not
behind the whole pass's; PyTorch's async TP fuses only what Inductor's pass matches and adds
the copy and the sum its symmetric-memory ops run."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tasks.model.collectives import async_tp
from tasks.model.kernels.block import STUDY_BLOCK
from tasks.model.kernels.layer_cost import TP_SIDES, layer_cost
from tasks.model.kernels.model_blocks import model_block
from tasks.model.step.comm import tp_collective, tp_exposed_per_pass
from tasks.model.step.compute import stage_layer_cost
from tasks.model.step.context import as_layouts
from tasks.model.step.plan import StepContext
from tasks.model.terms.layout import Layout
from tasks.model.terms.stack import Stack

OVERLAP = Stack(attention="flash", tp_overlap=True)


def layouts(ctx, **layout):
    lay = Layout(**{"tp": 8, "pp": 1, "dp": 1, "micro_batch": 2, "sequence_parallel": True, **layout})
    return as_layouts(lay.columns(), np.array([1.0]), ctx)


def test_the_sides_split_the_linear_gemms_of_each_pass(llama, gpt3, h100):
    for model in (llama, gpt3):
        cost = layer_cost(float(model.hidden), float(model.heads), 4096.0, 2.0, 8.0, h100,
                          block=model_block(model, flash=True), stack=OVERLAP)
        assert np.shape(cost.sides_fwd) == (len(TP_SIDES),)
        assert float(np.sum(cost.sides_fwd)) == pytest.approx(float(cost.linear_fwd))
        assert float(np.sum(cost.sides_bwd)) == pytest.approx(float(cost.linear_bwd))
        assert all(float(t) > 0 for t in cost.sides_fwd)


def test_a_collective_hides_behind_its_own_gemms_only(llama, h100):
    ctx = StepContext(llama, h100, devices=8, global_batch=8, stack=OVERLAP)
    lay = layouts(ctx)
    cost = stage_layer_cost(lay, ctx)
    one = tp_collective(lay, ctx)
    fwd, _ = tp_exposed_per_pass(one, lay, cost, ctx)
    half = one / 2.0
    expected = sum(np.maximum(half / 8.0, half - cost.sides_fwd[..., i]) for i in range(len(TP_SIDES)))
    assert float(fwd[0]) == pytest.approx(float(expected[0]))
    # the same linear time, all of it in the MLP: the attention's collectives have nothing to
    # hide behind, and the MLP's cannot lend what they do not need
    total = cost.sides_fwd.sum(axis=-1, keepdims=True)
    lopsided = replace(cost, sides_fwd=np.concatenate([0.0 * total, 0.0 * total, total / 2, total / 2], axis=-1))
    moved, _ = tp_exposed_per_pass(one, lay, lopsided, ctx)
    assert float(moved[0]) > float(fwd[0])
    assert float(moved[0]) >= float(one[0]) - 1e-12       # two of the four halves wait whole
    # without the overlap every collective waits
    plain = replace(ctx, stack=replace(OVERLAP, tp_overlap=False))
    assert float(tp_exposed_per_pass(one, lay, cost, plain)[0][0]) == pytest.approx(2.0 * float(one[0]))


def test_async_tp_fuses_a_backward_reduce_scatter_only_after_one_product(llama, gpt3):
    # Llama: wq, wk, wv and w1, w3 are separate products: their input gradients are sums
    forward, backward = async_tp.fused_sides(float(llama.hidden), float(llama.heads), model_block(llama, flash=True))
    assert forward == (True, True, True, True)
    assert backward == (False, True, False, True)
    # GPT-3's MLP has one first product: its reduce-scatter is fused; its QKV is three
    _, backward = async_tp.fused_sides(float(gpt3.hidden), float(gpt3.heads), model_block(gpt3, flash=True))
    assert backward == (False, True, True, True)
    assert async_tp.fused_sides(1024.0, 16.0, replace(STUDY_BLOCK, flash=True))[1][2]


def test_async_tp_adds_its_copies_and_sums_and_leaves_unfused_ones_waiting(llama, h100):
    megatron = StepContext(llama, h100, devices=8, global_batch=8, stack=OVERLAP)
    dtensor = replace(megatron, stack=replace(OVERLAP, tp_engine="dtensor"))
    lay = layouts(dtensor)
    cost = stage_layer_cost(lay, dtensor)
    one = tp_collective(lay, dtensor)
    assert float(one[0]) == pytest.approx(float(tp_collective(lay, megatron)[0]))    # fused: no DTensor copy
    fwd_m, bwd_m = tp_exposed_per_pass(one, lay, cost, megatron)
    fwd_d, bwd_d = tp_exposed_per_pass(one, lay, cost, dtensor)
    h, seq, b, tp = float(llama.hidden), float(llama.seq_len), 2.0, 8.0
    copy = async_tp.shard_copy_time(h, seq, b, tp, 2.0, dtensor.device)
    summed = async_tp.partials_sum_time(h, seq, b, tp, 2.0, dtensor.device)
    fused = async_tp.fused_sides(h, float(llama.heads), dtensor.block)
    chunks_fwd, chunks_bwd = (float(t) for t in async_tp.chunked_products_time(
        h, float(llama.heads), seq, b, tp, dtensor.block, fused, dtensor.device, precision="bf16", element_bytes=2.0))
    assert float(fwd_d[0] - fwd_m[0]) == pytest.approx(float(2 * copy + 2 * summed) + chunks_fwd)
    # backward: the two input-gradient reduce-scatters wait whole, with DTensor's copy each
    unfused_copy = float(async_tp.shard_copy_time(h, seq, b, 1.0, 2.0, dtensor.device))   # the whole tensor
    waiting = sum(float(one[0]) / 2.0 - float(np.maximum(one / 16.0, one / 2.0 - cost.sides_bwd[..., i])[0])
                  for i in (0, 2))
    assert float(bwd_d[0] - bwd_m[0]) == pytest.approx(waiting + 2 * float(copy) + 2 * unfused_copy + chunks_bwd)
    assert float(bwd_d[0]) > float(bwd_m[0])


def test_a_mixture_of_experts_mlp_input_gradient_is_never_one_product():
    from tasks.model.kernels.block import Block
    moe = Block(gated=False, flash=True, dropout=False, experts=8, topk=2, moe_ffn=1024.0)
    assert async_tp.fused_sides(1024.0, 16.0, moe)[1][2] is False


def test_async_tp_adds_nothing_to_a_layout_without_tp(llama, h100):
    dtensor = StepContext(llama, h100, devices=8, global_batch=8, stack=replace(OVERLAP, tp_engine="dtensor"))
    for sequence_parallel in (True, False):
        lay = layouts(dtensor, tp=1, dp=8, sequence_parallel=sequence_parallel)
        fwd, bwd = tp_exposed_per_pass(tp_collective(lay, dtensor), lay, stage_layer_cost(lay, dtensor), dtensor)
        assert float(fwd[0]) == 0.0 and float(bwd[0]) == 0.0


def test_async_tp_runs_each_fused_product_block_wise_tp_products_of_a_tpth_of_the_rows(llama, gpt3, h100):
    """symm_mem's ops multiply shard by shard ("block-wise matmul along the first dim of A"):
    forward every linear product of torchtitan's Llama layer (Q, K, V, the output projection,
    gate and up, down: ``mm_pieces``) as 8 products of 1/8 of the rows; backward the output
    projections' input gradients, which the gradient's all-gather feeds, and an input
    projection's only where its reduce-scatter is fused (one product: GPT-3's first MLP GEMM,
    not Llama's gate and up). Nothing at TP 1."""
    from tasks.model.kernels import layer
    from tasks.model.kernels.op_checkpoint import mm_pieces
    from tasks.model.kernels.roofline import gemm_kernel_time

    def chunked(model, block, tp=8.0, b=2.0):
        h, heads, seq = float(model.hidden), float(model.heads), float(model.seq_len)
        return async_tp.chunked_products_time(h, heads, seq, b, tp, block, async_tp.fused_sides(h, heads, block),
                                              h100, precision="bf16", element_bytes=2.0)

    def penalty(g, n, k, tp=8.0):
        return float(tp * gemm_kernel_time(g.m / tp, n, k, g.batch, h100) - gemm_kernel_time(g.m, n, k, g.batch, h100))

    block = model_block(llama)
    h, heads, seq = float(llama.hidden), float(llama.heads), float(llama.seq_len)
    gemms = {(g.name, g.pass_): g for g in layer.gemm_shapes(h, heads, seq, 2.0, 8.0, block)}
    forward = sum(penalty(gemms[(name, "fwd")], gemms[(name, "fwd")].n * share, gemms[(name, "fwd")].k)
                  for name, share in mm_pieces(h, heads, block))
    backward = sum(penalty(gemms[(name, "ig")], gemms[(name, "ig")].n, gemms[(name, "ig")].k)
                   for name in ("attn_out", "fc2"))
    fwd, bwd = chunked(llama, block)
    assert (float(fwd), float(bwd)) == (pytest.approx(forward), pytest.approx(backward))
    assert float(fwd) > 0.0 and float(bwd) > 0.0      # smaller products fill fewer waves
    gpt_block = model_block(gpt3)
    gpt = {(g.name, g.pass_): g for g in layer.gemm_shapes(float(gpt3.hidden), float(gpt3.heads),
                                                             float(gpt3.seq_len), 2.0, 8.0, gpt_block)}
    with_fc1 = sum(penalty(gpt[(name, "ig")], gpt[(name, "ig")].n, gpt[(name, "ig")].k)
                   for name in ("attn_out", "fc1", "fc2"))
    assert float(chunked(gpt3, gpt_block)[1]) == pytest.approx(with_fc1)
    assert [float(t) for t in chunked(llama, block, tp=1.0)] == [0.0, 0.0]
