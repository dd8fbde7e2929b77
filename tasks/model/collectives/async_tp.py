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
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from tasks.model.kernels import layer
from tasks.model.kernels.block import Block
from tasks.model.kernels.layer_cost import TP_SIDE_OF_GEMM, TP_SIDES
from tasks.model.kernels.op_checkpoint import mm_pieces
from tasks.model.kernels.roofline import memory_bound_time
from tasks.model.terms.specs import HardwareProfile

__all__ = ["fused_sides", "shard_copy_time", "partials_sum_time"]


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
