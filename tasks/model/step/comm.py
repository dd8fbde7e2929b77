"""Communication of a micro-batch: TP, CP, PP and a mixture of experts' dispatch and combine,
what of them the stack overlaps with compute, and the step's latency floor (method.md §3 and
§6; Korthikanti et al., arXiv 2205.05198; Narayanan et al. 2021). The DP collectives are
``step.dp_comm``'s. Vectorised over layouts; seconds."""

from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from tasks.model.collectives import async_tp
from tasks.model.collectives.cp_exchange import cp_layer_exchange, kv_chunk_bytes
from tasks.model.collectives.ep_exchange import ep_layer_exchange
from tasks.model.kernels import layer
from tasks.model.terms import metrics
from tasks.model.terms.layout import code
from tasks.model.collectives.nccl import lowest_latency, tier_figures
from tasks.model.collectives.layer_comm import tp_collective_time, tp_collectives_per_layer, tp_ranks_per_node
from tasks.model.kernels.layer_cost import TP_SIDES, LayerCost
from tasks.model.kernels.roofline import memory_bound_time
from tasks.model.step.context import (DistinctShapes, StepContext, StepLayouts, distinct_shapes, on_distinct,
                                      tp_crosses_nodes)

__all__ = ["tp_exposed_per_pass", "tp_collective", "dtensor_copy", "dtensor_copies", "tp_comm", "cp_comm", "pp_comm",
           "lone_microbatches", "a2a_overlapped", "dispatcher_sm_share", "ep_comm", "latency_floor"]


def tp_exposed_per_pass(one, lay: StepLayouts, cost: LayerCost, ctx: StepContext):
    """(forward, backward) TP time of one layer the step waits for, given ``one`` collective's
    time (``tp_collective``) among each layout's TP ranks (under sequence parallelism a
    reduce-scatter and an all-gather, each taken as half of it; else an all-reduce): each
    pass runs two. Serialized, all of it. With ``stack.tp_overlap`` each collective is split
    into TP chunks pipelined with the chunks of the GEMMs it feeds or drains (Wang et al.,
    ASPLOS 2023, "Overlap communication with dependent computation via decomposition";
    Transformer Engine's communication-GEMM overlap; PyTorch's symmetric-memory async TP):
    each hides behind those GEMMs alone (``LayerCost.sides_fwd``/``sides_bwd``,
    ``layer_cost.TP_SIDES``), as far as they last, except one chunk, 1/TP of it, which has no
    GEMM chunk beside it; what a collective longer than its GEMMs has left over waits. An
    all-reduce (no sequence parallelism) follows the sublayer's output projection forward
    and its input projection's gradients backward. Under the ``dtensor`` engine the overlap
    is async TP's (``collectives.async_tp``): a collective it does not fuse stays serialized
    with DTensor's copy, and each fused one adds its shard copy or its partials' sum. Only a
    TP group inside one node overlaps: Transformer Engine's userbuffers build the
    tensor-parallel group from consecutive GPUs of the node's NVLink domain
    (transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers-host.cpp at
    d0067d0da, ``create_communicator_grouped2``: ``ar2_firstgpu`` a local index, ``nvsize`` the
    node's GPUs), and symmetric memory maps only peers it reaches, so a group across nodes
    stays serialized."""
    serialized = 2.0 * one
    if not ctx.stack.tp_overlap:
        return serialized, serialized
    tp = np.maximum(np.asarray(lay.tp, dtype=np.float64), 1.0)
    within = ~tp_crosses_nodes(tp, ctx.hardware)
    sp = np.asarray(lay.sequence_parallel, dtype=bool)
    fused, extra = _async_tp(lay, ctx, tp)

    def exposed(sides, fused_sides, reduced_after, added):
        gemms = [metrics.apply_flop_vs_bw(sides[..., i], ctx.flop_vs_bw) for i in range(len(TP_SIDES))]
        halves = sum(np.maximum(one / 2.0 / tp, one / 2.0 - t) if on else one / 2.0
                     for t, on in zip(gemms, fused_sides, strict=True))
        whole = sum(np.maximum(one / tp, one - gemms[i]) for i in reduced_after)
        return np.where(within, np.where(sp, halves + added, whole), serialized)

    return (exposed(cost.sides_fwd, fused[0], (1, 3), extra[0]),
            exposed(cost.sides_bwd, fused[1], (0, 2), extra[1]))


