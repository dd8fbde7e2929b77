"""The ``llama_eager`` element-wise style: a Llama block of PyTorch ops run uncompiled, as
torchtitan runs its model without torch.compile (RMSNorm in fp32 ops, complex RoPE, grouped
keys and values copied to every head, SiLU and the gate's product apart)."""

from __future__ import annotations

import pytest

from tasks.model.kernels import layer
from tasks.model.kernels.block import Block
from tasks.model.kernels.layer_cost import layer_cost
from tasks.model.terms.stack import ELEMENTWISE_STYLES, Stack

LLAMA = Block(kv_heads=8, ffn=14336, gated=True, flash=True, dropout=False)
H, HEADS, SL, B = 4096.0, 32.0, 8192.0, 2.0


def kernels(block=LLAMA, **kw):
    return {k.name: k for k in layer.elementwise_kernels(H, HEADS, SL, B, 1.0, 2.0, block=block, **kw)}


def test_the_style_runs_the_ops_of_torchtitans_block_in_place_of_the_fused_norm_and_activation():
    assert "llama_eager" in ELEMENTWISE_STYLES and Stack(elementwise="llama_eager").eager
    fused, eager = kernels(), kernels(style="llama_eager")
    assert set(fused) == {"layernorm", "gelu", "residual_add"}
    assert set(eager) == {"rms_norm", "rope", "repeat_kv", "attn_out_copy", "swiglu", "residual_add"}
    assert "repeat_kv" not in kernels(block=Block(gated=True, flash=True, dropout=False), style="llama_eager")
    tokens = SL * B
    # two norms of six kernels, 18 accesses of a 16-bit element in the forward, 42 backward
    norm = eager["rms_norm"]
    assert (norm.fwd_count, norm.fwd_count * norm.fwd_bytes, norm.bwd_count * norm.bwd_bytes) == \
        (12, pytest.approx(2 * 18 * tokens * H * 2), pytest.approx(2 * 42 * tokens * H * 2))
    # Q (4,096 wide) and K (1,024) each cast, rotated and cast back: 10 accesses an element
    rope = eager["rope"]
    assert rope.fwd_count * rope.fwd_bytes == pytest.approx(10 * tokens * (4096 + 1024) * 2)
    # the fused activation reads gate and up and writes once (3); unfused, silu then the product (5)
    assert eager["swiglu"].fwd_count * eager["swiglu"].fwd_bytes == \
        pytest.approx(5 / 3 * fused["gelu"].fwd_count * fused["gelu"].fwd_bytes)


def test_an_uncompiled_llama_layer_moves_more_bytes_and_launches_more_kernels(h100):
    args = (H, HEADS, SL, B, 1.0, h100)
    flash = dict(attention="flash", attention_impl="flash2")
    fused, eager = (layer_cost(*args, block=LLAMA, stack=Stack(elementwise=e, **flash))
                    for e in ("fused", "llama_eager"))
    assert float(eager.gemm_fwd) == float(fused.gemm_fwd) and float(eager.attention_fwd) == float(fused.attention_fwd)
    assert float(eager.elementwise_fwd) > 3 * float(fused.elementwise_fwd)
    assert float(eager.elementwise_bwd) > float(fused.elementwise_bwd)
    assert eager.kernels_fwd > fused.kernels_fwd + 15


def test_compiled_the_block_keeps_the_fused_norms_and_activation_and_inductors_fallbacks():
    compiled, fused, eager = kernels(style="llama_compiled"), kernels(), kernels(style="llama_eager")
    assert "llama_compiled" in ELEMENTWISE_STYLES and not Stack(elementwise="llama_compiled").eager
    assert set(compiled) == set(fused) | {"rope", "repeat_kv", "attn_out_copy"}
    for name in fused:
        assert compiled[name] == fused[name]
    for name in ("rope", "repeat_kv", "attn_out_copy"):     # complex RoPE, and the copies around SDPA
        assert compiled[name] == eager[name]
    assert "repeat_kv" not in kernels(block=Block(gated=True, flash=True, dropout=False), style="llama_compiled")


def test_a_compiled_llama_layer_sits_between_the_fused_and_the_uncompiled(h100):
    args = (H, HEADS, SL, B, 1.0, h100)
    flash = dict(attention="flash", attention_impl="flash2")
    fused, compiled, eager = (layer_cost(*args, block=LLAMA, stack=Stack(elementwise=e, **flash))
                              for e in ("fused", "llama_compiled", "llama_eager"))
    assert float(fused.elementwise_fwd) < float(compiled.elementwise_fwd) < float(eager.elementwise_fwd)
    assert fused.kernels_fwd < compiled.kernels_fwd < eager.kernels_fwd
