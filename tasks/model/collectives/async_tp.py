"""PyTorch's asynchronous tensor parallelism: which of a layer's TP collectives its fused
symmetric-memory ops take over, and the memory-bound work those ops add. Seconds.

torchtitan's async TP (``--parallelism.enable_async_tensor_parallel``, with torch.compile)
lets Inductor's micro-pipeline pass (torch/_inductor/fx_passes/micro_pipeline_tp.py) replace
an all-gather whose result feeds matrix products by ``symm_mem.fused_all_gather_matmul``, and
a reduce-scatter of one matrix product's output by ``symm_mem.fused_matmul_reduce_scatter``
(torch/distributed/_symmetric_memory/__init__.py). What the pass and the ops do, read from
that source (the 2025 file, with ``_fused_scaled_matmul_reduce_scatter_impl``, and the file
at pytorch 006b161f):

- A reduce-scatter is fused only where its input is produced by one ``aten.mm`` (or
  ``_scaled_mm``), possibly between reshapes (``_find_producer_matmul``). In the backward
  pass the gradient of a sublayer's input is the sum of its input projections' gradients
  (torchtitan's Llama runs ``wq``, ``wk``, ``wv`` and ``w1``, ``w3`` as separate products:
  ``kernels.op_checkpoint.mm_pieces``), an ``add`` of products, so where a side has more
  than one product its backward reduce-scatter stays a plain one, serialized, with the
  copy DTensor makes around it (``step.comm.dtensor_copies``). The forward's reduce-scatters
  (after ``wo`` and ``w2``) and every all-gather (the forward's, feeding the input
  projections; the backward's, of the gradient feeding the output projections' input
  gradient) are fused.
- ``fused_all_gather_matmul`` copies the local shard into its symmetric buffer and waits at
  a barrier before any product starts ("we are giving up the chance to overlap 'mv' and 'b'
  with the first shard_consumer"): the shard is read and written while nothing overlaps it.
- ``fused_matmul_reduce_scatter`` has every rank's partial products copied into a stacked
  buffer and sums them after the pipeline (``reduce_fn`` over the stacked partials, one
  reduction kernel): the whole tensor is read and the rank's shard written.
- Both ops compute their products block-wise along the rows ("Computing block-wise matmul
  along the first dim of A"): ``fused_all_gather_matmul``'s ``shard_consumer`` multiplies each
  gathered shard by every B as it arrives, ``fused_matmul_reduce_scatter``'s
  ``chunk_producer`` each of A's TP row chunks by B. A fused product is TP products of 1/TP of
  its rows (``chunked_products_time``): the backward's gradient all-gather feeds the output
  projections' input-gradient products (``dY @ W^T``; their weight gradients read it as the
  second operand and wait for the whole), a fused input-gradient reduce-scatter the input
  projection's.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from tasks.model.kernels import layer
from tasks.model.kernels.block import Block
from tasks.model.kernels.layer_cost import TP_SIDE_OF_GEMM, TP_SIDES
from tasks.model.kernels.op_checkpoint import mm_pieces, pieces_by_name, separate_products
from tasks.model.kernels.roofline import gemm_kernel_time, memory_bound_time
from tasks.model.terms.specs import HardwareProfile

__all__ = ["fused_sides", "shard_copy_time", "partials_sum_time", "chunked_products_time"]


def fused_sides(h, heads, block: Block) -> Tuple[Tuple[bool, ...], Tuple[bool, ...]]:
    """(forward, backward) per ``layer_cost.TP_SIDES``: whether async TP fuses that side's
    collective with its products. Every forward one; backward, the output projections'
    all-gathers, and an input side's reduce-scatter only where that side is one product (a
    mixture of experts' MLP input gradient also sums its routed experts', grouped products
    ``mm_pieces`` leaves out)."""
    products = [0] * len(TP_SIDES)
    for name, _ in mm_pieces(h, heads, block):
        products[TP_SIDE_OF_GEMM[name]] += 1
    products[TP_SIDE_OF_GEMM["expert_fc1"]] += 1 if block.moe else 0
    backward = tuple(side % 2 == 1 or products[side] <= 1 for side in range(len(TP_SIDES)))
    return (True,) * len(TP_SIDES), backward


def shard_copy_time(h, seq, micro_batch, tp, p: float, hw: HardwareProfile):
    """Seconds of a fused all-gather's copy of the local shard into its symmetric buffer: the
    rank's 1/TP of the SL*B*H tensor at ``p`` bytes an element, read and written."""
    return memory_bound_time(2.0 * layer.tp_allreduce_bytes(h, seq, micro_batch, p) / np.asarray(tp), hw)


def partials_sum_time(h, seq, micro_batch, tp, p: float, hw: HardwareProfile):
    """Seconds of a fused reduce-scatter's sum of the stacked partials: TP partial shards (the
    whole SL*B*H tensor at ``p`` bytes) read, the rank's shard written."""
    return memory_bound_time(layer.tp_allreduce_bytes(h, seq, micro_batch, p) * (1.0 + 1.0 / np.asarray(tp)), hw)


def chunked_products_time(h, heads, sl, b, tp, block: Block, fused, hw: HardwareProfile, *, precision: str,
                          element_bytes: float) -> Tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds one layer's fused products take beyond running whole: each
    product of a fused side (``fused``: ``fused_sides``') runs as TP products of 1/TP of its
    ``sl`` x ``b`` rows, each ``aten.mm`` of ``mm_pieces`` apart (torchtitan's Q, K and V, a
    gated MLP's gate and up), forward all of them, backward the input-gradient products
    (module docstring); at the linear GEMMs' ``precision`` and ``element_bytes``. The GEMM law
    (``roofline.gemm_kernel_time``) prices the smaller products' tile and wave quantization."""
    tp = np.asarray(tp, dtype=np.float64)
    products = pieces_by_name(h, heads, block)
    extra = {"fwd": np.zeros(np.shape(tp)), "ig": np.zeros(np.shape(tp))}
    for g in separate_products(layer.gemm_shapes(h, heads, sl, b, tp, block), h, heads, block):
        if g.pass_ in extra and g.name in products and fused[g.pass_ == "ig"][TP_SIDE_OF_GEMM[g.name]]:
            whole = gemm_kernel_time(g.m, g.n, g.k, g.batch, hw, precision, element_bytes)
            chunks = tp * gemm_kernel_time(g.m / tp, g.n, g.k, g.batch, hw, precision, element_bytes)
            extra[g.pass_] = extra[g.pass_] + chunks - whole
    return extra["fwd"], extra["ig"]