def _async_tp(lay: StepLayouts, ctx: StepContext, tp):
    """((forward, backward) sides the overlap fuses, (forward, backward) seconds it adds per
    layer): every side fused and nothing added unless the ``dtensor`` engine runs async TP
    (``collectives.async_tp``): then each fused all-gather's shard copy, each fused
    reduce-scatter's partials' sum, each unfused reduce-scatter's DTensor copy, and the fused
    products run block-wise, TP products of 1/TP of the rows each
    (``async_tp.chunked_products_time``), where the layout has TP."""
    stack, m = ctx.stack, ctx.model
    every = (True,) * len(TP_SIDES)
    if stack.tp_engine != "dtensor":
        return (every, every), (0.0, 0.0)
    fused = async_tp.fused_sides(float(m.hidden), float(m.heads), ctx.block)
    p = float(ctx.dtype_bytes)
    h, seq, b, hw = float(m.hidden), lay.local_seq(m.seq_len), lay.micro_batch, ctx.device
    gather, gather_grad = (async_tp.shard_copy_time(h, seq, b, tp, width, hw) for width in (_gather_width(ctx), p))
    reduce = async_tp.partials_sum_time(h, seq, b, tp, p, hw)
    unfused = dtensor_copy(h, seq, b, p, ctx)
    precision = stack.gemm_precision
    chunks_fwd, chunks_bwd = (metrics.apply_flop_vs_bw(t, ctx.flop_vs_bw) for t in async_tp.chunked_products_time(
        h, float(m.heads), seq, b, tp, ctx.block, fused, hw, precision=precision,
        element_bytes=1.0 if precision == "fp8" else p))
    forward = 2.0 * gather + 2.0 * reduce + chunks_fwd
    backward = 2.0 * gather_grad + sum(reduce if on else unfused for on in fused[1][0::2]) + chunks_bwd
    split = tp > 1.0     # a layout without TP runs none of these ops
    return fused, (np.where(split, forward, 0.0), np.where(split, backward, 0.0))


def tp_collective(lay: StepLayouts, ctx: StepContext, shapes: Optional[DistinctShapes] = None) -> np.ndarray:
    """One TP collective of a layer (an all-reduce, or reduce-scatter + all-gather under
    sequence parallelism) on the tier the TP group spans; 0 at TP 1. Under the ``dtensor``
    TP engine (``Stack.tp_engine``) a sequence-parallel pair also copies the whole tensor
    into place twice, once for each collective, where no overlap fuses them with their GEMMs
    (the copies read and write it: ``dtensor_copies``), and under fp8 GEMMs its all-gather
    moves the fp8 input. It depends only on the layout's (micro-batch, TP, SP): timed once per
    distinct one (``shapes``, worked out when not given)."""
    m, hw, stack = ctx.model, ctx.hardware, ctx.stack
    shapes = distinct_shapes(lay) if shapes is None else shapes
    dtensor, p, gather_p = stack.tp_engine == "dtensor", float(ctx.dtype_bytes), _gather_width(ctx)
    h, seq = float(m.hidden), shapes.local_seq(m.seq_len)
    one = tp_collective_time(h, seq, shapes.micro_batch, shapes.tp, p, tp_crosses_nodes(shapes.tp, hw), hw,
                             sequence_parallel=shapes.sequence_parallel, gather_p=gather_p)
    if dtensor and not stack.tp_overlap:
        one = one + np.where(shapes.sequence_parallel, dtensor_copies(h, seq, shapes.micro_batch, p, gather_p, ctx),
                             0.0)
    return shapes.spread(np.where(shapes.tp > 1, one, 0.0), np.shape(lay.tp))


def _gather_width(ctx: StepContext) -> float:
    """Bytes an element of a sequence-parallel all-gather moves: one under the ``dtensor``
    engine with fp8 GEMMs (the column-parallel inputs gathered in fp8), else the activations'."""
    return 1.0 if ctx.stack.tp_engine == "dtensor" and ctx.stack.fp8 else float(ctx.dtype_bytes)


def dtensor_copy(h, seq, micro_batch, width: float, ctx: StepContext):
    """Seconds of one copy PyTorch's functional collectives make around a sequence-parallel
    collective on batch-first activations (``Stack.tp_engine`` dtensor): the whole SL*B*H
    tensor, ``width`` bytes an element, read and written, memory-bound on the training device."""
    return memory_bound_time(2.0 * layer.tp_allreduce_bytes(h, seq, micro_batch, width), ctx.device)


