"""torchtitan's per-op selective activation checkpointing: which of a layer's forward work its
backward pass runs again, and what the layer keeps.

torchtitan wraps each Transformer block in a checkpoint whose policy (``_custom_policy`` in
``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370, December 2024, and in
``torchtitan/distributed/activation_checkpoint.py`` at v0.2.2) keeps the output of every op
of its save list but of every second ``aten.mm``: "Saves output of all compute ops, except
every second mm". The list holds ``aten.mm``, PyTorch's fused attention kernels
(``_scaled_dot_product_flash_attention`` and its siblings), the tensor-parallel
reduce-scatter and ``max``; every other op (the norms, RoPE, the activation function, the
residual adds, batched products) is recomputed. torchtitan's Llama block runs its linear
layers as separate matrix products in this order (``torchtitan/models/llama/model.py``):
``wq``, ``wk``, ``wv`` (``Attention.forward``), ``wo``, then ``w1``, ``w3``, ``w2``
(``FeedForward.forward``: ``w2(silu(w1(x)) * w3(x))``). So the backward runs ``wk``, ``wo``
and ``w3`` again, and the forward keeps the outputs of ``wq``, ``wv``, ``w1`` and ``w2``
besides the attention kernel's.

The step model's GEMMs (``layer.gemm_shapes``) fuse what torchtitan runs apart: here the QKV
GEMM counts as its Q, K and V products (shares of its width) and a gated MLP's first GEMM as
its gate and up halves, in torchtitan's order; every other linear GEMM is one product. A
mixture of experts' routed experts (``GROUPED_GEMMS``) run ``torch._grouped_mm``, which
the policy neither counts nor keeps: recomputed whole. A materialised attention core's
products are batched (``aten.bmm``): not counted, recomputed.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tasks.model.kernels import layer
from tasks.model.kernels.block import STUDY_BLOCK, Block, qkv_width

__all__ = ["GROUPED_GEMMS", "BATCHED_GEMMS", "mm_pieces", "pieces_by_name", "recomputed_shares", "kept_elements",
           "separate_products", "input_gradient_sums"]

#: Forward GEMMs torchtitan runs as grouped products (its MoE experts): never kept, never counted.
GROUPED_GEMMS: Tuple[str, ...] = ("expert_fc1", "expert_fc2")
#: Forward GEMMs that are batched products (a materialised attention core): never kept, never counted.
BATCHED_GEMMS: Tuple[str, ...] = ("scores", "context")


@lru_cache(maxsize=64)
def _forward_names(block: Block) -> Tuple[str, ...]:
    """The layer's forward GEMMs' names in the order it runs them (``layer.gemm_shapes``): they
    depend on the block alone, so any shape names them."""
    return tuple(g.name for g in layer.gemm_shapes(1024.0, 8.0, 1.0, 1.0, 1.0, block) if g.pass_ == "fwd")


def mm_pieces(h, heads, block: Block = STUDY_BLOCK) -> List[Tuple[str, "np.ndarray | float"]]:
    """The layer's ``aten.mm`` calls in torchtitan's order, each as (the step model's forward
    GEMM it belongs to, its share of that GEMM's work): Q, K and V of the QKV GEMM by their
    widths (arrays where ``h`` is one), a gated MLP's gate and up halves of its first GEMM,
    every other linear GEMM whole."""
    pieces: List[Tuple[str, "np.ndarray | float"]] = []
    for name in _forward_names(block):
        if name in GROUPED_GEMMS + BATCHED_GEMMS:
            continue
        if name == "qkv":
            kv = np.asarray(block.kv(heads) * block.hd(h, heads) / qkv_width(h, heads, block), dtype=np.float64)
            pieces += [(name, 1.0 - 2.0 * kv), (name, kv), (name, kv)]
        elif name in ("fc1", "shared_fc1") and block.gated:
            pieces += [(name, 0.5), (name, 0.5)]
        else:
            pieces.append((name, 1.0))
    return pieces


def pieces_by_name(h, heads, block: Block = STUDY_BLOCK) -> Dict[str, List["np.ndarray | float"]]:
    """The shares of ``mm_pieces``, by the forward GEMM each belongs to (in its order)."""
    shares: Dict[str, List["np.ndarray | float"]] = {}
    for name, share in mm_pieces(h, heads, block):
        shares.setdefault(name, []).append(share)
    return shares


def _split(h, heads, block: Block) -> Dict[str, List["np.ndarray | float"]]:
    """``pieces_by_name`` of the GEMMs run as more than one product."""
    return {name: pieces for name, pieces in pieces_by_name(h, heads, block).items() if len(pieces) > 1}


def separate_products(gemms: Sequence[layer.Gemm], h, heads, block: Block = STUDY_BLOCK) -> Tuple[layer.Gemm, ...]:
    """``gemms`` (``layer.gemm_shapes``) with each GEMM ``mm_pieces`` splits run as its products
    (``Stack.projections`` separate; async TP's products, ``collectives.async_tp``): a piece
    takes its share of the forward's output columns, so of the input gradient's inner
    dimension and of the weight gradient's columns; every piece keeps its GEMM's name (its TP
    side, its recomputed share)."""
    split = _split(h, heads, block)
    out: List[layer.Gemm] = []
    for g in gemms:
        for share in split.get(g.name, [None]):
            if share is None:
                out.append(g)
            elif g.pass_ == "ig":
                out.append(replace(g, k=g.k * share))
            else:
                out.append(replace(g, n=g.n * share))
    return tuple(out)


def input_gradient_sums(gemms: Sequence[layer.Gemm], h, heads, block: Block = STUDY_BLOCK) -> List["np.ndarray"]:
    """Elements of each ``add`` autograd runs to sum the input gradients of products run apart
    (``separate_products``): one per product past the first of each split GEMM, of its
    input-gradient GEMM's output (batch x m x n of ``gemms``' whole one)."""
    split = _split(h, heads, block)
    return [np.asarray(g.batch * g.m * g.n, dtype=np.float64) for g in gemms if g.pass_ == "ig" and g.name in split
            for _ in split[g.name][1:]]


def recomputed_shares(h, heads, block: Block = STUDY_BLOCK) -> Dict[str, "np.ndarray | float"]:
    """Share of each forward GEMM's work the backward pass runs again: the even-numbered
    ``mm_pieces``, and the grouped and batched GEMMs whole (names absent: none of it)."""
    shares: Dict[str, "np.ndarray | float"] = {name: 1.0 for name in _forward_names(block)
                                if name in GROUPED_GEMMS + BATCHED_GEMMS}
    for number, (name, share) in enumerate(mm_pieces(h, heads, block), start=1):
        if number % 2 == 0:
            shares[name] = shares.get(name, 0.0) + share
    return shares


def kept_elements(h, heads, sl, b, tp, block: Block = STUDY_BLOCK, *, ep=1.0, etp=1.0):
    """Elements of the linear products' outputs one layer keeps per micro-batch on one device:
    the odd-numbered ``mm_pieces``' outputs (tokens x their width), from the step model's
    GEMM shapes (``layer.gemm_shapes``, so already split by TP, EP and ETP)."""
    kept: Dict[str, "np.ndarray | float"] = {}
    for number, (name, share) in enumerate(mm_pieces(h, heads, block), start=1):
        if number % 2 == 1:
            kept[name] = kept.get(name, 0.0) + share
    total = np.zeros(np.broadcast(h, sl, b, tp).shape)
    for g in layer.gemm_shapes(h, heads, sl, b, tp, block, ep=ep, etp=etp):
        if g.pass_ == "fwd" and g.name in kept:
            total = total + kept[g.name] * g.m * g.n * g.batch
    return total
