"""DP / ZeRO communication of a whole step, as each layout's sharding mode runs it and the
stack's DP engine splits it into calls (``collectives.dp_protocol``): the time of each
collective over a stage's weights, what of it the step waits for, the bytes it moves and its
latency steps; a mixture of experts' routed experts among their own DP group beside it
(Rajbhandari et al., ZeRO, 2020; Narayanan et al. 2021; Megatron-Core's DDP and distributed
optimizer; PyTorch FSDP). Vectorised over layouts; seconds and bytes."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from tasks.model.collectives import dp_protocol
from tasks.model.collectives.dp_sums import DpKey, mode_sums, per_pass, step_sum, waited
from tasks.model.collectives.nccl import bus_factor, figures_op, group_figures, tier_time, tier_time_given
from tasks.model.collectives.dp_calls import DpStage, latency_calls, persistent_values, split_into_calls
from tasks.model.kernels import layer, roofline
from tasks.model.step.context import StepContext, StepLayouts, layer_weights_per_device, on_distinct
from tasks.model.step.memory import FP8_WEIGHT_BYTES
from tasks.model.terms import metrics
from tasks.model.terms.specs import HardwareProfile

__all__ = ["embedding_matrices", "dp_widths", "dp_comm", "dp_by_window", "dp_sm_share", "SM_HOLD_BASES",
           "sm_hold_basis", "engine_copies", "expert_group", "expert_dp_figures", "bucket_calls"]


def embedding_matrices(lay: StepLayouts) -> np.ndarray:
    """Embedding matrices on the busiest stage: input and output (tied or not) when PP = 1."""
    return np.where(lay.pp > 1, 1.0, 2.0)


def _dp_stage(lay: StepLayouts, ctx: StepContext) -> DpStage:
    """What splitting the stage's DP collectives into calls reads (``collectives.dp_calls``)."""
    embedding = embedding_matrices(lay) if ctx.vocab > 0 else np.zeros(np.shape(lay.pp))
    tensors = layer.layer_tensors(float(ctx.model.hidden), float(ctx.model.heads), ctx.block)
    return DpStage(lay.tp, lay.grad_ranks, lay.layers_per_stage, embedding, tensors)


def _stage_elements(lay: StepLayouts, ctx: StepContext) -> tuple:
    """(one layer's TP-split weights, the stage's embeddings') on one device: each DP message
    carries one value per weight, at the width of what it moves (``dp_widths``). A mixture of
    experts' routed experts are ``expert_dp_figures``'."""
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


def bucket_calls(lay: StepLayouts, ctx: StepContext) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(calls, bucket, last) of a stage's weights on one device split into the stack's DP
    engine's buckets (``DpEngine.bucket_modes``), in parameters: a bucket holds
    max(``bucket_min_params``, ``bucket_params_per_rank`` x DP); the stage's weights fill
    ceil(weights / bucket) of them from the last layer back, and the ``last`` holds what is
    left, the stage's first layers and embedding. One call on the whole stage where the stack
    does not overlap the reduction (Megatron-Core sets no bucket size then)."""
    return _buckets(lay, ctx, *_stage_elements(lay, ctx))


def _buckets(lay: StepLayouts, ctx: StepContext, per_layer, embed) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``bucket_calls`` of a stage whose ``_stage_elements`` are (``per_layer``, ``embed``)."""
    engine = dp_protocol.DP_ENGINES[ctx.stack.dp_engine]
    weights = lay.layers_per_stage * per_layer + embed
    if not ctx.stack.dp_overlap or engine.bucket_min_params <= 0:
        return np.ones_like(weights), weights, weights
    bucket = np.maximum(engine.bucket_min_params, engine.bucket_params_per_rank * lay.dp)
    calls = np.maximum(np.ceil(weights / bucket), 1.0)
    return calls, np.minimum(bucket, weights), weights - (calls - 1.0) * bucket


