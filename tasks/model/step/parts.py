"""One layer of a whole step, piece by piece, as the step model charges it: its collectives
and the spec-projected time of its GEMMs and of its TP and DP communication. A search's
winners are measured against these (``sweeps.search.measure``). Seconds and bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import numpy as np

from tasks.model.kernels import layer
from tasks.model.terms import metrics
from tasks.model.collectives.nccl import tier_time
from tasks.model.collectives.layer_comm import tp_collectives_per_layer, tp_ranks_per_node
from tasks.model.collectives.dp_protocol import sharding_of
from tasks.model.terms.layout import Layout
from tasks.model.step.plan import StepContext
from tasks.model.step.comm import tp_collective, tp_exposed_per_pass
from tasks.model.step.dp_comm import dp_widths
from tasks.model.step.compute import stage_layer_cost
from tasks.model.step.context import as_layouts

__all__ = ["LayerCollective", "layer_collectives", "layer_parts", "layer_pass_times"]


@dataclass(frozen=True)
class LayerCollective:
    """One collective of one layer: its group ("tp" or "dp"), op, how many times it runs,
    among how many ranks, on which bytes, whether the group spans nodes, and how many of its
    ranks share a node (``local_ranks``: ``layer_comm.tp_ranks_per_node``, the DP group's, or 1
    for a group of one rank per node)."""

    group: str
    op: str
    count: float
    ranks: int
    message_bytes: float
    crosses_nodes: bool
    local_ranks: int = 1


def layer_collectives(layout: Layout, ctx: StepContext) -> List[LayerCollective]:
    """The collectives of one layer for one micro-batch, as ``step.step_columns`` charges them:
    TP (4 all-reduces, 6 under full recomputation, the mean over the layers when it recomputes
    only some; with sequence parallelism a reduce-scatter and an all-gather each; under ``op``
    the all-gathers, or without sequence parallelism the all-reduces, of the forward again) and the
    layer's DP collectives at one micro-batch, as its sharding mode runs them
    (``dp_protocol.sharding_of`` the stack: plain DP an all-reduce, ZeRO-1 a reduce-scatter and an
    all-gather, ZeRO-3 and FSDP two all-gathers and a reduce-scatter, hybrid FSDP those in the
    node and an all-reduce of the shard across nodes), each at its ``step.dp_comm.dp_widths``,
    among the ranks of its group (``StepLayouts.dp_group``). Groups of one rank are left out, and
    so is an engine's once-a-step gather of the small tensors it keeps gathered (granularity
    "persistent": not the layer's weights)."""
    model, p, per_node = ctx.model, float(ctx.dtype_bytes), ctx.hardware.devices_per_node
    lay = _one_layout(layout, ctx)
    out: List[LayerCollective] = []
    if layout.tp > 1:
        recomputed, op = float(lay.recomputed_share[0]), float(np.reshape(lay.op_tp_share, -1)[0])
        message = float(layer.tp_allreduce_bytes(model.hidden, model.seq_len, layout.micro_batch, p))
        # under sequence parallelism the op policy's share (half) is the forward's all-gathers, all of them
        counts = {"reduce_scatter": float(tp_collectives_per_layer(recomputed)),
                  "all_gather": float(tp_collectives_per_layer(recomputed + 2.0 * op))} \
            if layout.sequence_parallel else {"all_reduce": float(tp_collectives_per_layer(recomputed + op))}
        local = int(tp_ranks_per_node(layout.tp, per_node))
        out += [LayerCollective("tp", op, count, layout.tp, message, layout.tp > per_node, local)
                for op, count in counts.items()]
    if layout.dp > 1:
        dp_ops: Dict[tuple, int] = {}
        for c in sharding_of(ctx.stack)[layout.zero].collectives:
            if c.granularity != "persistent" and (not c.under_recompute or layout.recompute == "full"):
                dp_ops[(c.op, c.group)] = dp_ops.get((c.op, c.group), 0) + 1
        widths = dp_widths(ctx)
        for (op, group), count in dp_ops.items():
            ranks, local, crosses, share = (float(np.asarray(v).reshape(-1)[0])
                                            for v in lay.dp_group(group, ctx.hardware))
            if ranks > 1:
                message = share * float(layer.dp_gradient_bytes(model.hidden, layout.tp, widths[op], model.heads,
                                                                ctx.block))
                out.append(LayerCollective("dp", op, count, int(ranks), message, bool(crosses), int(local)))
    return out


def layer_parts(layout: Layout, ctx: StepContext) -> Dict[str, float]:
    """Spec-projected times of one layer and micro-batch, in seconds: ``gemm_s`` (the
    forward, input-gradient and weight-gradient GEMMs), ``tp_comm_s`` and ``dp_comm_s``
    (``layer_collectives`` on the link tier each group spans, not overlapped)."""
    hw = ctx.hardware
    lay = _one_layout(layout, ctx)
    cost = stage_layer_cost(lay, ctx)
    parts = {"gemm_s": float(cost.gemm_fwd[0] + cost.gemm_bwd[0]), "tp_comm_s": 0.0, "dp_comm_s": 0.0}
    for c in layer_collectives(layout, ctx):
        parts[f"{c.group}_comm_s"] += c.count * float(tier_time(c.op, c.ranks, c.message_bytes, c.crosses_nodes, hw,
                                                                local_ranks=c.local_ranks))
    return parts


def _one_layout(layout: Layout, ctx: StepContext):
    """``layout`` as the one-row ``StepLayouts`` the step model costs."""
    return as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx)


def layer_pass_times(layout: Layout, ctx: StepContext) -> Dict[str, float]:
    """One layer's forward and backward time for one micro-batch, in seconds, as the step
    model charges them: compute plus the TP time the step waits for; the backward includes
    what recomputation repeats (full: the whole forward with its collectives, for the share of
    layers it covers; selective: the attention core's forward; dots: all but the linear
    layers; op: torchtitan's per-op policy's share with the TP collectives it does not keep,
    ``StepLayouts.recomputed`` and ``tp_repeat_share``). Korthikanti et al. (arXiv
    2205.05198) Table 4 times these."""
    lay = _one_layout(layout, ctx)
    cost = stage_layer_cost(lay, ctx)
    fwd_tp, bwd_tp = tp_exposed_per_pass(tp_collective(lay, ctx), lay, cost, ctx)
    forward = metrics.apply_flop_vs_bw(cost.forward, ctx.flop_vs_bw) + fwd_tp
    # dots keeps the linear layers' outputs: the TP collectives beside them do not run again
    op_tp = lay.op_tp_share * fwd_tp    # the op policy's TP collectives run again
    repeat = lay.recomputed(forward, metrics.apply_flop_vs_bw(cost.core_fwd, ctx.flop_vs_bw),
                            metrics.apply_flop_vs_bw(cost.linear_fwd, ctx.flop_vs_bw) + fwd_tp,
                            metrics.apply_flop_vs_bw(cost.op_repeat_fwd, ctx.flop_vs_bw) + op_tp)
    backward = metrics.apply_flop_vs_bw(cost.backward, ctx.flop_vs_bw) + bwd_tp + repeat
    return {"forward_s": float(forward[0]), "backward_s": float(backward[0])}