def dtensor_copies(h, seq, micro_batch, p: float, gather_p: float, ctx: StepContext):
    """Seconds of the two copies around a sequence-parallel pair (``dtensor_copy``): the
    reduce-scatter's input chunked on the sequence and concatenated on the leading dimension
    (at ``p`` bytes an element), the all-gather's result the other way (at ``gather_p``)."""
    return sum(dtensor_copy(h, seq, micro_batch, width, ctx) for width in (p, gather_p))


def tp_comm(lay: StepLayouts, ctx: StepContext, cost: LayerCost,
            shapes: Optional[DistinctShapes] = None) -> Dict[str, np.ndarray]:
    """TP communication of one micro-batch on the busiest stage: ``tp_collectives_per_layer``
    per layer (what recomputation runs again, ``StepLayouts.tp_repeat_share``, runs in the
    backward pass and hides its own as the first forward did) and one for the
    vocabulary-parallel embedding, in the forward pass.
    ``one``: one collective; ``forward_total``/``backward_total``: all of each pass's;
    ``forward_exposed``/``backward_exposed``: what each pass waits for
    (``tp_exposed_per_pass``); ``total`` and ``exposed``: their sums."""
    one = tp_collective(lay, ctx, shapes)
    embedding = one if ctx.vocab > 0 else 0.0
    per_layer = tp_collectives_per_layer(lay.tp_repeat_share)
    total = lay.layers_per_stage * per_layer * one + embedding
    forward_total = lay.layers_per_stage * tp_collectives_per_layer(0.0) / 2.0 * one + embedding
    fwd, bwd = tp_exposed_per_pass(one, lay, cost, ctx)
    exposed = lay.layers_per_stage * (fwd * (1.0 + lay.tp_repeat_share) + bwd) + embedding
    forward_exposed = lay.layers_per_stage * fwd + embedding
    return {"one": one, "total": total, "exposed": exposed, "forward_total": forward_total,
            "backward_total": total - forward_total, "forward_exposed": forward_exposed,
            "backward_exposed": exposed - forward_exposed}


def cp_comm(lay: StepLayouts, ctx: StepContext, cost: LayerCost) -> Dict[str, np.ndarray]:
    """Context parallelism's exchange of keys and values in one micro-batch on the busiest stage
    (``collectives.cp_exchange``, per layer, times the stage's layers): ``total``, ``exposed``,
    ``forward_total``, ``forward_exposed`` and ``latency`` (its α steps alone); 0 at CP 1. A
    ring hop hides behind one attention step, a CP-th of the layer's attention (``cost``); the
    all-to-all exchange moves the queries and the attention output too."""
    if not np.any(lay.cp > 1):     # a table without CP (every search's): nothing to price
        nothing = np.zeros(np.shape(lay.tp))
        return {name: nothing for name in ("total", "exposed", "forward_total", "forward_exposed", "latency")}
    m, block = ctx.model, ctx.block
    h, heads = float(m.hidden), float(m.heads)
    tokens = lay.micro_batch * lay.local_seq(m.seq_len)
    chunk = kv_chunk_bytes(tokens, float(block.kv(heads)), float(block.kv_dim(h, heads)), lay.tp,
                           float(ctx.dtype_bytes))
    step_fwd = metrics.apply_flop_vs_bw(cost.attention_fwd, ctx.flop_vs_bw) / lay.cp
    step_bwd = metrics.apply_flop_vs_bw(cost.attention_bwd, ctx.flop_vs_bw) / lay.cp
    repeats = lay.recomputed_share + np.where(lay.core_recomputed, 1.0, 0.0)
    layer_figures = cp_layer_exchange(lay.cp, lay.cp_comm, chunk, lay.cp_crosses(ctx.hardware), step_fwd, step_bwd,
                                      repeats, ctx.hardware, tp=lay.tp,
                                      q_bytes=tokens * block.attention_width(h, heads) / lay.tp
                                      * float(ctx.dtype_bytes))
    return {name: lay.layers_per_stage * value for name, value in layer_figures.items()}