def _dp_keys(lay: StepLayouts, ctx: StepContext) -> Dict[Tuple[str, str], Tuple[str, ...]]:
    """{(op, group): granularities} of the collectives the stack's sharding modes run: the
    shard and replicate groups only where some layout runs a hybrid mode (a collective no
    layout runs costs 0: ``collectives.dp_sums.figure``)."""
    any_hybrid = bool(np.any(dp_protocol.hybrid(lay.zero)))
    keys: Dict[Tuple[str, str], Tuple[str, ...]] = {}
    for mode in dp_protocol.sharding_of(ctx.stack).values():
        for c in mode.collectives:
            if (c.group == "dp" or any_hybrid) and c.granularity not in keys.get((c.op, c.group), ()):
                keys[(c.op, c.group)] = keys.get((c.op, c.group), ()) + (c.granularity,)
    return keys


#: The layout fields a stage's DP collectives' figures (``_group_dp_figures``) read: their groups
#: (TP, DP, CP, EP, ETP), the sharding mode and the stage's weights (PP, its layers). Not the
#: micro-batch, its count, recomputation or sequence parallelism: a table's layouts that differ
#: only in those share their figures (``context.on_distinct``).
DP_TIME_FIELDS = ("tp", "pp", "dp", "cp", "zero", "layers_per_stage", "ep", "etp")


def _dp_sums(lay: StepLayouts, ctx: StepContext) -> Dict[tuple, np.ndarray]:
    """``_group_dp_figures`` summed over each layout's sharding mode by class
    (``collectives.dp_sums.mode_sums``), once per distinct ``DP_TIME_FIELDS``."""
    return on_distinct(DP_TIME_FIELDS, _distinct_dp_sums, lay, ctx)


def _distinct_dp_sums(lay: StepLayouts, ctx: StepContext) -> Dict[tuple, np.ndarray]:
    """``_group_dp_figures`` of ``lay`` summed by class over each layout's mode as the stack's
    engine runs it (``dp_protocol.sharding_of``)."""
    return mode_sums(lay.zero, dp_protocol.sharding_of(ctx.stack), _group_dp_figures(lay, ctx),
                     per_call=_overlap_kernels(ctx) > 0)


def _overlap_kernels(ctx: StepContext) -> float:
    """The stack's DP engine's ``overlap_kernels`` (0: a call hides behind its whole window)."""
    return dp_protocol.DP_ENGINES[ctx.stack.dp_engine].overlap_kernels


