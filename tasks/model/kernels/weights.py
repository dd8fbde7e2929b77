"""The weights of one Transformer layer: how many (``layer_params``, ``expert_params``), as the
tensors an engine moves one per collective (``layer_tensors``), and one DP message's bytes.
Scalars or NumPy arrays."""

from __future__ import annotations

from typing import Tuple

import numpy as np

from tasks.model.kernels.block import STUDY_BLOCK, Block, mla_params, qkv_width

__all__ = ["layer_params", "expert_params", "layer_tensors", "dp_gradient_bytes"]


def layer_params(h, heads=None, block: Block = STUDY_BLOCK):
    """Weights of one layer (all TP ranks together), 12 H^2 for the study's block: QKV
    (3 H^2) + attention output (H^2) + FC1 (4 H^2) + FC2 (4 H^2); biases and LayerNorm
    weights are O(H) and left out (method.md §3). In general: QKV H x (heads x head_dim + 2
    kv_heads x head_dim), output heads x head_dim x H, and ``mlp_matrices`` x H x ffn
    (``heads`` is needed only when kv_heads differs from it or the block sets head_dim).
    A mixture-of-experts block's are the weights TP splits or replicates: attention, the
    router's H x experts (replicated, counted as split: 0.1 % of DeepSeek-V3's layer) and the
    shared experts' MLP; its routed experts' are ``expert_params``. Latent attention's
    projections are ``block.mla_params``' (its down projections, whole on every TP rank, counted
    as split: 4 % of DeepSeek-V3's attention)."""
    h = np.asarray(h, dtype=np.float64)
    qkv, attention_width = _attention_widths(h, heads, block)
    router = h * block.experts if block.moe else 0.0
    return h * qkv + attention_width * h + block.mlp_matrices * h * _dense_mlp_width(h, block) + router


def _dense_mlp_width(h, block: Block):
    """The width of the layer's MLP that TP splits: ``ffn``, or a mixture of experts' shared experts'."""
    return block.shared_ffn if block.moe else block.width(h)


def expert_params(h, block: Block = STUDY_BLOCK):
    """Weights of one layer's routed experts, all ranks together: experts x ``mlp_matrices`` x
    H x the expert's width (0 for a dense block); a device holds 1/(EP x ETP) of them."""
    if not block.moe:
        return 0.0
    return block.experts * block.mlp_matrices * np.asarray(h, dtype=np.float64) * block.expert_width(h)


def _attention_widths(h, heads, block: Block):
    """(the QKV projection's width, the attention's width) of a layer; ``heads`` None: one
    key/value head per query head of width H / heads. Under latent attention the first is its
    projections' weights over H."""
    if block.mla:
        return sum(mla_params(h, np.asarray(heads, np.float64), block)) / h, block.attention_width(h, heads)
    if heads is None:
        if block.head_dim is not None:
            raise ValueError("a block with its own head_dim needs the heads")
        return 3.0 * h, h
    return qkv_width(h, np.asarray(heads, np.float64), block), block.attention_width(h, heads)


def layer_tensors(h, heads=None, block: Block = STUDY_BLOCK) -> Tuple[Tuple[float, ...], Tuple[float, ...]]:
    """The weight tensors of one layer, as an engine that moves one tensor per collective sees
    them (all TP ranks together; elements each): (the matrices, whose sum is ``layer_params``:
    QKV, attention output and the MLP's ``mlp_matrices``; the vectors: a bias per matrix and a
    LayerNorm weight and bias before attention and before the MLP, as Megatron-LM's GPT layer
    has them). The vectors are O(H) and left out of ``layer_params``; a layer without biases
    has fewer of them."""
    qkv, attention_width = (float(x) for x in _attention_widths(h, heads, block))
    ffn = float(_dense_mlp_width(h, block))
    mlp = block.mlp_matrices if ffn else 0
    router = (float(h) * block.experts,) if block.moe else ()
    projections = tuple(float(m) for m in mla_params(h, float(heads), block)) if block.mla else (h * qkv,)
    matrices = projections + (attention_width * h,) + (h * ffn,) * mlp + router
    mlp_biases = ((ffn,) * (block.mlp_matrices - 1) + (float(h),)) if mlp else ()
    # latent attention normalises its two latents where a plain layer adds the QKV bias
    first = tuple(float(v) for v in (block.q_lora, block.kv_lora) if v) if block.mla else (qkv,)
    vectors = first + (float(h),) + mlp_biases + (float(h),) * 4
    return tuple(float(m) for m in matrices), tuple(float(v) for v in vectors)


def dp_gradient_bytes(h, tp, p: float, heads=None, block: Block = STUDY_BLOCK):
    """Bytes of one layer's weight gradients (or weights) on one device at ``p`` bytes per
    value, p * 12 H^2 / TP for the study's block (``layer_params`` / TP in general): one DP
    message of the layer."""
    return p * layer_params(h, heads, block) / tp