def pp_comm(lay: StepLayouts, ctx: StepContext, compute_mb: np.ndarray) -> Dict[str, np.ndarray]:
    """PP: each micro-batch's activations forward and its gradient backward per stage
    boundary, v times for the interleaved schedule. Each TP rank sends 1/TP of the activation
    (already split under sequence parallelism; otherwise Megatron's scatter/gather
    optimisation, Narayanan et al. 2021 §4.1, which then all-gathers it inside the node,
    left out here as cheap beside the cross-stage send). With ``stack.pp_overlap`` an
    interleaved schedule's sends hide behind the micro-batch's compute; the plain 1F1B
    schedule waits for its sends whatever the switch says (Megatron-LM turns overlap_p2p_comm
    off without a virtual pipeline, megatron/training/arguments.py; Megatron-Bridge sets it
    exactly when VP > 1, src/megatron/bridge/training/comm_overlap.py)."""
    hw = ctx.hardware
    (a_in, bw_in), (a_out, bw_out) = tier_figures(hw.intra_node), tier_figures(hw.inter_node)
    crosses = lay.pp_crosses(hw)
    alpha, bandwidth = np.where(crosses, a_out, a_in), np.where(crosses, bw_out, bw_in)
    message = layer.tp_allreduce_bytes(float(ctx.model.hidden), lay.local_seq(ctx.model.seq_len),
                                       lay.micro_batch, float(ctx.dtype_bytes))
    p2p_bytes = message / lay.tp
    total = np.where(lay.pp > 1, 2.0 * lay.stages * (alpha + p2p_bytes / bandwidth), 0.0)
    hidden = np.maximum(0.0, total - compute_mb)
    exposed = np.where(lay.interleaved, hidden, total) if ctx.stack.pp_overlap else total
    return {"total": total, "exposed": exposed}


def latency_floor(lay: StepLayouts, ctx: StepContext, ticks: np.ndarray, kernels_per_mb: np.ndarray,
                  dp: Dict[str, np.ndarray]) -> np.ndarray:
    """The latency floor (Erdil and Schneider-Joseph, arXiv 2411.01137): the step's time if
    every kernel and collective moved no bytes and did no FLOPs, launches and latency steps
    only (a kernel's launch: the longer of the device's floor, ``kernel_launch_us``, and the
    host's path, ``Stack.host_launch_us``; each group's least latency on the tiers it spans,
    over the algorithms and protocols NCCL may run: ``collectives.nccl.lowest_latency``; the
    DP collectives' latency steps as ``dp``, ``dp_comm.dp_comm``'s figures, count them)."""
    hw = ctx.hardware
    tp_latency = on_distinct(("tp",), _tp_latency, lay, ctx)
    alpha_pp = np.where(lay.pp_crosses(hw), hw.inter_node.latency_us, hw.intra_node.latency_us) * 1e-6
    tp_collectives = lay.layers_per_stage * tp_collectives_per_layer(lay.tp_repeat_share) \
        + (1.0 if ctx.vocab > 0 else 0.0)
    dp_mb, dp_step = dp["latency_microbatch"], dp["latency_step"]
    alpha_mb = tp_collectives * tp_latency + np.where(lay.pp > 1, 2.0 * lay.stages * alpha_pp, 0.0) + dp_mb
    # Each kernel costs the longer of the device's floor and the host's launch path.
    per_kernel_s = max(hw.kernel_launch_us, ctx.stack.host_launch_us) * 1e-6
    return ticks * (kernels_per_mb * per_kernel_s + alpha_mb) + dp_step


def _tp_latency(lay: StepLayouts, ctx: StepContext) -> np.ndarray:
    """The least latency of one TP all-reduce (``collectives.nccl.lowest_latency``): it reads TP alone."""
    hw = ctx.hardware
    return lowest_latency("all_reduce", lay.tp, lay.tp_crosses(hw), hw,
                          local_ranks=tp_ranks_per_node(lay.tp, hw.devices_per_node))


