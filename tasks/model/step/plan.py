"""Whole training steps under parallel layouts: time, exposed communication and memory.

``step_plan`` lays out every operation of a step for a table of layouts (``tasks.model.terms.layout``,
one row per layout), for one model on one cluster at a fixed global batch, each costed once
with no Python loop per layout: one micro-batch's compute on the busiest pipeline stage
(``compute``), its TP, PP and DP collectives with what hides them (``comm``; DP by
``tasks.model.collectives.dp_protocol``), the optimizer step, the device's memory
(``memory``) and the pipeline's ticks. ``step_columns`` sums each layout's plan into its
step time and metrics; ``timeline`` lays one layout's plan out in time. It grows the
per-layer model of ``tasks.model.projection.grid`` (method.md §3) to a whole step:

- **Compute** per layer from ``projection``'s GEMM and element-wise times, plus what
  recomputation repeats (selective: the attention core's forward; full: the whole
  forward, Korthikanti et al., arXiv 2205.05198), and the output layer's GEMMs.
- **Stack** (``tasks.model.terms.stack``): the attention kernel (materialised or fused), the
  linear GEMMs' precision, and which communication overlaps compute; the layer's shape
  (grouped-query attention, a gated MLP of ``ffn_hidden``) comes from the model.
- **TP**: four all-reduces per layer (six under full recomputation) and one for the
  vocabulary-parallel embedding (none for a model without a vocabulary), serialized or
  overlapped with the linear GEMMs. Sequence parallelism replaces each by a reduce-scatter
  and an all-gather (Korthikanti et al.) and splits the replicated element-wise kernels.
- **Optimizer**: one memory-bound Adam step over the device's shard of the states.
- **CP** (``comm.cp_comm``, ``collectives.cp_exchange``): each sequence split over CP ranks,
  each rank's layers run on its SL/CP tokens; the keys and values exchanged around a ring
  behind attention, or all-gathered.
- **PP**: a point-to-point send of each micro-batch's activations forward and of its
  gradient backward per stage boundary (v times for the interleaved schedule); the
  bubble, (p-1)/v ticks of the M + (p-1)/v a step takes, M micro-batches (Narayanan et
  al. 2021: bubble over ideal time (p-1)/(v*M); for 1F1B the bubble is (p-1)/(M+p-1) of
  the step).
- **DP** (Rajbhandari et al., ZeRO, 2020): what each way of sharding model states splits,
  which collectives it runs, how often and behind what: ``tasks.model.collectives.dp_protocol``.
- **Links**: ranks are numbered TP fastest, then CP, then DP, then PP (Megatron-LM's order); a
  group uses the scale-out tier when it spans more than a node's devices. DP collectives and
  the sharding modes span DP x CP ranks (``StepLayouts.grad_ranks``).
- **Latency** (Erdil and Schneider-Joseph, arXiv 2411.01137): every kernel pays at least
  the launch floor and every collective step an α, already inside the times above;
  ``latency_s`` reports that floor alone: the step's time if every kernel and collective
  moved no bytes and did no FLOPs.
- **Memory** (method.md §8, ``tasks.model.step.memory``): the largest stage's model states and
  activations; a layout whose largest device exceeds ``memory_fraction`` of HBM is
  infeasible.

The stage charged as critical holds both the input embedding's all-reduce and the output
layer (the first and last stage's extra work): exact for PP = 1, a slight upper bound
otherwise. Times in seconds, sizes in bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, Mapping

import numpy as np

from tasks.model.kernels.layer_cost import LayerCost
from tasks.model.step import memory
from tasks.model.step.comm import cp_comm, ep_comm, latency_floor, pp_comm, tp_comm
from tasks.model.step.dp_comm import dp_comm, embedding_matrices, engine_copies
from tasks.model.step.compute import compute_per_microbatch, optimizer_time, stage_layer_cost
from tasks.model.step.context import (StepContext, StepLayouts, as_layouts, distinct_shapes, layer_weights_per_device,
                                     microbatches_per_step, split_shortfall)
from tasks.model.terms import metrics
from tasks.model.terms.layout import STRUCTURAL_CONSTRAINTS, first_violation, structural_violations

__all__ = ["STEP_MODEL_VERSION", "StepContext", "STATUS_CODES", "StepPlan", "step_plan", "pipeline_ticks",
           "stage_memory", "step_columns", "reasons"]

#: Bumped whenever the step model's formulas change its numbers (with projection's
#: ``COST_MODEL_VERSION``, part of a study's identity and of scaling keys).
#: What each version changed, and which numbers moved: docs/changelog.md.
STEP_MODEL_VERSION = "step-49"

#: Status codes of ``step_columns``: 0 feasible, then each structural constraint, then memory.
STATUS_CODES: List[str] = ["ok", *STRUCTURAL_CONSTRAINTS, "fits_memory"]
_MEMORY_CODE = len(STATUS_CODES) - 1


@dataclass(frozen=True)
class StepPlan:
    """One step's operations for each layout (arrays over layouts).

    ``layouts`` and ``ctx``: what was costed. ``cost``: one layer's compute pieces
    (``layer_cost.LayerCost``). ``compute``: one micro-batch on the busiest stage
    (``step.compute.compute_per_microbatch``: ``per_microbatch``, ``forward``,
    ``forward_hide``, ``backward_hide``, ``kernels_per_microbatch``, ``forward_kernels``,
    ``backward_kernels``; ``per_microbatch`` with
    the SMs a flex dispatcher takes from the compute it hides behind, ``ep``'s
    ``contention``, which the timeline draws in the backward pass). ``tp``, ``pp``: one
    micro-batch's TP and PP communication (``step.comm.tp_comm``, ``pp_comm``); ``cp``: its
    CP exchange (``step.comm.cp_comm``); ``ep``: its MoE dispatch and combine
    (``step.comm.ep_comm``). ``dp``: the
    step's DP collectives (``step.dp_comm.dp_comm``), with the time the compute beside them
    loses to the SMs they hold (``compute_per_tick``, ``compute_time``). ``optimizer``: the
    optimizer step.
    ``params``: parameters on the largest device; ``memory``: its bytes. ``ticks``: the
    pipeline's ticks (``pipeline_ticks``)."""

    layouts: StepLayouts
    ctx: StepContext
    cost: LayerCost
    compute: Dict[str, np.ndarray]
    tp: Dict[str, np.ndarray]
    pp: Dict[str, np.ndarray]
    cp: Dict[str, np.ndarray]
    ep: Dict[str, np.ndarray]
    dp: Dict[str, np.ndarray]
    optimizer: np.ndarray
    params: np.ndarray
    memory: np.ndarray
    ticks: np.ndarray

    @cached_property
    def exposed_per_microbatch(self) -> np.ndarray:
        """Communication one micro-batch's tick waits for: TP, CP, EP, PP and per-micro-batch DP."""
        return self.tp["exposed"] + self.cp["exposed"] + self.ep["exposed"] + self.pp["exposed"] \
            + self.dp["per_microbatch"]

    @cached_property
    def compute_per_tick(self) -> np.ndarray:
        """One micro-batch's compute on the busiest stage as the step runs it: ``compute``'s,
        slowed by the SMs its hidden DP collectives hold (``dp``'s ``contention_microbatch``)."""
        return self.compute["per_microbatch"] + self.dp["contention_microbatch"]

    @cached_property
    def tick(self) -> np.ndarray:
        """One tick: a micro-batch's forward and backward on the busiest stage, with the
        communication it waits for."""
        return self.compute_per_tick + self.exposed_per_microbatch

    @cached_property
    def exposed_per_step(self) -> np.ndarray:
        """Communication the step waits for once: the DP collectives run once per step and a
        mixture of experts' exchange in the passes no other pass hides (``comm.ep_comm``'s
        ``lone``)."""
        return self.dp["per_step"] + self.ep["lone"]

    @cached_property
    def compute_time(self) -> np.ndarray:
        """The step's compute: its ticks' (``compute_per_tick``) and the time the compute beside
        the DP collectives run once per step loses to their SMs (``dp``'s ``contention_step``)."""
        return self.ticks * self.compute_per_tick + self.dp["contention_step"]

    @cached_property
    def step_time(self) -> np.ndarray:
        """The step: its compute (``compute_time``), what its ticks wait for
        (``exposed_per_microbatch``), what it waits for once (``exposed_per_step``) and the
        optimizer."""
        return self.compute_time + self.ticks * self.exposed_per_microbatch + self.exposed_per_step + self.optimizer


