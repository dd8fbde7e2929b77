"""Heads of their own width (``Block.head_dim``; Qwen3, GPT-OSS): where heads x head_dim is
not H, Q, the context and the attention output projection's input are that wide."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tasks.model.kernels import layer
from tasks.model.kernels.layer import Block, attention_core_flops
from tasks.model.kernels.attention import fused_efficiency
from tasks.model.kernels.layer_cost import layer_cost
from tasks.model.step import memory
from tasks.model.terms.specs import heads_problem
from tasks.model.terms.stack import Stack

FLASH = Stack(attention="flash")

GQA = Block(kv_heads=8.0, ffn=25600.0, gated=True, flash=True, dropout=False)


def _gemms(h, heads, block, tp=1):
    return {g.name: (g.m, g.n, g.k) for g in layer.gemm_shapes(h, heads, 4096, 1, tp, block) if g.pass_ == "fwd"}


def test_a_head_width_of_h_over_heads_changes_nothing(h100):
    same = dataclasses.replace(GQA, head_dim=8192 / 64)
    args = (8192.0, 64.0, 4096.0, 1.0, 8.0)
    assert _gemms(8192, 64, same, 8) == _gemms(8192, 64, GQA, 8)
    assert layer.layer_params(8192, 64, same) == layer.layer_params(8192, 64, GQA)
    assert layer.layer_tensors(8192, 64, same) == layer.layer_tensors(8192, 64, GQA)
    kept = (4096.0, 1.0, 8192.0, 64.0, 8.0, True, 0)  # SL, B, H, heads, TP, SP, no recomputation
    assert float(memory.layer_activation_bytes(*kept, same)) == float(memory.layer_activation_bytes(*kept, GQA))
    a, b = layer_cost(*args, h100, block=same, stack=FLASH), layer_cost(*args, h100, block=GQA, stack=FLASH)
    assert float(a.total) == float(b.total)


def test_qwen3_32b_heads_are_wider_than_its_hidden_size(h100):
    """Qwen3 32B: H 5,120, 64 heads of 128 (8,192), 8 key/value heads; its config's figures."""
    qwen = dataclasses.replace(GQA, head_dim=128.0)
    shapes = _gemms(5120, 64, qwen)
    assert shapes["qkv"] == (4096, 64 * 128 + 2 * 8 * 128, 5120)
    assert shapes["attn_out"] == (4096, 5120, 8192)
    per_layer = 5120 * (8192 + 2048) + 8192 * 5120 + 3 * 5120 * 25600
    assert float(layer.layer_params(5120, 64, qwen)) == per_layer
    assert 64 * (per_layer + 2 * 5120) + 151936 * 5120 * 2 == pytest.approx(32.8e9, rel=0.01)  # its model card
    # attention works over 8,192 columns: 1.6x the work of 5,120-wide heads, at the rate of
    # 128-wide heads rather than 80-wide ones
    narrow = layer_cost(5120.0, 64.0, 4096.0, 1.0, 1.0, h100, block=GQA, stack=FLASH)
    wide = layer_cost(5120.0, 64.0, 4096.0, 1.0, 1.0, h100, block=qwen, stack=FLASH)
    rates = fused_efficiency("fwd", True, 4096.0, 80.0) / fused_efficiency("fwd", True, 4096.0, 128.0)
    assert float(wide.attention_fwd) / float(narrow.attention_fwd) == pytest.approx(8192 / 5120 * rates, rel=0.02)
    assert attention_core_flops(8192.0, 4096.0, 1.0, 1.0) / attention_core_flops(5120.0, 4096.0, 1.0, 1.0) == 1.6
    # Q and the projection's input at 8,192; K and V at 8 x 128 = 1,024 each
    kept = float(memory.layer_activation_bytes(4096.0, 1.0, 5120.0, 64.0, 1.0, False, 0, qwen))
    base = float(memory.layer_activation_bytes(4096.0, 1.0, 5120.0, 64.0, 1.0, False, 0, GQA))
    assert kept - base == pytest.approx(4096 * (2 + 2) * (8192 - 5120) + 4096 * 4 * 8 * (128 - 80), rel=1e-12)


def test_a_model_with_its_own_head_width_need_not_divide_hidden_by_heads():
    assert heads_problem(5000, 64, 8) is not None           # 5,000 columns do not split into 64 heads
    assert heads_problem(5000, 64, 8, head_dim=128) is None  # heads 128 wide each need not
    assert heads_problem(5000, 64, 8, head_dim=0)[0] == "head_dim"
    assert heads_problem(5000, 64, 6, head_dim=128)[0] == "kv_heads"  # grouped-query still divides heads


def test_a_block_with_its_own_head_width_needs_the_heads():
    with pytest.raises(ValueError, match="needs the heads"):
        layer.layer_params(5120.0, None, dataclasses.replace(GQA, head_dim=128.0))
    assert np.isfinite(layer.layer_params(5120.0, None, GQA))
