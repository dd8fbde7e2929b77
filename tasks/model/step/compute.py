"""Compute of a whole step: one micro-batch on the busiest pipeline stage, what recomputation
repeats, the output layer, and the optimizer step (method.md §3; Korthikanti et al., arXiv
2205.05198). Vectorised over layouts; seconds."""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from tasks.model.kernels import layer
from tasks.model.terms import metrics
from tasks.model.kernels import roofline
from tasks.model.kernels.moe_kernels import HOST_SYNCS, by_dispatcher, moe_mlp_kernels
from tasks.model.kernels.cuda_graphs import graphed_kernels
from tasks.model.terms.layout import code
from tasks.model.kernels.layer_cost import (CROSS_ENTROPY_KERNELS, LayerCost, cross_entropy_time,
                                            grad_accumulation_time, layer_cost)
from tasks.model.step.memory import model_state_shard_params
from tasks.model.step.context import (DistinctShapes, StepContext, StepLayouts, distinct_shapes, split_shortfall,
                                      layer_weights_per_device)

__all__ = ["OPTIMIZER_BYTES_PER_PARAM", "stage_layer_cost", "output_layer_time", "compute_per_microbatch",
           "optimizer_time"]

#: Bytes the optimizer step moves per parameter of its shard, as Megatron-LM's mixed-precision
#: optimizer runs it (Micikevicius et al. 2018; fp32 main gradients and weights): the
#: gradient norm for clipping reads the fp32 gradient (4); Adam reads the fp32 weight,
#: gradient, momentum and variance (16) and writes weight, momentum and variance (12); the
#: updated fp32 weight is copied into the 16-bit model weight (read 4, write 2); the
#: gradient buffer is zeroed for the next step (write 4).
OPTIMIZER_BYTES_PER_PARAM = 4.0 + 16.0 + 12.0 + 6.0 + 4.0


def stage_layer_cost(lay: StepLayouts, ctx: StepContext, shapes: Optional[DistinctShapes] = None) -> LayerCost:
    """One layer's compute pieces for every layout (``tasks.model.kernels.layer_cost``), costed once
    per distinct shape (``shapes``, worked out when not given). A mixture-of-experts model with
    dense layers is charged the mean layer (``StepContext.moe_share`` of its MoE layer, the rest
    of its dense one; kernels rounded to whole ones). The GEMMs by TP side keep their trailing
    axis (``LayerCost.sides_fwd``)."""
    shapes = distinct_shapes(lay) if shapes is None else shapes
    cost = _layer_cost(ctx, shapes, ctx.block)
    if ctx.moe_share < 1.0:
        dense, share = _layer_cost(ctx, shapes, ctx.dense_block), ctx.moe_share
        mean = {name: share * getattr(cost, name) + (1.0 - share) * getattr(dense, name)
                for name in LayerCost.__dataclass_fields__}
        cost = LayerCost(**{name: (int(round(v)) if name.startswith("kernels_") else v) for name, v in mean.items()})
    spread = {name: shapes.spread(getattr(cost, name), np.shape(lay.tp) + np.shape(getattr(cost, name))[1:])
              for name in LayerCost.__dataclass_fields__ if not name.startswith("kernels_")}
    return LayerCost(**spread, **{name: getattr(cost, name) for name in LayerCost.__dataclass_fields__
                                  if name.startswith("kernels_")})


def _layer_cost(ctx: StepContext, shapes: DistinctShapes, block) -> LayerCost:
    """``layer_cost`` of a layer of ``block``'s shape for each of ``shapes``."""
    m = ctx.model
    return layer_cost(np.full(len(shapes.tp), float(m.hidden)), float(m.heads), shapes.local_seq(m.seq_len),
                      shapes.micro_batch, shapes.tp, ctx.device, p=float(ctx.dtype_bytes), block=block,
                      stack=ctx.stack, sequence_parallel=shapes.sequence_parallel, cp=shapes.cp,
                      heads_split=shapes.heads_split, ep=shapes.ep, etp=shapes.etp)