def lone_microbatches(lay: StepLayouts) -> np.ndarray:
    """Micro-batches' worth of passes the busiest stage runs with no other micro-batch's pass
    beside it under Megatron-Core's combined 1F1B schedule (``Stack.moe_a2a_overlap``): with
    no pipeline, the first micro-batch's forward and the last one's backward ("executed alone,
    no a2a overlapping", megatron/core/pipeline_parallel/combined_1f1b.py at d0b3b775), one
    micro-batch's worth; interleaved over p stages of v chunks, the first stage's warm-up
    forwards, 2(p - 1) + (v - 1) p + 1 chunks (``get_pp_rank_microbatches`` in schedules.py,
    the micro-batch group a stage's chunk runs being p, and one more chunk under the overlap),
    and as many cool-down backwards: that over v, at most the step's micro-batches (the same
    count gives one chunk of one, v over v, without a pipeline)."""
    p, v = lay.pp, lay.stages
    return np.minimum((2.0 * (p - 1.0) + (v - 1.0) * p + 1.0) / v, lay.microbatches)


def a2a_overlapped(lay: StepLayouts, ctx: StepContext) -> np.ndarray:
    """Where the stack's ``moe_a2a_overlap`` runs: Megatron-Core's combined 1F1B schedule
    exists without a pipeline and for the interleaved one, not beside full recomputation
    (megatron/core/transformer/transformer_config.py at d0b3b775 asserts that a pipeline of
    more than one stage specifies virtual stages, and that full recomputation is off); a 1F1B
    pipeline waits for every exchange."""
    return ctx.stack.moe_a2a_overlap & (lay.recomputed_share == 0.0) & ((lay.pp == 1) | lay.interleaved)


def ep_comm(lay: StepLayouts, ctx: StepContext, cost: LayerCost) -> Dict[str, np.ndarray]:
    """Expert parallelism's dispatch and combine in one micro-batch on the busiest stage
    (``collectives.ep_exchange``, per MoE layer, times the stage's share of MoE layers):
    ``total``, ``exposed``, ``forward_total``, ``forward_exposed`` and ``latency``; and
    ``lone``: what the step waits for once, of the passes that run with no other beside them
    (``lone_microbatches`` of the hidden part of one micro-batch's exchange); and
    ``contention``: the seconds the compute beside the hidden part of one micro-batch's flex
    dispatch and combine loses to the SMs its kernels hold, hidden x ``Stack.dispatcher_sms`` /
    the device's SMs (that compute runs on the rest while the exchange lasts; the passes that
    run alone are charged too, an upper bound by their share of the step); 0 for a dense
    model. Each TP rank dispatches its tokens/TP x topk routed copies at the activations'
    width with the layout's dispatcher (``layout.MOE_DISPATCHERS``); under
    ``Stack.moe_a2a_overlap`` a pass's exchange hides behind the layer's other pass (``cost``)
    of another micro-batch where Megatron-Core runs the overlap (``a2a_overlapped``)."""
    block = ctx.block
    if not block.moe:
        nothing = np.zeros(np.shape(lay.tp))
        return {name: nothing for name in ("total", "exposed", "forward_total", "forward_exposed", "latency", "lone",
                                           "contention")}
    m = ctx.model
    tokens = lay.micro_batch * lay.local_seq(m.seq_len)
    routed = tokens / lay.tp * block.topk
    flex = lay.dispatcher == code("dispatcher", "flex")
    figures = ep_layer_exchange(lay.ep, lay.etp, routed * float(m.hidden) * float(ctx.dtype_bytes), ctx.hardware,
                                crosses=lay.ep_crosses(ctx.hardware), local=lay.ep_local_ranks(ctx.hardware),
                                flex=flex, topk=block.topk,
                                repeats=lay.recomputed_share,
                                overlap=a2a_overlapped(lay, ctx),
                                hide_fwd=metrics.apply_flop_vs_bw(cost.forward, ctx.flop_vs_bw),
                                hide_bwd=metrics.apply_flop_vs_bw(cost.backward, ctx.flop_vs_bw))
    layers = lay.layers_per_stage * ctx.moe_share
    out = {name: layers * value for name, value in figures.items()}
    hidden = out["total"] - out["exposed"]
    out["lone"] = lone_microbatches(lay) * hidden
    out["contention"] = np.where(flex, hidden * dispatcher_sm_share(ctx), 0.0)
    return out


def dispatcher_sm_share(ctx: StepContext) -> float:
    """The share of the device's SMs the flex dispatcher's kernels hold
    (``Stack.dispatcher_sms`` / ``HardwareProfile.compute_units``, at most all of them)."""
    return min(float(ctx.stack.dispatcher_sms) / float(ctx.hardware.compute_units), 1.0)