def pipeline_ticks(lay: StepLayouts) -> np.ndarray:
    """Ticks of a step: M micro-batches plus the bubble, (p-1)/v (Narayanan et al. 2021)."""
    return lay.microbatches + (lay.pp - 1.0) / lay.stages


def step_plan(lay: StepLayouts, ctx: StepContext) -> StepPlan:
    """Every operation of a step for the layouts ``lay``, each costed once."""
    shapes = distinct_shapes(lay)
    cost = stage_layer_cost(lay, ctx, shapes)
    ep = ep_comm(lay, ctx, cost)
    compute = _with_engine_copies(compute_per_microbatch(lay, ctx, cost, shapes), lay, ctx)
    compute = {**compute, "per_microbatch": compute["per_microbatch"] + ep["contention"]}
    params, device_memory = stage_memory(lay, ctx)
    return StepPlan(layouts=lay, ctx=ctx, cost=cost, compute=compute, tp=tp_comm(lay, ctx, cost, shapes),
                    pp=pp_comm(lay, ctx, compute["per_microbatch"]), cp=cp_comm(lay, ctx, cost),
                    ep=ep,
                    dp=dp_comm(lay, ctx, compute),
                    optimizer=optimizer_time(lay, ctx, params), params=params, memory=device_memory,
                    ticks=pipeline_ticks(lay))


