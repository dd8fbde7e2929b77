"""Whole training steps under parallel layouts: time, exposed communication and memory.

``step_columns`` costs a table of layouts (``tasks.model.layout``, one row per layout) for one
model on one cluster at a fixed global batch, with no Python loop per layout. It grows the
per-layer model of ``tasks.model.projection`` (method.md §3) to a whole step:

- **Compute** per layer from ``projection``'s GEMM and element-wise times, plus what
  recomputation repeats (selective: the attention core's forward; full: the whole
  forward, Korthikanti et al., arXiv 2205.05198), and the output layer's GEMMs.
- **TP**: four all-reduces per layer (six under full recomputation) and one for the
  vocabulary-parallel embedding (none for a model without a vocabulary), serialized. Sequence parallelism replaces each by a
  reduce-scatter and an all-gather (Korthikanti et al.): the same ring time, less memory.
- **PP**: a point-to-point send of each micro-batch's activations forward and of its
  gradient backward per stage boundary (v times for the interleaved schedule); the
  bubble, (p-1)/v ticks of the M + (p-1)/v a step takes, M micro-batches (Narayanan et
  al. 2021: bubble over ideal time (p-1)/(v*M); for 1F1B the bubble is (p-1)/(M+p-1) of
  the step).
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
- **Memory** (method.md §8, ``tasks.model.memory``): the largest stage's model states and
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

from tasks.model import layer, memory, metrics, roofline
from tasks.model.collectives import bus_factor, ring_steps, tier_figures, tier_time
from tasks.model.communication import (
    RECOMPUTED_TP_COLLECTIVES,
    TP_COLLECTIVES_PER_LAYER,
    dp_gradient_time,
    tp_collective_time,
)
from tasks.model.layout import STRUCTURAL_CONSTRAINTS, code, first_violation, structural_violations
from tasks.model.projection import layer_times
from tasks.model.specs import HardwareProfile, TransformerModel

__all__ = ["STEP_MODEL_VERSION", "StepContext", "STATUS_CODES", "step_columns", "reasons"]

#: Bumped whenever the step model's formulas change its numbers (with projection's
#: ``COST_MODEL_VERSION``, part of a study's identity and of scaling keys).
STEP_MODEL_VERSION = "step-1"

#: Status codes of ``step_columns``: 0 feasible, then each structural constraint, then memory.
STATUS_CODES: List[str] = ["ok", *STRUCTURAL_CONSTRAINTS, "fits_memory"]
_MEMORY_CODE = len(STATUS_CODES) - 1


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


@dataclass(frozen=True)
class _Layouts:
    """The layouts being costed, as float arrays (codes as flags), with what follows from them."""

    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    micro_batch: np.ndarray
    microbatches: np.ndarray     # micro-batches per step: global batch / (DP x micro-batch)
    stages: np.ndarray           # virtual stages per device (1 for 1F1B)
    interleaved: np.ndarray
    zero: np.ndarray             # codes of layout.ZERO_MODES
    sequence_parallel: np.ndarray
    recompute: np.ndarray        # codes of layout.RECOMPUTE_MODES
    layers_per_stage: np.ndarray

    @property
    def full(self) -> np.ndarray:
        return self.recompute == code("recompute", "full")

    @property
    def selective(self) -> np.ndarray:
        return self.recompute == code("recompute", "selective")

    def zero_is(self, name: str) -> np.ndarray:
        return self.zero == code("zero", name)

    @property
    def sharded(self) -> np.ndarray:
        """ZeRO-3 or FSDP: weights re-gathered every micro-batch."""
        return self.zero_is("zero3") | self.zero_is("fsdp")


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
    dp_int = ctx.devices // np.maximum(np.asarray(layouts["tp"]) * np.asarray(layouts["pp"]), 1)
    violations = structural_violations({**layouts, "dp": dp_int}, heads=model.heads, layers=model.layers,
                                       devices=ctx.devices, global_batch=ctx.global_batch)
    status = first_violation(violations)
    lay = _as_layouts(layouts, np.maximum(dp_int, 1).astype(np.float64), ctx)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _step(lay, ctx)
    memory_bytes = out.pop("memory_per_device_bytes")
    status = np.where((status == 0) & (memory_bytes > ctx.memory_limit_bytes), _MEMORY_CODE, status)
    structural = (status > 0) & (status < _MEMORY_CODE)
    for name, values in out.items():
        out[name] = np.where(status > 0, np.nan, values)
    out["memory_per_device_bytes"] = np.where(structural, np.nan, memory_bytes)
    out.update(dp=dp_int.astype(np.int64), microbatches=lay.microbatches.astype(np.int64), status_code=status)
    return out


def _as_layouts(layouts: Mapping[str, np.ndarray], dp: np.ndarray, ctx: StepContext) -> _Layouts:
    tp, pp, b = (np.asarray(layouts[k], dtype=np.float64) for k in ("tp", "pp", "micro_batch"))
    interleaved = np.asarray(layouts["schedule"]) == code("schedule", "interleaved")
    return _Layouts(tp=tp, pp=pp, dp=dp, micro_batch=b, microbatches=np.floor(ctx.global_batch / (dp * b)),
                    stages=np.where(interleaved, np.asarray(layouts["virtual_stages"], dtype=np.float64), 1.0),
                    interleaved=interleaved, zero=np.asarray(layouts["zero"], dtype=np.int64),
                    sequence_parallel=np.asarray(layouts["sequence_parallel"], dtype=bool),
                    recompute=np.asarray(layouts["recompute"], dtype=np.int64),
                    layers_per_stage=float(ctx.model.layers) / pp)


def _step(lay: _Layouts, ctx: StepContext) -> Dict[str, np.ndarray]:
    """The step's times, traffic and memory (method.md §3, §6 and §8)."""
    compute = _compute(lay, ctx)
    tp_mb = _tp_comm(lay, ctx)
    pp_mb = _pp_comm(lay, ctx)
    dp = _dp_comm(lay, ctx, compute)
    # The pipeline: M micro-batches plus (p-1)/v ticks of bubble (Narayanan et al. 2021).
    ticks = lay.microbatches + (lay.pp - 1.0) / lay.stages
    comm_mb = tp_mb + pp_mb + dp["per_microbatch"]
    step = ticks * (compute["per_microbatch"] + comm_mb) + dp["per_step"]
    exposed_comm = ticks * comm_mb + dp["per_step"]
    params, device_memory = _memory(lay, ctx)
    return {
        "step_time_s": step,
        "exposed_comm_s": exposed_comm,
        "exposed_comm_share": metrics.communication_share(exposed_comm, step),
        "tokens_per_s_per_device": ctx.global_batch * ctx.model.seq_len / step / ctx.devices,
        "latency_s": _latency(lay, ctx, ticks, compute["kernels_per_microbatch"]),
        "bubble_fraction": (ticks - lay.microbatches) / ticks,
        "compute_s": ticks * compute["per_microbatch"],
        "tp_comm_s": ticks * tp_mb,
        "pp_comm_s": ticks * pp_mb,
        "dp_comm_s": dp["total"],
        "dp_traffic_bytes": dp["traffic"],
        "params_per_device": params,
        "memory_per_device_bytes": device_memory,
    }