def _group_dp_figures(lay: StepLayouts, ctx: StepContext) -> Dict[str, Dict[DpKey, np.ndarray]]:
    """Each DP collective's figures over a stage, by ``DpKey``, each on the tiers its group
    spans (``StepLayouts.dp_group``) and 0 for a group of one rank:

    - ``times``: the collective on all of a stage's weight tensors, split into calls as its
      granularity says (a layer's weights a call and one for the stage's embedding matrices; a
      tensor a call, or once a step the tensors the engine keeps gathered:
      ``collectives.dp_calls``; or the engine's buckets, ``bucket_calls``); the routed experts'
      (``expert_dp_figures``) added;
    - ``tails``: the one call a window cannot hide: the stage's first layer or one embedding
      matrix, whichever takes longer (one embedding matrix a tensor a call), or the last bucket;
    - ``bytes``: what one device sends over the group's rings (nccl-tests' bus bytes), however
      it is split into calls, the routed experts' added;
    - ``latency``: its calls' latency steps alone, each call its group's least latency over the
      algorithms and protocols NCCL may run (``collectives.nccl.lowest_latency``);
    - ``calls``: how many calls it makes over the stage (0 for a group of one rank), where the
      stack's DP engine budgets each call (``_overlap_kernels``; only ``waited``'s cap reads it)."""
    hw = ctx.hardware
    per_layer, embed = _stage_elements(lay, ctx)
    widths, embed_widths = dp_widths(ctx), dp_widths(ctx, embedding=True)
    experts_of = expert_group(lay, ctx)
    keys = _dp_keys(lay, ctx)
    buckets = _buckets(lay, ctx, per_layer, embed) if any("bucket" in g for g in keys.values()) else None
    stage, engine = _dp_stage(lay, ctx), dp_protocol.DP_ENGINES[ctx.stack.dp_engine]
    kept = persistent_values(stage, engine)[1] if any("persistent" in g for g in keys.values()) else 0.0
    out: Dict[str, Dict[DpKey, np.ndarray]] = {"times": {}, "tails": {}, "bytes": {}, "latency": {}, "calls": {}}
    budgeted = _overlap_kernels(ctx) > 0
    groups = {group: lay.dp_group(group, hw) for group in dict.fromkeys(group for _, group in keys)}
    nccl_figures = {(op, group): group_figures(op, groups[group][0], groups[group][2], hw, local_ranks=groups[group][1])
                    for op, group in dict.fromkeys((figures_op(op), group) for op, group in keys)}
    for (op, group), granularities in keys.items():
        ranks, local, crosses, share = groups[group]
        layer_bytes, embed_bytes = widths[op] * share * per_layer, embed_widths[op] * share * embed
        messages = [layer_bytes, embed_bytes]
        if buckets is not None and "bucket" in granularities:
            mean_width = (lay.layers_per_stage * layer_bytes + embed_bytes) / (lay.layers_per_stage * per_layer + embed)
            messages += [buckets[1] * mean_width, buckets[2] * mean_width]
        # One call for every message: the group's figures are worked out once.
        figures = nccl_figures[(figures_op(op), group)]
        each, one = tier_time_given(op, ranks, np.stack(np.broadcast_arrays(*messages)), crosses, hw, figures,
                                    local_ranks=local), figures[-1]
        experts = expert_dp_figures(lay, ctx, op, widths[op], experts_of) if group == "dp" else (0.0, 0.0)
        calls = latency_calls(stage, engine, op)
        if buckets is not None:
            calls["bucket"] = buckets[0]
        for granularity in granularities:
            total, tail = split_into_calls(granularity, op, widths[op] * share, each, stage, engine, hw,
                                           tiers=(crosses, local), buckets=buckets, embed_bytes=embed_bytes)
            key = (op, group, granularity)
            # the kept tensors' call moves them alone; the other granularities the stage's weights
            moved = bus_factor(op, ranks) * widths[op] * share * kept if granularity == "persistent" else \
                bus_factor(op, ranks) * (lay.layers_per_stage * layer_bytes + embed_bytes) + experts[1]
            out["times"][key] = np.where(ranks > 1, total, 0.0) + (0.0 if granularity == "persistent" else experts[0])
            out["tails"][key] = np.where(ranks > 1, tail, 0.0)
            out["bytes"][key] = moved
            out["latency"][key] = calls[granularity] * one
            if budgeted:
                out["calls"][key] = np.where(ranks > 1, calls[granularity], 0.0)
    return out


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


