"""Communication of a whole step: TP, CP, PP and DP/ZeRO collectives, what of them the stack
overlaps with compute, the bytes DP moves, and the latency floor (method.md §3 and §6;
Korthikanti et al., arXiv 2205.05198; Rajbhandari et al., ZeRO, 2020; Narayanan et al. 2021).
Vectorised over layouts; seconds and bytes."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from tasks.model.collectives import dp_protocol
from tasks.model.collectives.cp_exchange import cp_layer_exchange, kv_chunk_bytes
from tasks.model.kernels import layer, roofline
from tasks.model.terms import metrics
from tasks.model.collectives.nccl import bus_factor, lowest_latency, tier_figures, tier_time
from tasks.model.collectives.layer_comm import tp_collective_time, tp_collectives_per_layer, tp_ranks_per_node
from tasks.model.kernels.layer_cost import LayerCost
from tasks.model.step.context import (DistinctShapes, StepContext, StepLayouts, distinct_shapes,
                                      layer_weights_per_device, tp_crosses_nodes)
from tasks.model.step.memory import FP8_WEIGHT_BYTES
from tasks.model.step.moe_comm import expert_dp_figures

__all__ = ["tp_exposed_per_pass", "tp_collective", "tp_comm", "cp_comm", "pp_comm", "dp_widths", "dp_comm",
           "dp_by_window", "dp_traffic", "latency_floor", "embedding_matrices", "engine_copies"]


def tp_exposed_per_pass(one, tp, cost: LayerCost, ctx: StepContext):
    """(forward, backward) TP time of one layer the step waits for, given ``one`` collective's
    time among ``tp`` ranks: each pass runs two. Serialized, all of it. With ``stack.tp_overlap`` each
    collective is split into TP chunks pipelined with the chunks of the GEMM it feeds (Wang
    et al., ASPLOS 2023, "Overlap communication with dependent computation via
    decomposition"; Transformer Engine's communication-GEMM overlap): the pass's two hide
    behind its linear GEMMs as far as those last, except one chunk each, 1/TP of it, which
    has no GEMM chunk beside it. Only a TP group inside one node overlaps: Transformer
    Engine's userbuffers build the tensor-parallel group from consecutive GPUs of the node's
    NVLink domain (transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers-host.cpp
    at d0067d0da, ``create_communicator_grouped2``: ``ar2_firstgpu`` a local index, ``nvsize``
    the node's GPUs), so a group across nodes stays serialized."""
    serialized = 2.0 * one
    if not ctx.stack.tp_overlap:
        return serialized, serialized
    tp = np.maximum(np.asarray(tp, dtype=np.float64), 1.0)
    within = ~tp_crosses_nodes(tp, ctx.hardware)
    lin_fwd = metrics.apply_flop_vs_bw(cost.linear_fwd, ctx.flop_vs_bw)
    lin_bwd = metrics.apply_flop_vs_bw(cost.linear_bwd, ctx.flop_vs_bw)
    floor = serialized / tp
    return (np.where(within, np.maximum(floor, serialized - lin_fwd), serialized),
            np.where(within, np.maximum(floor, serialized - lin_bwd), serialized))


def tp_collective(lay: StepLayouts, ctx: StepContext, shapes: Optional[DistinctShapes] = None) -> np.ndarray:
    """One TP collective of a layer (an all-reduce, or reduce-scatter + all-gather under
    sequence parallelism) on the tier the TP group spans; 0 at TP 1. It depends only on
    the layout's (micro-batch, TP, SP): timed once per distinct one (``shapes``, worked out
    when not given)."""
    m, hw = ctx.model, ctx.hardware
    shapes = distinct_shapes(lay) if shapes is None else shapes
    one = tp_collective_time(float(m.hidden), shapes.local_seq(m.seq_len), shapes.micro_batch, shapes.tp,
                             float(ctx.dtype_bytes), tp_crosses_nodes(shapes.tp, hw), hw, shapes.sequence_parallel)
    return shapes.spread(np.where(shapes.tp > 1, one, 0.0), np.shape(lay.tp))


def tp_comm(lay: StepLayouts, ctx: StepContext, cost: LayerCost,
            shapes: Optional[DistinctShapes] = None) -> Dict[str, np.ndarray]:
    """TP communication of one micro-batch on the busiest stage: ``tp_collectives_per_layer``
    per layer (full recomputation's repeat runs in the backward pass and hides its own as the
    first forward did) and one for the vocabulary-parallel embedding, in the forward pass.
    ``one``: one collective; ``forward_total``/``backward_total``: all of each pass's;
    ``forward_exposed``/``backward_exposed``: what each pass waits for
    (``tp_exposed_per_pass``); ``total`` and ``exposed``: their sums."""
    one = tp_collective(lay, ctx, shapes)
    embedding = one if ctx.vocab > 0 else 0.0
    per_layer = tp_collectives_per_layer(lay.recomputed_share)
    total = lay.layers_per_stage * per_layer * one + embedding
    forward_total = lay.layers_per_stage * tp_collectives_per_layer(0.0) / 2.0 * one + embedding
    fwd, bwd = tp_exposed_per_pass(one, lay.tp, cost, ctx)
    exposed = lay.layers_per_stage * (fwd * (1.0 + lay.recomputed_share) + bwd) + embedding
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
    repeats = lay.recomputed_share + np.where(lay.selective, 1.0, 0.0)
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


def embedding_matrices(lay: StepLayouts) -> np.ndarray:
    """Embedding matrices on the busiest stage: input and output (tied or not) when PP = 1."""
    return np.where(lay.pp > 1, 1.0, 2.0)


def _stage_elements(lay: StepLayouts, ctx: StepContext) -> tuple:
    """(one layer's TP-split weights, the stage's embeddings') on one device: each DP message
    carries one value per weight, at the width of what it moves (``dp_widths``). A mixture of
    experts' routed experts are ``moe_comm.expert_dp_figures``'."""
    per_layer = layer_weights_per_device(lay, ctx)[0]
    return per_layer, embedding_matrices(lay) * ctx.vocab * float(ctx.model.hidden) / lay.tp


def dp_widths(ctx: StepContext, embedding: bool = False) -> Dict[str, float]:
    """Bytes per value of each DP collective on a layer's weights (or, with ``embedding``, on
    the embedding matrices'): gradients are reduced (all-reduce, reduce-scatter) in the
    gradient buffer they were accumulated in, ``stack.main_grad_bytes`` (Megatron's DDP
    reduces its buffer as it is: fp32 for bf16 since Megatron-LM forced
    --accumulate-allreduce-grads-in-fp32 for bf16 in April 2021, Megatron-Core's
    grad_reduce_in_fp32; 16 bits for fp16); weights are gathered at the run's width, a layer's
    in fp8 under the stack's ``fp8_params`` (``memory.FP8_WEIGHT_BYTES``; the embedding stays
    16-bit)."""
    grads = float(ctx.stack.main_grad_bytes)
    weights = FP8_WEIGHT_BYTES if ctx.stack.fp8_params and not embedding else float(ctx.dtype_bytes)
    return {"all_reduce": grads, "reduce_scatter": grads, "all_gather": weights}


#: The key of a DP collective's time or bytes over a stage: (op, ``dp_protocol.DP_GROUPS`` entry).
DpKey = Tuple[str, str]


def _dp_groups(lay: StepLayouts, ctx: StepContext) -> Dict[str, Tuple[str, ...]]:
    """The groups the stack's sharding modes run collectives on, each with its ops: the
    shard and replicate groups only where some layout runs a hybrid mode (the collectives of
    a group no layout runs on cost 0: ``_dp_figure``)."""
    any_hybrid = bool(np.any(dp_protocol.hybrid(lay.zero)))
    groups: Dict[str, Tuple[str, ...]] = {"dp": ("all_reduce", "all_gather", "reduce_scatter")}
    for mode in dp_protocol.sharding_of(ctx.stack).values():
        for c in mode.collectives:
            if c.group != "dp" and any_hybrid and c.op not in groups.get(c.group, ()):
                groups[c.group] = groups.get(c.group, ()) + (c.op,)
    return groups


def _dp_figure(figures: Dict[DpKey, np.ndarray], c: dp_protocol.DpCollective):
    """``c``'s figure (time or bytes over a stage) in ``figures``, 0 where its group is not costed."""
    return figures.get((c.op, c.group), 0.0)


def _dp_times(lay: StepLayouts, ctx: StepContext) -> Dict[DpKey, np.ndarray]:
    """Each DP op on all of a stage's weight tensors (one collective per layer and one for
    the stage's embedding matrices, or one per weight tensor where the stack's DP engine moves
    them so: ``_per_tensor_layer_time``), on the tiers each of its groups spans
    (``StepLayouts.dp_group``); 0 for a group of one rank."""
    hw = ctx.hardware
    per_layer, embed = _stage_elements(lay, ctx)
    widths, embed_widths = dp_widths(ctx), dp_widths(ctx, embedding=True)
    engine = dp_protocol.DP_ENGINES[ctx.stack.dp_engine]
    by_tensor = engine_layouts(lay, ctx) if engine.per_tensor else None
    times: Dict[DpKey, np.ndarray] = {}
    for group, ops in _dp_groups(lay, ctx).items():
        ranks, local, crosses, share = lay.dp_group(group, hw)
        for op in ops:
            width = widths[op] * share
            if ctx.vocab <= 0:
                layer_t, embed_t = tier_time(op, ranks, width * per_layer, crosses, hw, local_ranks=local), 0.0
            else:
                # One call for both messages: the groups' figures are worked out once.
                messages = np.stack(np.broadcast_arrays(width * per_layer, embed_widths[op] * share * embed))
                layer_t, embed_t = tier_time(op, ranks, messages, crosses, hw, local_ranks=local)
            if by_tensor is not None and group == "dp":
                layer_t = np.where(by_tensor, _per_tensor_layer_time(op, width, lay, ctx, engine, crosses, local),
                                   layer_t)
                embed_t = embed_t + np.where(by_tensor, _rank_copies(engine, lay, ctx) * embedding_matrices(lay), 0.0)
            times[(op, group)] = np.where(ranks > 1, lay.layers_per_stage * layer_t + embed_t, 0.0)
            if group == "dp":
                times[(op, group)] = times[(op, group)] + expert_dp_figures(lay, ctx, op, widths[op])[0]
    return times


def engine_layouts(lay: StepLayouts, ctx: StepContext) -> np.ndarray:
    """Whether each layout's sharding mode is one the stack's DP engine runs its own way
    (``dp_protocol.DpEngine.modes``)."""
    engine = dp_protocol.DP_ENGINES[ctx.stack.dp_engine]
    return dp_protocol.by_mode(lay.zero, lambda mode: mode.name in engine.modes) > 0


def engine_copies(lay: StepLayouts, ctx: StepContext) -> Dict[str, np.ndarray]:
    """Seconds of copies the stack's DP engine runs on the compute stream in one micro-batch
    of the busiest stage (``DpEngine.gather_copy_out``, ``reduce_copy_in``), for the layouts
    whose mode it runs with DP > 1: ``forward`` (a copy-out after each weight gather hidden by
    the forward) and ``backward`` (after each gathered by the backward, and each per-micro-batch
    reduce-scatter's copy-in). Memory-bound at the achieved HBM bandwidth; 0 elsewhere."""
    engine = dp_protocol.DP_ENGINES[ctx.stack.dp_engine]
    if not (engine.gather_copy_out or engine.reduce_copy_in):
        nothing = np.zeros(np.shape(lay.tp))
        return {"forward": nothing, "backward": nothing}
    per_layer, embed = _stage_elements(lay, ctx)
    gather, embed_gather = dp_widths(ctx)["all_gather"], dp_widths(ctx, embedding=True)["all_gather"]
    weights = lay.layers_per_stage * per_layer * gather + embed * embed_gather
    values = lay.layers_per_stage * per_layer + embed
    copy_out = roofline.memory_bound_time(2.0 * weights, ctx.hardware) if engine.gather_copy_out else 0.0
    copy_in = roofline.memory_bound_time((float(ctx.dtype_bytes) + float(ctx.stack.main_grad_bytes)) * values,
                                         ctx.hardware) if engine.reduce_copy_in else 0.0
    table = dp_protocol.sharding_of(ctx.stack)

    def count(op: str, window: str):
        return dp_protocol.by_mode(lay.zero, lambda mode: sum(
            1.0 for c in mode.collectives if c.op == op and c.per_microbatch and c.hidden_by == window), table)

    runs = engine_layouts(lay, ctx) & (lay.grad_ranks > 1)
    forward = count("all_gather", "forward") * copy_out
    backward = count("all_gather", "backward") * copy_out + count("reduce_scatter", "backward") * copy_in
    return {name: np.where(runs, metrics.apply_flop_vs_bw(t, ctx.flop_vs_bw), 0.0)
            for name, t in (("forward", forward), ("backward", backward))}


def _rank_copies(engine: dp_protocol.DpEngine, lay: StepLayouts, ctx: StepContext) -> np.ndarray:
    """Seconds one collective spends copying its ranks' parts, one kernel per rank, where the
    engine goes through PyTorch's list API (``DpEngine.copy_per_rank``); else 0."""
    return lay.grad_ranks * ctx.hardware.kernel_launch_us * 1e-6 if engine.copy_per_rank else np.zeros_like(lay.dp)


def _per_tensor_layer_time(op: str, width: float, lay: StepLayouts, ctx: StepContext,
                           engine: dp_protocol.DpEngine, crosses, local) -> np.ndarray:
    """``op`` over one layer's weights moved one tensor per collective (``layer.layer_tensors``,
    each 1/TP on a device, at ``width`` bytes per value), on the DP group's tiers (``crosses``,
    ``local``: as ``_dp_times`` found them), each call with its ranks' copies (``_rank_copies``)."""
    m = ctx.model
    matrices, vectors = layer.layer_tensors(float(m.hidden), float(m.heads), ctx.block)
    tensors = np.asarray(matrices + vectors)[:, None] * width / lay.tp
    each = tier_time(op, lay.grad_ranks, tensors, crosses, ctx.hardware, local_ranks=local)
    return each.sum(axis=0) + len(matrices + vectors) * _rank_copies(engine, lay, ctx)


def dp_comm(lay: StepLayouts, ctx: StepContext, compute: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """DP / ZeRO communication of a step, as each layout's sharding mode runs it
    (``dp_protocol.SHARDING``): the collectives that share a hiding window hide together
    behind the stage's forward or backward of one micro-batch (``compute``'s
    ``forward_hide``, ``backward_hide``) as far as it lasts; a once-per-step gradient
    reduction hides only when ``stack.dp_overlap``. ``per_microbatch`` and ``per_step``:
    what the step waits for; ``total``: all of it; ``traffic``: ``dp_traffic``."""
    times = _dp_times(lay, ctx)
    return {"per_microbatch": _dp_waited(lay, ctx, compute, times, True),
            "per_step": _dp_waited(lay, ctx, compute, times, False),
            "total": _per_step(lay, ctx, times), "traffic": dp_traffic(lay, ctx)}


def dp_by_window(lay: StepLayouts, ctx: StepContext, compute: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``dp_comm``'s figures by hiding window W (``dp_protocol.HIDING_WINDOWS``), for drawing
    a step: ``microbatch_W`` and ``step_W``, the time of the collectives of that window run
    per micro-batch and once per step; ``microbatch_W_exposed`` and ``step_W_exposed``, what
    of it the step waits for. Summed over the windows they are ``dp_comm``'s."""
    times = _dp_times(lay, ctx)
    out: Dict[str, np.ndarray] = {}
    for window in dp_protocol.HIDING_WINDOWS:
        for per_microbatch, name in ((True, "microbatch"), (False, "step")):
            out[f"{name}_{window}"] = _dp_waited(lay, ctx, compute, times, per_microbatch, window, exposed=False)
            out[f"{name}_{window}_exposed"] = _dp_waited(lay, ctx, compute, times, per_microbatch, window)
    return out


def _dp_waited(lay: StepLayouts, ctx: StepContext, compute: Dict[str, np.ndarray], times: Dict[str, np.ndarray],
               per_microbatch: bool, only: Optional[str] = None, *, exposed: bool = True) -> np.ndarray:
    """What of each layout's DP collectives run per micro-batch (or once per step) the step
    waits for, window by window (``only``: that window alone); with ``exposed`` False, all of
    their time."""
    hide = {"forward": compute["forward_hide"], "backward": compute["backward_hide"]}
    seen: Dict[tuple, np.ndarray] = {}   # a window's wait, shared by the modes that run the same collectives in it

    def window_wait(hidden_by: str, needs_overlap: bool, collectives: tuple) -> np.ndarray:
        key = (hidden_by, needs_overlap, tuple((c.op, c.group, c.under_recompute) for c in collectives))
        if key not in seen:
            t = sum(_dp_figure(times, c) * _repeats(lay, c) for c in collectives)
            hides = exposed and hidden_by != "none" and (ctx.stack.dp_overlap or not needs_overlap)
            seen[key] = metrics.exposed_communication(0.0, t, hide[hidden_by], ctx.dp_slowdown) if hides else t
        return seen[key]

    def waited(mode):
        out = 0.0
        for (hidden_by, needs_overlap), collectives in dp_protocol.windows(mode, per_microbatch).items():
            if only is None or hidden_by == only:
                out = out + window_wait(hidden_by, needs_overlap, collectives)
        return out

    return dp_protocol.by_mode(lay.zero, waited, dp_protocol.sharding_of(ctx.stack))


def _repeats(lay: StepLayouts, c: dp_protocol.DpCollective):
    """How many times ``c`` runs where it runs once: the recomputed share of the layers for a
    collective run under recomputation (``DpCollective.under_recompute``), else 1."""
    return lay.recomputed_share if c.under_recompute else 1.0


def dp_traffic(lay: StepLayouts, ctx: StepContext) -> np.ndarray:
    """Bytes one device sends over its DP rings per step (nccl-tests' bus bytes), each
    collective among its group's ranks."""
    per_layer, embed = _stage_elements(lay, ctx)
    widths, embed_widths = dp_widths(ctx), dp_widths(ctx, embedding=True)
    each: Dict[DpKey, np.ndarray] = {}
    for group, ops in _dp_groups(lay, ctx).items():
        ranks, _, _, share = lay.dp_group(group, ctx.hardware)
        for op in ops:
            each[(op, group)] = bus_factor(op, ranks) * share * (widths[op] * lay.layers_per_stage * per_layer
                                                                 + embed_widths[op] * embed)
            if group == "dp":
                each[(op, group)] = each[(op, group)] + expert_dp_figures(lay, ctx, op, widths[op])[1]
    return _per_step(lay, ctx, each)


def _per_step(lay: StepLayouts, ctx: StepContext, each: Dict[DpKey, np.ndarray]) -> np.ndarray:
    """A step's sum over the collectives of each layout's sharding mode, as the stack's DP
    engine runs them, given ``each`` (op, group)'s figure (time or bytes) over a stage: a
    per-micro-batch collective counts once per micro-batch (times ``_repeats``)."""
    def mode_sum(mode):
        return sum((lay.microbatches if c.per_microbatch else 1.0) * _repeats(lay, c) * _dp_figure(each, c)
                   for c in mode.collectives)

    return dp_protocol.by_mode(lay.zero, mode_sum, dp_protocol.sharding_of(ctx.stack))


def latency_floor(lay: StepLayouts, ctx: StepContext, ticks: np.ndarray, kernels_per_mb: np.ndarray) -> np.ndarray:
    """The latency floor (Erdil and Schneider-Joseph, arXiv 2411.01137): the step's time if
    every kernel and collective moved no bytes and did no FLOPs, launches and latency steps
    only (a kernel's launch: the longer of the device's floor, ``kernel_launch_us``, and the
    host's path, ``Stack.host_launch_us``; each group's least latency on the tiers it spans,
    over the algorithms and protocols NCCL may run: ``collectives.nccl.lowest_latency``)."""
    hw = ctx.hardware
    tp_latency = lowest_latency("all_reduce", lay.tp, lay.tp_crosses(hw), hw,
                                local_ranks=tp_ranks_per_node(lay.tp, hw.devices_per_node))
    alpha_pp = np.where(lay.pp_crosses(hw), hw.inter_node.latency_us, hw.intra_node.latency_us) * 1e-6
    dp_collectives = lay.layers_per_stage + (1.0 if ctx.vocab > 0 else 0.0)
    dp_alpha: Dict[DpKey, np.ndarray] = {}
    for group, ops in _dp_groups(lay, ctx).items():
        ranks, local, crosses, _ = lay.dp_group(group, hw)
        for op in ops:
            dp_alpha[(op, group)] = dp_collectives * lowest_latency(op, ranks, crosses, hw, local_ranks=local)
    tp_collectives = lay.layers_per_stage * tp_collectives_per_layer(lay.recomputed_share) \
        + (1.0 if ctx.vocab > 0 else 0.0)

    table = dp_protocol.sharding_of(ctx.stack)
    if dp_protocol.DP_ENGINES[ctx.stack.dp_engine].per_tensor:
        tensors = sum(len(t) for t in layer.layer_tensors(float(ctx.model.hidden), float(ctx.model.heads), ctx.block))
        dp_alpha = {key: np.where(engine_layouts(lay, ctx), tensors, 1.0) * a if key[1] == "dp" else a
                    for key, a in dp_alpha.items()}

    def alpha_of(mode, per_microbatch: bool):
        return sum(_dp_figure(dp_alpha, c) * _repeats(lay, c) for c in mode.collectives
                   if c.per_microbatch == per_microbatch)

    alpha_mb = (tp_collectives * tp_latency
                + np.where(lay.pp > 1, 2.0 * lay.stages * alpha_pp, 0.0)
                + dp_protocol.by_mode(lay.zero, lambda mode: alpha_of(mode, True), table))
    alpha_step = dp_protocol.by_mode(lay.zero, lambda mode: alpha_of(mode, False), table)
    # Each kernel costs the longer of the device's floor and the host's launch path.
    per_kernel_s = max(hw.kernel_launch_us, ctx.stack.host_launch_us) * 1e-6
    return ticks * (kernels_per_mb * per_kernel_s + alpha_mb) + alpha_step