def output_layer_time(lay: StepLayouts, ctx: StepContext, shapes: Optional[DistinctShapes] = None) -> np.ndarray:
    """The vocabulary-parallel output layer's GEMMs, forward and both gradients, the
    accumulation of its weight gradients, and the loss over its logits, per micro-batch,
    costed once per distinct shape (``shapes``, worked out when not given). It keeps 16 bits
    under fp8 training (Transformer Engine runs only the layers' linear GEMMs in fp8)."""
    return _output_layer(lay, ctx, shapes)[1]


def _output_layer(lay: StepLayouts, ctx: StepContext, shapes: Optional[DistinctShapes]):
    """(forward, all) of ``output_layer_time``: the forward is the logits GEMM and the loss."""
    if ctx.vocab <= 0:
        zero = np.zeros(np.shape(lay.tp))
        return zero, zero
    shapes = distinct_shapes(lay) if shapes is None else shapes
    b, tp = shapes.micro_batch, shapes.tp
    precision = "bf16" if ctx.stack.fp8 else ctx.stack.gemm_precision
    tokens = shapes.local_seq(ctx.model.seq_len) * b
    gemms = layer.training_gemms("logits", tokens, ctx.vocab / tp, float(ctx.model.hidden))
    accumulate = grad_accumulation_time(ctx.vocab * float(ctx.model.hidden) / tp, ctx.hardware, ctx.stack)
    loss = cross_entropy_time(tokens * ctx.vocab / tp, ctx.hardware, ctx.stack.cross_entropy)
    times = roofline.gemm_kernel_times(gemms, np.shape(tokens), ctx.device, precision, ctx.dtype_bytes)
    forward = loss + times[0]
    return shapes.spread(forward, np.shape(lay.tp)), shapes.spread(accumulate + loss + sum(times), np.shape(lay.tp))