def dp_comm(lay: StepLayouts, ctx: StepContext, compute: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """DP / ZeRO communication of a step, as each layout's sharding mode runs it
    (``dp_protocol.SHARDING``): the collectives that share a hiding window hide together
    behind the stage's forward or backward of one micro-batch (``compute``'s
    ``forward_hide``, ``backward_hide``) as far as it lasts, all but their tail
    (``collectives.dp_sums.waited``); a once-per-step gradient reduction hides only when
    ``stack.dp_overlap``. ``per_microbatch`` and ``per_step``: what the step waits for;
    ``total``: all of it; ``traffic``: the bytes one device sends over its DP rings per step
    (nccl-tests' bus bytes), however they are split into calls; ``latency_microbatch`` and
    ``latency_step``: seconds of the collectives' latency steps alone, each call its group's
    least latency (``collectives.nccl.lowest_latency``), a stage's calls as each collective's
    granularity splits it, a collective repeated under recomputation counting its calls again;
    ``contention_microbatch`` and ``contention_step``: the seconds the compute beside the
    hidden part of them (per micro-batch, once per step) loses to the SMs NCCL holds
    (``dp_sm_share``)."""
    sums = _dp_sums(lay, ctx)
    latency_microbatch, latency_step = per_pass(sums, "latency", recomputed_share=lay.recomputed_share)
    per_microbatch, per_step = _waited(lay, ctx, compute, sums, True), _waited(lay, ctx, compute, sums, False)
    all_microbatch = _waited(lay, ctx, compute, sums, True, exposed=False)
    all_step = _waited(lay, ctx, compute, sums, False, exposed=False)
    share = dp_sm_share(lay, ctx)
    return {"per_microbatch": per_microbatch, "per_step": per_step,
            "total": _step_sum(lay, sums, "times"), "traffic": _step_sum(lay, sums, "bytes"),
            "latency_microbatch": latency_microbatch, "latency_step": latency_step,
            "contention_microbatch": share * _hidden(all_microbatch, per_microbatch),
            "contention_step": share * _hidden(all_step, per_step)}


def dp_sm_share(lay: StepLayouts, ctx: StepContext) -> np.ndarray:
    """The share of a device's SMs NCCL holds while a DP collective runs: its CTAs, one SM
    each (``LinkTier.channels``, of the scale-out tier where the DP group spans nodes), over
    the device's ``compute_units``, at most all of them. Compute that runs beside a hidden
    collective runs on the rest, so it takes that share of the hidden time longer (as
    ``step.comm.ep_comm``'s ``contention`` charges a flex dispatcher's SMs)."""
    hw = ctx.hardware
    channels = np.where(lay.dp_crosses(hw), float(hw.inter_node.channels), float(hw.intra_node.channels))
    return np.minimum(channels / float(hw.compute_units), 1.0)


#: Where a profile's ``LinkTier.channels`` come from (``sm_hold_basis``).
SM_HOLD_BASES = ("read", "assumed", "none")


def sm_hold_basis(hw: HardwareProfile) -> str:
    """One of ``SM_HOLD_BASES`` for ``hw``'s channels: "none" where neither tier states any
    (not charged), "assumed" where a tier's source (``sources['<tier>.channels']``) starts
    with "assumption", else "read" (from NCCL's logs or code)."""
    tiers = ("intra_node", "inter_node")
    if not any(getattr(hw, tier).channels for tier in tiers):
        return "none"
    names = [f"{tier}.channels" for tier in tiers]
    unsourced = any(not str(hw.sources.get(name, "")).strip() for name in names)
    return "assumed" if unsourced or any(hw.source_is_assumption(name) for name in names) else "read"


def _hidden(total: np.ndarray, exposed: np.ndarray) -> np.ndarray:
    """Seconds of DP collectives that run beside compute: all of their time (``total``) less
    what the step waits for (``exposed``, ``_waited``'s), at least 0."""
    return np.maximum(total - exposed, 0.0)


def _waited(lay: StepLayouts, ctx: StepContext, compute: Dict[str, np.ndarray], sums: Dict[tuple, np.ndarray],
            per_microbatch: bool, only: Optional[str] = None, *, exposed: bool = True) -> np.ndarray:
    """``dp_sums.waited`` for these layouts under the context's stack and DP slowdown, each
    window hidden by ``compute``'s ``forward_hide`` or ``backward_hide``."""
    hide = {"forward": compute["forward_hide"], "backward": compute["backward_hide"]}
    return waited(sums, per_microbatch, hide=hide, recomputed_share=lay.recomputed_share,
                  dp_overlap=ctx.stack.dp_overlap, slowdown=ctx.dp_slowdown, only=only, exposed=exposed,
                  call_cap=_call_cap(ctx, compute))


def _call_cap(ctx: StepContext, compute: Dict[str, np.ndarray]) -> Optional[Dict[str, np.ndarray]]:
    """Seconds of compute one DP call may hide behind, by window, where the stack's DP engine
    gives each call a budget of kernels (``DpEngine.overlap_kernels``): that many of the pass's
    kernels at their mean time, the pass's time over its kernels (``compute``'s
    ``forward`` and ``forward_kernels``; the rest of the micro-batch and ``backward_kernels``);
    None where a call may hide behind its whole window."""
    k = _overlap_kernels(ctx)
    if k <= 0:
        return None
    backward = compute["per_microbatch"] - compute["forward"]
    return {"forward": k * compute["forward"] / np.maximum(compute["forward_kernels"], 1.0),
            "backward": k * backward / np.maximum(compute["backward_kernels"], 1.0)}


def _step_sum(lay: StepLayouts, sums: Dict[tuple, np.ndarray], name: str) -> np.ndarray:
    """``dp_sums.step_sum`` for these layouts' micro-batches and recomputation."""
    return step_sum(sums, name, microbatches=lay.microbatches, recomputed_share=lay.recomputed_share)


def dp_by_window(lay: StepLayouts, ctx: StepContext, compute: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``dp_comm``'s figures by hiding window W (``dp_protocol.HIDING_WINDOWS``), for drawing
    a step: ``microbatch_W`` and ``step_W``, the time of the collectives of that window run
    per micro-batch and once per step; ``microbatch_W_exposed`` and ``step_W_exposed``, what
    of it the step waits for; ``microbatch_W_contention`` and ``step_W_contention``, the
    seconds the compute beside their hidden part loses (``dp_sm_share``). Summed over the
    windows they are ``dp_comm``'s (the contention too while ``StepContext.dp_slowdown`` is 1:
    above it a window may wait for more than its own time, and ``dp_comm`` floors the sum over
    the windows at 0, not each window)."""
    sums = _dp_sums(lay, ctx)
    share = dp_sm_share(lay, ctx)
    out: Dict[str, np.ndarray] = {}
    for window in dp_protocol.HIDING_WINDOWS:
        for per_microbatch, name in ((True, "microbatch"), (False, "step")):
            total = _waited(lay, ctx, compute, sums, per_microbatch, window, exposed=False)
            exposed = _waited(lay, ctx, compute, sums, per_microbatch, window)
            out[f"{name}_{window}"], out[f"{name}_{window}_exposed"] = total, exposed
            out[f"{name}_{window}_contention"] = share * _hidden(total, exposed)
    return out


def expert_group(lay: StepLayouts, ctx: StepContext) -> Optional[tuple]:
    """(routed experts' weights on the stage on one device, and the EDP group's ranks, ranks on
    one node and whether it spans nodes: ``StepLayouts.edp_group``), worked out once for a
    step's DP figures; None for a dense model or a table whose devices hold no routed expert."""
    if not ctx.model.experts:
        return None
    experts = lay.layers_per_stage * layer_weights_per_device(lay, ctx)[1]
    if not np.any(experts > 0):
        return None
    return (experts, *lay.edp_group(ctx.hardware))


def expert_dp_figures(lay: StepLayouts, ctx: StepContext, op: str, width: float,
                      group: Optional[tuple] = None) -> Tuple[np.ndarray, np.ndarray]:
    """(seconds, bus bytes) of ``op`` on the stage's routed experts' weights (``width`` bytes
    per value), one collective per layer among the EDP group (``StepLayouts.edp_group``), where
    Megatron-Core's DDP reduces (and its distributed optimizer gathers) the experts' buffer:
    it runs beside the same op on the layer's other weights, so it hides and waits with it.
    ``group``: ``expert_group``'s (worked out here when not given). 0 for a dense model or an
    EDP group of one rank."""
    group = expert_group(lay, ctx) if group is None else group
    if group is None:
        nothing = np.zeros(np.shape(lay.tp))
        return nothing, nothing
    experts, ranks, local, crosses = group
    message = width * experts / lay.layers_per_stage
    seconds = lay.layers_per_stage * tier_time(op, ranks, message, crosses, ctx.hardware, local_ranks=local)
    many = (ranks > 1) & (experts > 0)
    return np.where(many, seconds, 0.0), np.where(many, bus_factor(op, ranks) * width * experts, 0.0)