def _vocab(ctx: StepContext) -> float:
    return float(ctx.model.vocab or 0)


def _compute(lay: _Layouts, ctx: StepContext) -> Dict[str, np.ndarray]:
    """Compute of one micro-batch on the busiest stage: its layers forward and backward,
    plus what recomputation repeats (selective: the attention core's forward; full: the
    whole forward, Korthikanti et al.), plus the output layer's GEMMs; and what can hide
    DP traffic (forward and backward GEMM time of the stage, §6)."""
    model, hw, p = ctx.model, ctx.hardware, float(ctx.dtype_bytes)
    h, heads, sl = float(model.hidden), float(model.heads), float(model.seq_len)
    rows = np.full(np.shape(lay.tp), h)  # layer_times take the row shape from h
    t_fwd, t_bwd, t_elem = layer_times(rows, heads, sl, lay.micro_batch, lay.tp, p, hw)
    core_fwd, elem_fwd, elem_kernels = _recompute_times(rows, heads, sl, lay.micro_batch, lay.tp, p, hw)
    t_repeat = np.where(lay.full, t_fwd + elem_fwd, np.where(lay.selective, core_fwd, 0.0))
    t_layer = metrics.apply_flop_vs_bw(t_fwd + t_bwd + t_elem + t_repeat, ctx.flop_vs_bw)
    logits = layer.Gemm("logits", "fwd", sl * lay.micro_batch, _vocab(ctx) / lay.tp, h)
    t_output = 3.0 * roofline.gemm_time(logits.flops, logits.bytes(p), hw) if _vocab(ctx) > 0 else 0.0
    gemms = 3 * len(layer.FORWARD_GEMMS)
    repeated = np.where(lay.full, len(layer.FORWARD_GEMMS) + elem_kernels, np.where(lay.selective, 2 + 2, 0))
    return {
        "per_microbatch": lay.layers_per_stage * t_layer + metrics.apply_flop_vs_bw(t_output, ctx.flop_vs_bw),
        "forward_hide": lay.layers_per_stage * metrics.apply_flop_vs_bw(t_fwd + elem_fwd, ctx.flop_vs_bw),
        "backward_hide": lay.layers_per_stage * metrics.apply_flop_vs_bw(t_bwd, ctx.flop_vs_bw),
        "kernels_per_microbatch": lay.layers_per_stage * (gemms + 2 * elem_kernels + repeated)
        + (3 if _vocab(ctx) > 0 else 0),
    }