def compute_per_microbatch(lay: StepLayouts, ctx: StepContext, cost: LayerCost,
                           shapes: Optional[DistinctShapes] = None) -> Dict[str, np.ndarray]:
    """Compute of one micro-batch on the busiest stage: its layers forward and backward, plus
    what recomputation repeats (``StepLayouts.recomputed``: selective the attention core's
    forward, full the whole forward of ``recomputed_share`` of the layers, dots all but the
    linear layers, op torchtitan's per-op policy's share), plus the output layer (GEMMs and loss; where
    the stack's split counts the loss as a layer, the last stage runs it in place of one, and
    the busiest stage is the longer of a middle stage and the last);
    what can hide DP traffic (forward and backward time of the stage, §6); the forward pass
    alone (``forward``: the layers' forward, the logits GEMM and the loss); and the kernels it
    launches (a mixture of experts' MLP's as Megatron-Core launches them,
    ``kernels.moe_kernels``, for the layout's local experts and dispatcher, its forward's again
    where full recomputation repeats it), less what the stack's CUDA graphs replay
    (``kernels.cuda_graphs``), in all and by pass (``forward_kernels``, ``backward_kernels``).
    The micro-batch lasts the longer of the device's time and the host's time to launch its
    kernels (``Stack.host_launch_us`` each); a mixture of experts' host waits for the device
    in every MoE layer (``moe_kernels.HOST_SYNCS``), so its forward and backward passes each
    last the longer of the two, and each wait leaves the device idle until the next launch."""
    repeat = lay.recomputed(cost.forward, cost.core_fwd, cost.linear_fwd, cost.op_repeat_fwd)
    t_layer = metrics.apply_flop_vs_bw(cost.total + repeat, ctx.flop_vs_bw)
    output_forward, output = _output_layer(lay, ctx, shapes)
    t_output = metrics.apply_flop_vs_bw(output, ctx.flop_vs_bw)
    repeated = lay.recomputed(cost.kernels_fwd, cost.kernels_core, cost.kernels_linear, cost.kernels_op_repeat)
    t_layer_forward = metrics.apply_flop_vs_bw(cost.forward, ctx.flop_vs_bw)
    forward_hide = lay.layers_per_stage * t_layer_forward
    flex = lay.dispatcher == code("dispatcher", "flex")
    graphed_fwd, graphed_bwd = graphed_kernels(ctx.stack.cuda_graph_scope, cost.kernels_attention, ctx.moe_share,
                                               flex)
    moe_fwd, moe_bwd = _moe_kernels(lay, ctx, flex)
    kernels_fwd = lay.layers_per_stage * (cost.kernels_fwd + ctx.moe_share * moe_fwd - graphed_fwd)
    kernels_bwd = lay.layers_per_stage * (2 * cost.kernels_fwd + repeated - graphed_bwd + ctx.moe_share
                                          * (moe_fwd * lay.recomputed_share + moe_bwd)) \
        + (3 + CROSS_ENTROPY_KERNELS[ctx.stack.cross_entropy] if ctx.vocab > 0 else 0)
    # A split counting the loss as a layer (Stack.pipeline_split) runs the output layer in
    # place of one of the last stage's layers: the busiest stage is the longer of the two.
    short = split_shortfall(lay.pp, ctx.stack)[1]
    device = lay.layers_per_stage * t_layer + np.maximum(t_output - short * t_layer, 0.0)
    # The host launches every kernel (Stack.host_launch_us); the device cannot run ahead of it.
    # The host's path does not speed up with the device (flop_vs_bw scales the device only).
    launch_s = ctx.stack.host_launch_us * 1e-6
    if ctx.block.moe:
        # A MoE layer's host waits for the device (kernels.moe_kernels.HOST_SYNCS): the forward
        # cannot run ahead into the backward, and the device idles until the next launch.
        syncs_fwd, syncs_bwd = (lay.layers_per_stage * ctx.moe_share * s for s in by_dispatcher(HOST_SYNCS, flex))
        per_microbatch = np.maximum(forward_hide, kernels_fwd * launch_s) + syncs_fwd * launch_s \
            + np.maximum(device - forward_hide, kernels_bwd * launch_s) + syncs_bwd * launch_s
    else:
        per_microbatch = np.maximum(device, (kernels_fwd + kernels_bwd) * launch_s)
    return {
        "per_microbatch": per_microbatch,
        "forward": forward_hide + np.maximum(metrics.apply_flop_vs_bw(output_forward, ctx.flop_vs_bw)
                                             - short * t_layer_forward, 0.0),
        "forward_hide": forward_hide,
        "backward_hide": lay.layers_per_stage * metrics.apply_flop_vs_bw(cost.gemm_bwd + cost.attention_bwd,
                                                                         ctx.flop_vs_bw),
        "kernels_per_microbatch": kernels_fwd + kernels_bwd,
        "forward_kernels": kernels_fwd + np.zeros(np.shape(lay.tp)),
        "backward_kernels": kernels_bwd + np.zeros(np.shape(lay.tp)),
    }


def _moe_kernels(lay: StepLayouts, ctx: StepContext, flex):
    """(forward, backward) kernels one MoE layer's MLP launches in a micro-batch (``flex``: the
    layouts on the flex dispatcher); zeros for a dense model."""
    block = ctx.block
    if not block.moe:
        return 0.0, 0.0
    unfused = not ctx.stack.moe_fused_mlp
    return moe_mlp_kernels(block.experts / lay.ep, flex, block.shared_ffn > 0,
                           clamp=block.expert_clamp and unfused, bias=block.expert_bias and unfused)


def optimizer_time(lay: StepLayouts, ctx: StepContext, params: np.ndarray) -> np.ndarray:
    """The optimizer step, memory-bound over the device's shard of the optimizer states:
    ``OPTIMIZER_BYTES_PER_PARAM`` per parameter at the achieved HBM bandwidth. Of ``params``
    (the stage's, on one device), a mixture of experts' routed experts are sharded over EDP."""
    experts = lay.layers_per_stage * layer_weights_per_device(lay, ctx)[1]
    shard = model_state_shard_params(params - experts, lay.shard_ranks(ctx.hardware), lay.zero) \
        + model_state_shard_params(experts, lay.edp, lay.zero)
    return metrics.apply_flop_vs_bw(roofline.memory_bound_time(shard * OPTIMIZER_BYTES_PER_PARAM, ctx.hardware),
                                    ctx.flop_vs_bw)