def _with_engine_copies(compute: Dict[str, np.ndarray], lay: StepLayouts, ctx: StepContext) -> Dict[str, np.ndarray]:
    """``compute`` with the copies the stack's DP engine runs on the compute stream
    (``step.dp_comm.engine_copies``) added to the micro-batch and its forward pass; they hide no
    DP traffic."""
    copies = engine_copies(lay, ctx)
    return {**compute, "per_microbatch": compute["per_microbatch"] + copies["forward"] + copies["backward"],
            "forward": compute["forward"] + copies["forward"]}


def stage_memory(lay: StepLayouts, ctx: StepContext):
    """(parameters, bytes) of the largest device (method.md §8): model states (and fp8
    weight copies), the gathered layer (and its prefetch) under ZeRO-3/FSDP, and the
    activations the first stage holds at its peak (or the second's, where the split leaves the
    first a layer short; or the last stage's with the logits)."""
    model = ctx.model
    h, heads, vocab = float(model.hidden), float(model.heads), ctx.vocab
    split, experts = layer_weights_per_device(lay, ctx)
    layer_params, expert_params = lay.layers_per_stage * split, lay.layers_per_stage * experts
    # Where the split gives both end stages a layer fewer (Stack.pipeline_split), the embedding
    # on either takes that layer's place: the busiest holds what of it exceeds a layer.
    short_first, short_last = split_shortfall(lay.pp, ctx.stack)
    embedding_params = np.maximum(embedding_matrices(lay) * vocab * h / lay.tp
                                  - np.minimum(short_first, short_last) * (split + experts), 0.0)
    stack = ctx.stack
    weight_bytes = memory.FP8_WEIGHT_BYTES if stack.fp8_params else memory.WEIGHT_BYTES
    shard_ranks = lay.shard_ranks(ctx.hardware)
    m = lay.microbatches
    # the experts' states are reduced and sharded over expert data parallelism (StepLayouts.edp)
    states = memory.model_state_bytes(layer_params, shard_ranks, lay.zero, weight_bytes, microbatches=m) \
        + memory.model_state_bytes(embedding_params, shard_ranks, lay.zero, microbatches=m) \
        + memory.model_state_bytes(expert_params, lay.edp, lay.zero, weight_bytes, microbatches=m)
    if stack.fp8 and not stack.fp8_params:
        states = states + memory.fp8_weight_copy_bytes(layer_params, shard_ranks, lay.zero) \
            + memory.fp8_weight_copy_bytes(expert_params, lay.edp, lay.zero)
    gathered = np.where(lay.sharded, 2.0 * weight_bytes * (split + experts), 0.0)
    seq = lay.local_seq(model.seq_len)
    blocks = [(ctx.moe_share, ctx.block)] + ([(1.0 - ctx.moe_share, ctx.dense_block)] if ctx.moe_share < 1 else [])
    act = sum(share * memory.layer_activation_bytes(seq, lay.micro_batch, h, heads, lay.tp, lay.sequence_parallel,
                                                    lay.recompute, block, fp8_inputs=stack.fp8,
                                                    recomputed_share=lay.recomputed_share, etp=lay.etp)
              for share, block in blocks)
    held = memory.resident_layers(lay.layers_per_stage, lay.pp, stack.offload_layers)
    first = memory.first_stages_activation_layers(lay.microbatches, lay.pp, lay.stages, lay.interleaved, held,
                                                  short_first) * act
    last = (held - short_last) * act + memory.logits_bytes(seq, lay.micro_batch, vocab, lay.tp)
    return layer_params + expert_params + embedding_params, states + gathered + np.maximum(first, last)