def _recompute_times(h, heads, sl, b, tp, p, hw):
    """Forward time of the attention core (scores and context GEMMs, softmax, attention
    dropout) and of the whole layer's element-wise kernels, per layer; and the layer's
    element-wise kernel count."""
    core = sum(roofline.gemm_time(g.flops, g.bytes(p), hw) for g in layer.gemm_shapes(h, heads, sl, b, tp)
               if g.pass_ == "fwd" and g.name in ("scores", "context"))
    elementwise_fwd, kernels = 0.0, 0
    for name, fwd_bytes, count in layer.elementwise_kernels(h, heads, sl, b, tp, p):
        t = count * roofline.memory_bound_time(fwd_bytes, hw)
        elementwise_fwd = elementwise_fwd + t
        kernels += count
        if name in ("softmax", "attn_dropout"):
            core = core + t
    return core, elementwise_fwd, kernels


def _tp_collectives_per_microbatch(lay: _Layouts, ctx: StepContext) -> np.ndarray:
    """TP collectives of one micro-batch on the busiest stage: 4 per layer (6 under full
    recomputation), and one for the vocabulary-parallel embedding when there is one."""
    per_layer = TP_COLLECTIVES_PER_LAYER + np.where(lay.full, RECOMPUTED_TP_COLLECTIVES, 0)
    return lay.layers_per_stage * per_layer + (1.0 if _vocab(ctx) > 0 else 0.0)


def _tp_comm(lay: _Layouts, ctx: StepContext) -> np.ndarray:
    """TP communication of one micro-batch, serialized, on the tier the TP group spans."""
    model, hw = ctx.model, ctx.hardware
    one = tp_collective_time(float(model.hidden), float(model.seq_len), lay.micro_batch, lay.tp,
                             float(ctx.dtype_bytes), lay.tp > hw.devices_per_node, hw, lay.sequence_parallel)
    return _tp_collectives_per_microbatch(lay, ctx) * one


def _pp_crosses(lay: _Layouts, ctx: StepContext) -> np.ndarray:
    return lay.tp * lay.dp * lay.pp > ctx.hardware.devices_per_node


def _pp_comm(lay: _Layouts, ctx: StepContext) -> np.ndarray:
    """PP: each micro-batch's activations forward and its gradient backward per stage
    boundary, v times for the interleaved schedule (split by TP under sequence parallelism)."""
    hw = ctx.hardware
    (a_in, bw_in), (a_out, bw_out) = tier_figures(hw.intra_node), tier_figures(hw.inter_node)
    crosses = _pp_crosses(lay, ctx)
    alpha, bandwidth = np.where(crosses, a_out, a_in), np.where(crosses, bw_out, bw_in)
    message = layer.tp_allreduce_bytes(float(ctx.model.hidden), float(ctx.model.seq_len), lay.micro_batch,
                                       float(ctx.dtype_bytes))
    p2p_bytes = message / np.where(lay.sequence_parallel, lay.tp, 1.0)
    return np.where(lay.pp > 1, 2.0 * lay.stages * (alpha + p2p_bytes / bandwidth), 0.0)


def _embeddings(lay: _Layouts) -> np.ndarray:
    """Embedding matrices on the busiest stage: input and output (tied or not) when PP = 1."""
    return np.where(lay.pp > 1, 1.0, 2.0)


