"""torchtitan's Llama runs its input projections apart (``Stack.projections`` separate: ``wq``,
``wk``, ``wv`` and ``w1``, ``w3``, each an ``nn.Linear``): each product costs its own GEMM, the
products' input gradients are summed (an add each uncompiled, an extra read compiled), and an
fp8 run casts each input once."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tasks.model.kernels import layer
from tasks.model.kernels.layer_cost import layer_cost
from tasks.model.kernels.model_blocks import model_block
from tasks.model.kernels.op_checkpoint import input_gradient_sums, mm_pieces, separate_products
from tasks.model.kernels.roofline import gemm_kernel_time, memory_bound_time
from tasks.model.terms.stack import Stack

#: Llama 3 70B at TP 8, 16 sequences of 8,192 tokens (torchtitan's June 2025 table).
H, HEADS, SL, B, TP = 8192.0, 64.0, 8192.0, 16.0, 8.0


def _cost(llama, h100, **stack):
    block = model_block(llama, flash=True)
    return layer_cost(H, HEADS, SL, B, TP, h100, block=block, stack=Stack(attention="flash", **stack))


def test_each_product_is_a_gemm_of_its_share_of_the_columns(llama):
    block = model_block(llama, flash=True)
    whole = layer.gemm_shapes(H, HEADS, SL, B, TP, block)
    split = separate_products(whole, H, HEADS, block)
    pieces = mm_pieces(H, HEADS, block)
    assert len(split) == len(whole) + 3 * 3        # Q, K, V for one QKV and gate, up for one first MLP GEMM, x3 passes
    for name in ("qkv", "fc1"):
        shares = [share for piece, share in pieces if piece == name]
        (fwd,), (ig,), (wg,) = ([g for g in whole if g.name == name and g.pass_ == p] for p in ("fwd", "ig", "wg"))
        assert [(g.m, g.n, g.k) for g in split if g.name == name and g.pass_ == "fwd"] == \
            [(fwd.m, pytest.approx(fwd.n * s), fwd.k) for s in shares]
        assert [(g.m, g.n, g.k) for g in split if g.name == name and g.pass_ == "ig"] == \
            [(ig.m, ig.n, pytest.approx(ig.k * s)) for s in shares]
        assert [(g.m, g.n, g.k) for g in split if g.name == name and g.pass_ == "wg"] == \
            [(wg.m, pytest.approx(wg.n * s), wg.k) for s in shares]
    # the products past the first of each split GEMM: an input-sized gradient to add each
    sums = input_gradient_sums(whole, H, HEADS, block)
    tokens = SL * B
    assert [float(n) for n in sums] == [tokens * H] * 3


def test_apart_the_layer_costs_its_products_and_the_sums_of_their_input_gradients(llama, h100):
    fused, apart = _cost(llama, h100, elementwise="llama_eager"), _cost(llama, h100, elementwise="llama_eager",
                                                                     projections="separate")
    block = model_block(llama, flash=True)
    whole = layer.gemm_shapes(H, HEADS, SL, B, TP, block)

    def gemms(gs, pass_):
        return sum(float(gemm_kernel_time(g.m, g.n, g.k, g.batch, h100)) for g in gs
                   if g.pass_ == pass_ and g.name in ("qkv", "fc1"))

    split = separate_products(whole, H, HEADS, block)
    assert float(apart.gemm_fwd - fused.gemm_fwd) == pytest.approx(gemms(split, "fwd") - gemms(whole, "fwd"), rel=1e-6)
    assert float(apart.gemm_bwd - fused.gemm_bwd) == pytest.approx(
        gemms(split, "ig") + gemms(split, "wg") - gemms(whole, "ig") - gemms(whole, "wg"), rel=1e-6)
    assert float(apart.gemm_fwd) > float(fused.gemm_fwd)      # K and V, 128 columns a device, read the input again
    # uncompiled: an add kernel per extra product, two read and one written; compiled: one more read each
    add = float(memory_bound_time(3 * 2.0 * SL * B * H, h100))
    assert float(apart.elementwise_bwd - fused.elementwise_bwd) == pytest.approx(3 * add, rel=1e-9)
    compiled = {p: _cost(llama, h100, elementwise="llama_compiled", projections=p) for p in ("fused", "separate")}
    assert float(compiled["separate"].elementwise_bwd - compiled["fused"].elementwise_bwd) == pytest.approx(
        3 * float(memory_bound_time(2.0 * SL * B * H, h100, floored=False)), rel=1e-9)
    assert apart.kernels_fwd == fused.kernels_fwd + 3      # three more products launched


def test_fp8_casts_each_input_once_however_many_products_read_it(llama, h100):
    fused, apart = (_cost(llama, h100, gemm_precision="fp8", elementwise="llama_compiled", projections=p)
                    for p in ("fused", "separate"))
    assert float(apart.elementwise_fwd) == pytest.approx(float(fused.elementwise_fwd), rel=1e-12)
    assert apart.kernels_fwd == fused.kernels_fwd + 3


def test_a_stack_names_one_of_the_ways(llama):
    with pytest.raises(ValueError, match="stack.projections='apart': choose one of fused, separate"):
        Stack(projections="apart")
    assert replace(Stack(), projections="separate").projections == "separate"