def step_columns(layouts: Mapping[str, np.ndarray], ctx: StepContext) -> Dict[str, np.ndarray]:
    """Cost every layout; all inputs are equal-length arrays.

    Reads ``tp``, ``pp``, ``micro_batch``, ``schedule`` (code), ``virtual_stages``,
    ``zero`` (code), ``sequence_parallel`` (bool), ``recompute`` (code). Returns arrays:
    ``cp`` and ``cp_comm`` (code of ``layout.CP_COMMS``) where given (1 and p2p where not). Returns arrays:
    ``dp``, ``microbatches``, ``status_code`` (index into ``STATUS_CODES``),
    ``step_time_s``, ``exposed_comm_s``, ``exposed_comm_share``,
    ``tokens_per_s_per_device``, ``memory_per_device_bytes``, ``latency_s``,
    ``bubble_fraction``, ``compute_s``, ``tp_comm_s``, ``pp_comm_s``, ``dp_comm_s``
    (all TP, PP and DP/ZeRO collectives of a step, hidden or not), ``tp_exposed_s`` and
    ``pp_exposed_s`` (what of them the step waits for), ``cp_comm_s`` and ``cp_exposed_s``
    (context parallelism's exchange, all of it and what the step waits for), ``ep_comm_s`` and
    ``ep_exposed_s`` (a mixture of experts' dispatch and combine, the same), ``optimizer_s``,
    ``dp_traffic_bytes`` (bytes one device sends over its DP rings per step),
    ``params_per_device``. Step metrics are NaN where a structural constraint fails; memory
    is NaN there too. Past memory they are NaN as well, but ``step_time_if_fit_s`` keeps
    the step time such a layout would take had it fit (the step time where it fits; NaN
    only where a structural constraint fails).
    """
    model = ctx.model
    model_parallel = np.asarray(layouts["tp"]) * np.asarray(layouts["pp"]) * np.asarray(layouts.get("cp", 1))
    dp_int = ctx.devices // np.maximum(model_parallel, 1)
    violations = structural_violations({**layouts, "dp": dp_int}, heads=model.heads, layers=model.layers,
                                       devices=ctx.devices, global_batch=ctx.global_batch,
                                       kv_heads=model.kv_heads or 0, experts=model.experts)
    status = first_violation(violations)
    dp = np.maximum(dp_int, 1).astype(np.float64)
    # Only the layouts that break no structural constraint are costed (at least one, for the
    # columns' names); the others' step metrics and memory are NaN.
    valid = np.flatnonzero(status == 0)
    costed = valid if valid.size else np.zeros(1, dtype=np.int64)
    rows = len(status)
    # The costed rows' columns live only until ``as_layouts`` has read them: a whole table of them
    # held through the step would add to every call's peak memory, which the allocator hands back
    # and takes again, page by page, each call.
    with np.errstate(divide="ignore", invalid="ignore"):
        part = _step(as_layouts(_rows_at(layouts, costed, rows), dp[costed], ctx), ctx)
    # One table, a column a row: the metrics, then memory and the step time had it fit (which
    # stay where a layout is over memory); rows not costed are NaN.
    names = [name for name in part if name != "memory_per_device_bytes"]
    names += ["memory_per_device_bytes", "step_time_if_fit_s"]
    table = np.full((len(names), rows), np.nan)
    out = dict(zip(names, table))
    source = {**part, "step_time_if_fit_s": part["step_time_s"]}
    for name, column in out.items():
        column[valid] = np.broadcast_to(source[name], costed.shape)[:valid.size]
    over = (status == 0) & (out["memory_per_device_bytes"] > ctx.memory_limit_bytes)
    status = np.where(over, _MEMORY_CODE, status)
    table[:-2, np.flatnonzero(over)] = np.nan
    microbatches = microbatches_per_step(ctx.global_batch, dp, np.asarray(layouts["micro_batch"]))
    out.update(dp=dp_int.astype(np.int64), microbatches=microbatches.astype(np.int64), status_code=status)
    return out


