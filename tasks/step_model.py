"""Whole training steps under parallel layouts: time, exposed communication and memory.

``step_columns`` costs a table of layouts (``tasks.layout``, one row per layout) for one
model on one cluster at a fixed global batch, with no Python loop per layout. It grows the
per-layer model of ``tasks.projection`` (method.md §3) to a whole step:

- **Compute** per layer from ``projection``'s GEMM and element-wise times, plus what
  recomputation repeats (selective: the attention core's forward; full: the whole
  forward, Korthikanti et al., arXiv 2205.05198), and the output layer's GEMMs.
- **TP**: four all-reduces per layer (six under full recomputation) and one for the
  vocabulary-parallel embedding, serialized. Sequence parallelism replaces each by a
  reduce-scatter and an all-gather (Korthikanti et al.): the same ring time, less memory.
- **PP**: a point-to-point send of each micro-batch's activations forward and of its
  gradient backward per stage boundary (v times for the interleaved schedule); the
  bubble, (p-1)/v ticks of the m + (p-1)/v a step takes (Narayanan et al. 2021: bubble
  over ideal time (p-1)/(v*m); for 1F1B the bubble is (p-1)/(m+p-1) of the step).
- **DP** (Rajbhandari et al., ZeRO, 2020): plain DP all-reduces the gradients once per
  step, hidden behind the last micro-batch's backward GEMMs as far as they last
  (method.md §6); ZeRO-1 reduce-scatters them the same way and all-gathers the updated
  weights after the optimizer step (exposed); ZeRO-3 all-gathers the weights for every
  micro-batch's forward and backward and reduce-scatters its gradients (1.5x plain DP's
  traffic at one micro-batch); FSDP (``no_sync``) all-gathers per micro-batch and
  reduce-scatters once per step.
- **Links**: ranks are numbered TP fastest, then DP, then PP (Megatron-LM's order); a
  group uses the scale-out tier when it spans more than a node's devices.
- **Latency** (Erdil and Schneider-Joseph, arXiv 2411.01137): every kernel pays at least
  the launch floor and every collective step an α, already inside the times above;
  ``latency_s`` reports that floor alone: the step's time if every kernel and collective
  moved no bytes and did no FLOPs.
- **Memory** (method.md §8, ``tasks.memory``): the largest stage's model states and
  activations; a layout whose largest device exceeds ``memory_fraction`` of HBM is
  infeasible.

The stage charged as critical holds both the input embedding's all-reduce and the output
layer (the first and last stage's extra work): exact for PP = 1, a slight upper bound
otherwise. Times in seconds, sizes in bytes; GEMM widths follow method.md §3 (a 4H FFN).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Mapping

import numpy as np

from tasks import costs, layer, memory, metrics
from tasks.collectives import bus_factor, ring_steps
from tasks.layout import (RECOMPUTE_MODES, SCHEDULES, STRUCTURAL_CONSTRAINTS, ZERO_MODES, Layout, first_violation,
                          structural_violations)
from tasks.projection import layer_times
from tasks.specs import HardwareProfile, LinkTier, TransformerModel

__all__ = ["STEP_MODEL_VERSION", "StepContext", "STATUS_CODES", "step_columns", "reasons", "LayerCollective",
           "layer_collectives", "layer_parts"]

#: Bumped whenever the step model's formulas change its numbers (with projection's
#: ``COST_MODEL_VERSION``, part of a study's identity and of scaling keys).
STEP_MODEL_VERSION = "step-1"

#: Status codes of ``step_columns``: 0 feasible, then each structural constraint, then memory.
STATUS_CODES: List[str] = ["ok", *STRUCTURAL_CONSTRAINTS, "fits_memory"]
_MEMORY_CODE = len(STATUS_CODES) - 1

_ZERO = {name: i for i, name in enumerate(ZERO_MODES)}
_RECOMPUTE = {name: i for i, name in enumerate(RECOMPUTE_MODES)}


@dataclass(frozen=True)
class StepContext:
    """What every layout of a search shares: model, cluster, global batch (sequences).

    ``memory_fraction`` of HBM is usable (the rest: framework, allocator fragmentation,
    communication buffers); ``flop_vs_bw`` and ``dp_slowdown`` are the scenarios of
    method.md §5.4-5.5 (compute time / m; overlapped communication slowed by interference).
    """

    model: TransformerModel
    hardware: HardwareProfile
    devices: int
    global_batch: int
    dtype_bytes: int = 2
    memory_fraction: float = 0.9
    flop_vs_bw: float = 1.0
    dp_slowdown: float = 1.0

    @property
    def memory_limit_bytes(self) -> float:
        return self.hardware.hbm_gb * 1e9 * self.memory_fraction


def _tier(crosses: np.ndarray, hw: HardwareProfile):
    """(α in s, bus bandwidth in B/s) per row: the scale-out tier where ``crosses``."""
    def figures(tier: LinkTier):
        return tier.latency_us * 1e-6, tier.bandwidth_GBps * 1e9 * tier.efficiency
    (a_in, bw_in), (a_out, bw_out) = figures(hw.intra_node), figures(hw.inter_node)
    return np.where(crosses, a_out, a_in), np.where(crosses, bw_out, bw_in)


def _collective(op: str, n, message_bytes, tier) -> np.ndarray:
    """Ring time of ``op`` among ``n`` devices: steps * α + bus factor * bytes / busbw (the
    α-β model of ``costs.ring_allreduce_time``, with nccl-tests' factors per operation)."""
    alpha, bandwidth = tier
    n = np.asarray(n, dtype=np.float64)
    return ring_steps(op, n) * alpha + bus_factor(op, n) * message_bytes / bandwidth


def _recompute_times(h, heads, sl, b, tp, p, hw):
    """Forward time of the attention core (scores and context GEMMs, softmax, attention
    dropout) and of the whole layer's element-wise kernels, per layer."""
    core = sum(costs.gemm_time(g.flops, g.bytes(p), hw) for g in layer.gemm_shapes(h, heads, sl, b, tp)
               if g.pass_ == "fwd" and g.name in ("scores", "context"))
    elementwise_fwd, kernels = 0.0, 0
    for name, fwd_bytes, count in layer.elementwise_kernels(h, heads, sl, b, tp, p):
        t = count * costs.memory_bound_time(fwd_bytes, hw)
        elementwise_fwd = elementwise_fwd + t
        kernels += count
        if name in ("softmax", "attn_dropout"):
            core = core + t
    return core, elementwise_fwd, kernels


def step_columns(layouts: Mapping[str, np.ndarray], ctx: StepContext) -> Dict[str, np.ndarray]:
    """Cost every layout; all inputs are equal-length arrays.

    Reads ``tp``, ``pp``, ``micro_batch``, ``schedule`` (code), ``virtual_stages``,
    ``zero`` (code), ``sequence_parallel`` (bool), ``recompute`` (code). Returns arrays:
    ``dp``, ``microbatches``, ``status_code`` (index into ``STATUS_CODES``),
    ``step_time_s``, ``exposed_comm_s``, ``exposed_comm_share``,
    ``tokens_per_s_per_device``, ``memory_per_device_bytes``, ``latency_s``,
    ``bubble_fraction``, ``compute_s``, ``tp_comm_s``, ``pp_comm_s``, ``dp_comm_s``
    (all DP/ZeRO collectives of a step, hidden or not), ``dp_traffic_bytes`` (bytes one
    device sends over its DP rings per step), ``params_per_device``. Step metrics are NaN
    where a structural constraint fails; memory is NaN there too.
    """
    model = ctx.model
    h, heads, sl, layers = float(model.hidden), float(model.heads), float(model.seq_len), float(model.layers)
    vocab = float(model.vocab or 0)
    p = float(ctx.dtype_bytes)
    tp = np.asarray(layouts["tp"], dtype=np.float64)
    pp = np.asarray(layouts["pp"], dtype=np.float64)
    b = np.asarray(layouts["micro_batch"], dtype=np.float64)
    zero = np.asarray(layouts["zero"], dtype=np.int64)
    sp = np.asarray(layouts["sequence_parallel"], dtype=bool)
    recompute = np.asarray(layouts["recompute"], dtype=np.int64)
    interleaved = np.asarray(layouts["schedule"]) == SCHEDULES.index("interleaved")
    v = np.where(interleaved, np.asarray(layouts["virtual_stages"], dtype=np.float64), 1.0)

    dp_int = ctx.devices // np.maximum(np.asarray(layouts["tp"]) * np.asarray(layouts["pp"]), 1)
    violations = structural_violations({**layouts, "dp": dp_int}, heads=model.heads, layers=model.layers,
                                       devices=ctx.devices, global_batch=ctx.global_batch)
    code = first_violation(violations)
    dp = np.maximum(dp_int, 1).astype(np.float64)
    m = np.floor(ctx.global_batch / (dp * b))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _costs(h, heads, sl, layers, vocab, p, tp, pp, dp, b, m, v, interleaved, zero, sp, recompute, ctx)
    memory_bytes = out.pop("memory_per_device_bytes")
    code = np.where((code == 0) & (memory_bytes > ctx.memory_limit_bytes), _MEMORY_CODE, code)
    structural = (code > 0) & (code < _MEMORY_CODE)
    for name, values in out.items():
        out[name] = np.where(code > 0, np.nan, values)
    out["memory_per_device_bytes"] = np.where(structural, np.nan, memory_bytes)
    out.update(dp=dp_int.astype(np.int64), microbatches=m.astype(np.int64), status_code=code)
    return out


def _costs(h, heads, sl, layers, vocab, p, tp, pp, dp, b, m, v, interleaved, zero, sp, recompute,
           ctx: StepContext) -> Dict[str, np.ndarray]:
    hw = ctx.hardware
    per_node = hw.devices_per_node
    n_layers = layers / pp  # layers per stage
    tokens = sl * b

    # Compute of one layer, forward + backward (+ what recomputation repeats), then the output layer.
    rows = np.full(np.shape(tp), h)  # projection's layer times take the row shape from h
    t_fwd, t_bwd, t_elem = layer_times(rows, heads, sl, b, tp, p, hw)
    t_core_fwd, t_elem_fwd, elem_kernels = _recompute_times(rows, heads, sl, b, tp, p, hw)
    full, selective = recompute == _RECOMPUTE["full"], recompute == _RECOMPUTE["selective"]
    t_repeat = np.where(full, t_fwd + t_elem_fwd, np.where(selective, t_core_fwd, 0.0))
    t_layer = metrics.apply_flop_vs_bw(t_fwd + t_bwd + t_elem + t_repeat, ctx.flop_vs_bw)
    logits = layer.Gemm("logits", "fwd", tokens, vocab / tp, h)
    t_output = metrics.apply_flop_vs_bw(3.0 * costs.gemm_time(logits.flops, logits.bytes(p), hw), ctx.flop_vs_bw)
    t_output = np.where(vocab > 0, t_output, 0.0)
    compute_mb = n_layers * t_layer + t_output

    # TP: serialized, on the tier the TP group spans.
    tp_tier = _tier(tp > per_node, hw)
    message = layer.tp_allreduce_bytes(h, sl, b, p)
    t_allreduce = np.where(sp, _collective("reduce_scatter", tp, message, tp_tier)
                           + _collective("all_gather", tp, message, tp_tier),
                           _collective("all_reduce", tp, message, tp_tier))
    tp_per_layer = layer.tp_allreduces_per_layer + np.where(full, 2, 0)
    tp_mb = (n_layers * tp_per_layer + 1.0) * t_allreduce  # + the vocabulary-parallel embedding's

    # PP: activations forward, gradients backward, per micro-batch and model chunk.
    pp_alpha, pp_bandwidth = _tier(tp * dp * pp > per_node, hw)
    p2p_bytes = message / np.where(sp, tp, 1.0)
    pp_mb = np.where(pp > 1, 2.0 * v * (pp_alpha + p2p_bytes / pp_bandwidth), 0.0)

    # DP / ZeRO: one message per layer and one for the stage's embedding matrices.
    dp_tier = _tier(tp * dp > per_node, hw)
    embeddings = np.where(pp > 1, 1.0, 2.0)
    grad_layer = layer.dp_gradient_bytes(h, tp, p)
    grad_embed = embeddings * p * vocab * h / tp
    def over_stage(op):  # noqa: E306 - one collective per layer plus the embeddings'
        return n_layers * _collective(op, dp, grad_layer, dp_tier) + _collective(op, dp, grad_embed, dp_tier)
    def traffic(op):  # noqa: E306
        return bus_factor(op, dp) * (n_layers * grad_layer + grad_embed)
    allreduce, gather = over_stage("all_reduce"), over_stage("all_gather")
    scatter = over_stage("reduce_scatter")
    fwd_hide = n_layers * metrics.apply_flop_vs_bw(t_fwd + t_elem_fwd, ctx.flop_vs_bw)
    bwd_hide = n_layers * metrics.apply_flop_vs_bw(t_bwd, ctx.flop_vs_bw)  # the overlappable backward GEMMs (§6)
    s = ctx.dp_slowdown

    def exposed(t):
        return metrics.exposed_communication(0.0, t, bwd_hide, s)

    is_zero3, is_fsdp = zero == _ZERO["zero3"], zero == _ZERO["fsdp"]
    sharded = is_zero3 | is_fsdp
    dp_mb = np.where(sharded, metrics.exposed_communication(0.0, gather, fwd_hide, s)
                     + exposed(gather + np.where(is_zero3, scatter, 0.0)), 0.0)
    dp_step = np.select([zero == _ZERO["none"], zero == _ZERO["zero1"], is_fsdp],
                        [exposed(allreduce), exposed(scatter) + gather, exposed(scatter)], 0.0)
    dp_total = np.select([zero == _ZERO["none"], zero == _ZERO["zero1"], is_zero3],
                         [allreduce, scatter + gather, m * (2.0 * gather + scatter)], 2.0 * m * gather + scatter)
    dp_traffic = np.select([zero <= _ZERO["zero1"], is_zero3],
                           [traffic("all_reduce"), 3.0 * m * traffic("all_gather")],
                           (2.0 * m + 1.0) * traffic("all_gather"))

    # The pipeline: m micro-batches plus (p-1)/v ticks of bubble (Narayanan et al. 2021).
    ticks = m + (pp - 1.0) / v
    comm_mb = tp_mb + pp_mb + dp_mb
    step = ticks * (compute_mb + comm_mb) + dp_step
    exposed_comm = ticks * comm_mb + dp_step

    # Latency floor (Erdil and Schneider-Joseph): launches and α steps only.
    launch = hw.kernel_launch_us * 1e-6
    gemms = 3 * len(layer.FORWARD_GEMMS)
    repeated_kernels = np.where(full, len(layer.FORWARD_GEMMS) + elem_kernels, np.where(selective, 2 + 2, 0))
    kernels_mb = n_layers * (gemms + 2 * elem_kernels + repeated_kernels) + np.where(vocab > 0, 3, 0)
    alpha_tp, alpha_dp = tp_tier[0], dp_tier[0]
    alpha_mb = ((n_layers * tp_per_layer + 1.0) * ring_steps("all_reduce", tp) * alpha_tp
                + np.where(pp > 1, 2.0 * v * pp_alpha, 0.0)
                + np.where(sharded, (n_layers + 1.0) * ring_steps("all_gather", dp) * alpha_dp
                           * np.where(is_zero3, 3.0, 2.0), 0.0))
    alpha_step = (n_layers + 1.0) * ring_steps("all_gather", dp) * alpha_dp * np.select(
        [zero <= _ZERO["zero1"], is_fsdp], [2.0, 1.0], 0.0)
    latency = ticks * (kernels_mb * launch + alpha_mb) + alpha_step

    # Memory of the largest device (method.md §8).
    params = n_layers * memory.layer_params(h) / tp + embeddings * vocab * h / tp
    states = memory.model_state_bytes(params, dp, zero)
    gathered = np.where(sharded, 2.0 * memory.WEIGHT_BYTES * memory.layer_params(h) / tp, 0.0)  # layer + prefetch
    act = memory.layer_activation_bytes(sl, b, h, heads, tp, sp, recompute)
    first = memory.in_flight_microbatches(m, pp, v, interleaved) * n_layers * act
    last = n_layers * act + memory.logits_bytes(sl, b, vocab, tp)
    device_memory = states + gathered + np.maximum(first, last)

    return {
        "step_time_s": step,
        "exposed_comm_s": exposed_comm,
        "exposed_comm_share": metrics.communication_share(exposed_comm, step),
        "tokens_per_s_per_device": ctx.global_batch * sl / step / ctx.devices,
        "latency_s": latency,
        "bubble_fraction": (ticks - m) / ticks,
        "compute_s": ticks * compute_mb,
        "tp_comm_s": ticks * tp_mb,
        "pp_comm_s": ticks * pp_mb,
        "dp_comm_s": dp_total,
        "dp_traffic_bytes": dp_traffic,
        "params_per_device": params,
        "memory_per_device_bytes": device_memory,
    }


def reasons(columns: Mapping[str, np.ndarray], ctx: StepContext) -> List[object]:
    """A reason per row of ``step_columns``' output: None when feasible, else the first
    constraint the layout breaks, with the figures for memory."""
    limit_gb = ctx.memory_limit_bytes / 1e9
    out: List[object] = []
    for code, mem in zip(columns["status_code"], columns["memory_per_device_bytes"], strict=True):
        if code == 0:
            out.append(None)
        elif code == _MEMORY_CODE:
            out.append(f"memory: needs {mem / 1e9:.1f} GB per device, {limit_gb:.1f} GB usable "
                       f"({ctx.memory_fraction:g} of {ctx.hardware.hbm_gb:g} GB)")
        else:
            name = STATUS_CODES[code]
            out.append(f"{name}: {STRUCTURAL_CONSTRAINTS[name]}")
    return out


@dataclass(frozen=True)
class LayerCollective:
    """One collective of one layer: its group ("tp" or "dp"), op, how many times it runs,
    among how many ranks, on which bytes, and whether the group spans nodes."""

    group: str
    op: str
    count: int
    ranks: int
    message_bytes: float
    crosses_nodes: bool


def layer_collectives(layout: Layout, ctx: StepContext) -> List[LayerCollective]:
    """The collectives of one layer for one micro-batch, as ``step_columns`` charges them:
    TP (4 all-reduces, 6 under full recomputation; with sequence parallelism a
    reduce-scatter and an all-gather each) and the layer's DP traffic at one micro-batch:
    plain DP an all-reduce, ZeRO-1 a reduce-scatter and an all-gather, ZeRO-3 and FSDP
    two all-gathers (forward, backward) and a reduce-scatter. Groups of one rank are left out."""
    model, p, per_node = ctx.model, float(ctx.dtype_bytes), ctx.hardware.devices_per_node
    out: List[LayerCollective] = []
    if layout.tp > 1:
        count = layer.tp_allreduces_per_layer + (2 if layout.recompute == "full" else 0)
        message = float(layer.tp_allreduce_bytes(model.hidden, model.seq_len, layout.micro_batch, p))
        ops = ("reduce_scatter", "all_gather") if layout.sequence_parallel else ("all_reduce",)
        out += [LayerCollective("tp", op, count, layout.tp, message, layout.tp > per_node) for op in ops]
    if layout.dp > 1:
        dp_ops = {"none": (("all_reduce", 1),), "zero1": (("reduce_scatter", 1), ("all_gather", 1))}.get(
            layout.zero, (("all_gather", 2), ("reduce_scatter", 1)))
        message = float(layer.dp_gradient_bytes(model.hidden, layout.tp, p))
        out += [LayerCollective("dp", op, count, layout.dp, message, layout.tp * layout.dp > per_node)
                for op, count in dp_ops]
    return out


def layer_parts(layout: Layout, ctx: StepContext) -> Dict[str, float]:
    """Spec-projected times of one layer and micro-batch, in seconds: ``gemm_s`` (the
    forward, input-gradient and weight-gradient GEMMs), ``tp_comm_s`` and ``dp_comm_s``
    (``layer_collectives`` on the link tier each group spans, not overlapped)."""
    model, hw = ctx.model, ctx.hardware
    t_fwd, t_bwd, _ = layer_times(np.array([float(model.hidden)]), float(model.heads), float(model.seq_len),
                                  float(layout.micro_batch), float(layout.tp), float(ctx.dtype_bytes), hw)
    parts = {"gemm_s": float(t_fwd[0] + t_bwd[0]), "tp_comm_s": 0.0, "dp_comm_s": 0.0}
    for c in layer_collectives(layout, ctx):
        tier = _tier(np.asarray(c.crosses_nodes), hw)
        parts[f"{c.group}_comm_s"] += c.count * float(_collective(c.op, c.ranks, c.message_bytes, tier))
    return parts
