"""A mixture of experts' communication in a whole step: expert parallelism's dispatch and
combine in one micro-batch (``ep_comm``), and the DP collectives on the routed experts'
weights among expert data parallelism (``expert_dp_figures``). Vectorised over layouts;
seconds and bytes."""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from tasks.model.collectives.ep_exchange import ep_layer_exchange
from tasks.model.collectives.nccl import bus_factor, tier_time
from tasks.model.kernels.layer_cost import LayerCost
from tasks.model.step.context import StepContext, StepLayouts, layer_weights_per_device
from tasks.model.terms import metrics
from tasks.model.terms.layout import code

__all__ = ["ep_comm", "expert_dp_figures"]


def ep_comm(lay: StepLayouts, ctx: StepContext, cost: LayerCost) -> Dict[str, np.ndarray]:
    """Expert parallelism's dispatch and combine in one micro-batch on the busiest stage
    (``collectives.ep_exchange``, per MoE layer, times the stage's share of MoE layers):
    ``total``, ``exposed``, ``forward_total``, ``forward_exposed`` and ``latency``; 0 for a
    dense model. Each TP rank dispatches its tokens/TP x topk routed copies at the activations'
    width with the layout's dispatcher (``layout.MOE_DISPATCHERS``); under
    ``Stack.moe_a2a_overlap`` a pass's exchange hides behind the layer's other pass (``cost``),
    except beside full recomputation, which Megatron-Core does not run with the overlap
    (megatron/core/transformer/transformer_config.py at core_v0.15.3 asserts so)."""
    block = ctx.block
    if not block.moe:
        nothing = np.zeros(np.shape(lay.tp))
        return {name: nothing for name in ("total", "exposed", "forward_total", "forward_exposed", "latency")}
    m = ctx.model
    tokens = lay.micro_batch * lay.local_seq(m.seq_len)
    routed = tokens / lay.tp * block.topk
    figures = ep_layer_exchange(lay.ep, lay.etp, routed * float(m.hidden) * float(ctx.dtype_bytes), ctx.hardware,
                                crosses=lay.ep_crosses(ctx.hardware), local=lay.ep_local_ranks(ctx.hardware),
                                flex=lay.dispatcher == code("dispatcher", "flex"), topk=block.topk,
                                repeats=lay.recomputed_share,
                                overlap=ctx.stack.moe_a2a_overlap & (lay.recomputed_share == 0.0),
                                hide_fwd=metrics.apply_flop_vs_bw(cost.forward, ctx.flop_vs_bw),
                                hide_bwd=metrics.apply_flop_vs_bw(cost.backward, ctx.flop_vs_bw))
    layers = lay.layers_per_stage * ctx.moe_share
    return {name: layers * value for name, value in figures.items()}


def expert_dp_figures(lay: StepLayouts, ctx: StepContext, op: str, width: float) -> Tuple[np.ndarray, np.ndarray]:
    """(seconds, bus bytes) of ``op`` on the stage's routed experts' weights (``width`` bytes
    per value), one collective per layer among the EDP group (``StepLayouts.edp_group``), where
    Megatron-Core's DDP reduces (and its distributed optimizer gathers) the experts' buffer:
    it runs beside the same op on the layer's other weights, so it hides and waits with it.
    0 for a dense model or an EDP group of one rank."""
    if not ctx.model.experts:
        nothing = np.zeros(np.shape(lay.tp))
        return nothing, nothing
    experts = lay.layers_per_stage * layer_weights_per_device(lay, ctx)[1]
    if not np.any(experts > 0):
        nothing = np.zeros(np.shape(lay.tp))
        return nothing, nothing
    ranks, local, crosses = lay.edp_group(ctx.hardware)
    message = width * experts / lay.layers_per_stage
    seconds = lay.layers_per_stage * tier_time(op, ranks, message, crosses, ctx.hardware, local_ranks=local)
    many = (ranks > 1) & (experts > 0)
    return np.where(many, seconds, 0.0), np.where(many, bus_factor(op, ranks) * width * experts, 0.0)