def _rows_at(layouts: Mapping[str, np.ndarray], index: np.ndarray, rows: int) -> Dict[str, np.ndarray]:
    """The columns of ``layouts`` (``rows`` long; a scalar stays as it is) at the rows ``index``."""
    return {name: (np.asarray(values)[index] if np.ndim(values) and len(values) == rows else values)
            for name, values in layouts.items()}


def _step(lay: StepLayouts, ctx: StepContext) -> Dict[str, np.ndarray]:
    """The step's times, traffic and memory (method.md §3, §6 and §8), summed from its plan."""
    plan = step_plan(lay, ctx)
    compute, tp, pp, cp, ep, dp = plan.compute, plan.tp, plan.pp, plan.cp, plan.ep, plan.dp
    ticks, step = plan.ticks, plan.step_time
    exposed_comm = ticks * plan.exposed_per_microbatch + plan.exposed_per_step
    return {
        "step_time_s": step,
        "exposed_comm_s": exposed_comm,
        "exposed_comm_share": metrics.communication_share(exposed_comm, step),
        "tokens_per_s_per_device": ctx.global_batch * ctx.model.seq_len / step / ctx.devices,
        "latency_s": latency_floor(lay, ctx, ticks, compute["kernels_per_microbatch"], dp)
        + ticks * (cp["latency"] + ep["latency"]),
        "bubble_fraction": (ticks - lay.microbatches) / ticks,
        "compute_s": plan.compute_time,
        "tp_comm_s": ticks * tp["total"],
        "pp_comm_s": ticks * pp["total"],
        "tp_exposed_s": ticks * tp["exposed"],
        "pp_exposed_s": ticks * pp["exposed"],
        "cp_comm_s": ticks * cp["total"],
        "cp_exposed_s": ticks * cp["exposed"],
        "ep_comm_s": ticks * ep["total"],
        "ep_exposed_s": ticks * ep["exposed"] + ep["lone"],
        "dp_comm_s": dp["total"],
        "optimizer_s": plan.optimizer,
        "dp_traffic_bytes": dp["traffic"],
        "params_per_device": plan.params,
        "memory_per_device_bytes": plan.memory,
    }


def reasons(columns: Mapping[str, np.ndarray], ctx: StepContext) -> List[object]:
    """A reason per row of ``step_columns``' output: None when feasible, else the first
    constraint the layout breaks, with the figures for memory."""
    limit_gb = ctx.memory_limit_bytes / 1e9
    out: List[object] = []
    for status, mem in zip(columns["status_code"], columns["memory_per_device_bytes"], strict=True):
        if status == 0:
            out.append(None)
        elif status == _MEMORY_CODE:
            out.append(f"memory: needs {mem / 1e9:.1f} GB per device, {limit_gb:.1f} GB usable "
                       f"({ctx.memory_fraction:g} of {ctx.hardware.hbm_gb:g} GiB)")
        else:
            name = STATUS_CODES[status]
            out.append(f"{name}: {STRUCTURAL_CONSTRAINTS[name]}")
    return out
