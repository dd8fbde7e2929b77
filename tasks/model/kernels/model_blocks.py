"""A model's layers as ``layer.Block`` shapes: the layer most of its layers are (a
mixture-of-experts layer where the model has experts) and the dense layers a mixture-of-experts
model keeps (DeepSeek-V3's first three: Megatron-Core's ``moe_layer_freq``), with the share of
each; and what is wrong with a model's mixture-of-experts fields. The one reading of
``TransformerModel``'s MoE fields (``experts``, ``topk``, ``moe_ffn_hidden``,
``shared_experts``, ``dense_layers``) for costing, memory, parameter counts and checks."""

from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

from tasks.model.kernels.layer import Block, expert_params, layer_params
from tasks.model.terms.specs import TransformerModel

__all__ = ["model_block", "dense_block", "moe_layer_share", "moe_problem", "mla_problem", "layer_weights"]


def dense_block(model: TransformerModel, *, flash: bool = False) -> Block:
    """A dense layer of ``model``: attention (latent attention where the model sets
    ``kv_lora_rank``) and an MLP ``ffn_hidden`` wide."""
    return Block(kv_heads=float(model.kv_heads) if model.kv_heads else None,
                 ffn=float(model.ffn_hidden) if model.ffn_hidden else None, gated=bool(model.gated_mlp),
                 flash=flash, dropout=model.dropout > 0.0, head_dim=float(model.head_dim) if model.head_dim else None,
                 q_lora=float(model.q_lora_rank), kv_lora=float(model.kv_lora_rank),
                 rope_dim=float(model.qk_rope_head_dim), v_dim=float(model.v_head_dim) if model.v_head_dim else None)


def model_block(model: TransformerModel, *, flash: bool = False) -> Block:
    """The layer most of ``model``'s layers are: its mixture-of-experts layer where it has
    experts (``layer.Block``'s MoE fields: shared experts ``shared_experts`` x the expert's
    width, Megatron-Core's ``moe_shared_expert_intermediate_size``), else ``dense_block``."""
    block = dense_block(model, flash=flash)
    if not model.experts:
        return block
    width = float(model.moe_ffn_hidden or block.width(float(model.hidden)))
    return dataclasses.replace(block, experts=float(model.experts), topk=float(model.topk), moe_ffn=width,
                               shared_ffn=float(model.shared_experts) * width, expert_bias=bool(model.expert_bias),
                               expert_clamp=model.expert_clamp > 0)


def moe_layer_share(model: TransformerModel) -> float:
    """The share of ``model``'s layers that are ``model_block``'s: 1 for a dense model, and
    (layers - dense_layers) / layers for a mixture of experts. A stage is charged the mean
    layer (exact at PP 1; DeepSeek-V3's 3 dense layers of 61 sit on its first stage)."""
    return 1.0 if not model.experts else (model.layers - model.dense_layers) / model.layers


def layer_weights(model: TransformerModel) -> float:
    """Weights of all of ``model``'s layers (all ranks together): each dense layer's
    ``layer.layer_params``, and each MoE layer's with its routed experts'."""
    h, heads = float(model.hidden), float(model.heads)
    moe = model_block(model)
    moe_layers = model.layers * moe_layer_share(model)
    dense = (model.layers - moe_layers) * float(layer_params(h, heads, dense_block(model)))
    return dense + moe_layers * float(layer_params(h, heads, moe) + expert_params(h, moe))


def moe_problem(model: TransformerModel, prefix: str = "model.") -> Optional[Tuple[str, int, str]]:
    """Why ``model``'s mixture-of-experts fields cannot describe a model, as (field, value,
    reason) with the field named after ``prefix``; None when they can. A dense model
    (``experts`` 0) sets none of the others; a mixture of experts routes each token to 1 to
    ``experts`` experts and keeps at least one MoE layer."""
    if model.experts < 0:
        return f"{prefix}experts", model.experts, "must be 0 (a dense model) or a count of routed experts"
    if not model.experts:
        for name in ("topk", "shared_experts", "dense_layers", "moe_ffn_hidden", "expert_bias", "expert_clamp"):
            if getattr(model, name):
                return f"{prefix}{name}", getattr(model, name), f"needs {prefix}experts above 0 (a mixture of experts)"
        return None
    if not 1 <= model.topk <= model.experts:
        return f"{prefix}topk", model.topk, f"must route each token to 1 to {prefix}experts={model.experts} experts"
    if model.shared_experts < 0:
        return f"{prefix}shared_experts", model.shared_experts, "must be 0 or a count of shared experts"
    if not 0 <= model.dense_layers < model.layers:
        return (f"{prefix}dense_layers", model.dense_layers,
                f"must leave at least one of {prefix}layers={model.layers} a MoE layer")
    if model.moe_ffn_hidden is not None and model.moe_ffn_hidden <= 0:
        return f"{prefix}moe_ffn_hidden", model.moe_ffn_hidden, "must be a positive width"
    if model.expert_clamp < 0:
        return f"{prefix}expert_clamp", model.expert_clamp, "must be 0 (no clamp) or the clamp's bound"
    if model.expert_clamp and not model.gated_mlp:
        return (f"{prefix}expert_clamp", model.expert_clamp,
                f"needs {prefix}gated_mlp true: it clamps a gated activation")
    return None


def mla_problem(model: TransformerModel, prefix: str = "model.") -> Optional[Tuple[str, int, str]]:
    """Why ``model``'s latent-attention fields cannot describe its attention, as (field, value,
    reason); None when they can. Without ``kv_lora_rank`` none of the others is set; with it the
    model states ``head_dim`` (each head's non-rotary query/key width: DeepSeek-V3's 128 is not
    hidden / heads)."""
    others = ("q_lora_rank", "qk_rope_head_dim", "v_head_dim")
    for name in ("kv_lora_rank", *others):
        value = getattr(model, name)
        if value is not None and value < 0:
            return f"{prefix}{name}", value, "must be 0 or a positive width"
    if not model.kv_lora_rank:
        for name in others:
            if getattr(model, name):
                return (f"{prefix}{name}", getattr(model, name),
                        f"needs {prefix}kv_lora_rank above 0 (multi-head latent attention)")
        return None
    if not model.head_dim:
        return (f"{prefix}kv_lora_rank", model.kv_lora_rank,
                f"needs {prefix}head_dim (each head's non-rotary query and key width)")
    return None