def _dp_comm(lay: _Layouts, ctx: StepContext, compute: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """DP / ZeRO traffic (Rajbhandari et al. 2020): one collective per layer and one for the
    stage's embedding matrices; plain DP and ZeRO-1 once per step, hidden behind the last
    micro-batch's backward GEMMs as far as they last (§6); ZeRO-3 and FSDP gather weights
    every micro-batch (hidden behind its forward and backward)."""
    model, hw, p = ctx.model, ctx.hardware, float(ctx.dtype_bytes)
    h, vocab = float(model.hidden), _vocab(ctx)
    crosses = lay.tp * lay.dp > hw.devices_per_node
    embed_bytes = _embeddings(lay) * p * vocab * h / lay.tp

    def over_stage(op: str) -> np.ndarray:
        layers = lay.layers_per_stage * dp_gradient_time(op, h, lay.tp, lay.dp, p, crosses, hw)
        return layers + (tier_time(op, lay.dp, embed_bytes, crosses, hw) if vocab > 0 else 0.0)

    def exposed(t, hide=compute["backward_hide"]):
        return metrics.exposed_communication(0.0, t, hide, ctx.dp_slowdown)

    allreduce, gather, scatter = over_stage("all_reduce"), over_stage("all_gather"), over_stage("reduce_scatter")
    is_zero3, is_fsdp, microbatches = lay.zero_is("zero3"), lay.zero_is("fsdp"), lay.microbatches
    per_mb = np.where(lay.sharded, exposed(gather, compute["forward_hide"])
                      + exposed(gather + np.where(is_zero3, scatter, 0.0)), 0.0)
    per_step = np.select([lay.zero_is("none"), lay.zero_is("zero1"), is_fsdp],
                         [exposed(allreduce), exposed(scatter) + gather, exposed(scatter)], 0.0)
    total = np.select([lay.zero_is("none"), lay.zero_is("zero1"), is_zero3],
                      [allreduce, scatter + gather, microbatches * (2.0 * gather + scatter)],
                      2.0 * microbatches * gather + scatter)
    return {"per_microbatch": per_mb, "per_step": per_step, "total": total,
            "traffic": _dp_traffic(lay, ctx, embed_bytes)}


def _dp_traffic(lay: _Layouts, ctx: StepContext, embed_bytes: np.ndarray) -> np.ndarray:
    """Bytes one device sends over its DP rings per step (nccl-tests' bus bytes)."""
    stage_bytes = lay.layers_per_stage * layer.dp_gradient_bytes(float(ctx.model.hidden), lay.tp,
                                                                 float(ctx.dtype_bytes)) + embed_bytes
    allreduce = bus_factor("all_reduce", lay.dp) * stage_bytes
    gather = bus_factor("all_gather", lay.dp) * stage_bytes
    microbatches = lay.microbatches
    return np.select([lay.zero <= code("zero", "zero1"), lay.zero_is("zero3")],
                     [allreduce, 3.0 * microbatches * gather], (2.0 * microbatches + 1.0) * gather)


def _latency(lay: _Layouts, ctx: StepContext, ticks: np.ndarray, kernels_per_mb: np.ndarray) -> np.ndarray:
    """The latency floor (Erdil and Schneider-Joseph, arXiv 2411.01137): the step's time if
    every kernel and collective moved no bytes and did no FLOPs, launches and α steps only."""
    hw = ctx.hardware
    alpha_in, alpha_out = hw.intra_node.latency_us * 1e-6, hw.inter_node.latency_us * 1e-6
    alpha_tp = np.where(lay.tp > hw.devices_per_node, alpha_out, alpha_in)
    alpha_dp = np.where(lay.tp * lay.dp > hw.devices_per_node, alpha_out, alpha_in)
    alpha_pp = np.where(_pp_crosses(lay, ctx), alpha_out, alpha_in)
    dp_collectives = lay.layers_per_stage + (1.0 if _vocab(ctx) > 0 else 0.0)
    gather_alpha = dp_collectives * ring_steps("all_gather", lay.dp) * alpha_dp
    alpha_mb = (_tp_collectives_per_microbatch(lay, ctx) * ring_steps("all_reduce", lay.tp) * alpha_tp
                + np.where(lay.pp > 1, 2.0 * lay.stages * alpha_pp, 0.0)
                + np.where(lay.sharded, gather_alpha * np.where(lay.zero_is("zero3"), 3.0, 2.0), 0.0))
    alpha_step = gather_alpha * np.select([lay.zero <= code("zero", "zero1"), lay.zero_is("fsdp")], [2.0, 1.0], 0.0)
    return ticks * (kernels_per_mb * hw.kernel_launch_us * 1e-6 + alpha_mb) + alpha_step


def _memory(lay: _Layouts, ctx: StepContext):
    """Parameters and bytes of the largest device (method.md §8): model states, the gathered
    layer (and its prefetch) under ZeRO-3/FSDP, and the activations the first stage holds
    at its peak (or the last stage's with the logits)."""
    model = ctx.model
    h, vocab = float(model.hidden), _vocab(ctx)
    params = lay.layers_per_stage * layer.layer_params(h) / lay.tp + _embeddings(lay) * vocab * h / lay.tp
    states = memory.model_state_bytes(params, lay.dp, lay.zero)
    gathered = np.where(lay.sharded, 2.0 * memory.WEIGHT_BYTES * layer.layer_params(h) / lay.tp, 0.0)
    act = memory.layer_activation_bytes(float(model.seq_len), lay.micro_batch, h, float(model.heads), lay.tp,
                                        lay.sequence_parallel, lay.recompute)
    first = memory.in_flight_microbatches(lay.microbatches, lay.pp, lay.stages, lay.interleaved) \
        * lay.layers_per_stage * act
    last = lay.layers_per_stage * act + memory.logits_bytes(float(model.seq_len), lay.micro_batch, vocab, lay.tp)
    return params, states + gathered + np.maximum(first, last)


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
                       f"({ctx.memory_fraction:g} of {ctx.hardware.hbm_gb:g} GB)")
        else:
            name = STATUS_CODES[status]
            out.append(f"{name}: {STRUCTURAL_CONSTRAINTS[name]}")
    return out
