"""Whole training steps under parallel layouts: time, exposed communication and memory.

``step_columns`` costs a table of layouts (``tasks.model.layout``, one row per layout) for one
model on one cluster at a fixed global batch, with no Python loop per layout, by summing
each layout's plan (``tasks.model.plan``: every operation of the step, costed once). It grows the
per-layer model of ``tasks.model.projection`` (method.md §3) to a whole step:

- **Compute** per layer from ``projection``'s GEMM and element-wise times, plus what
  recomputation repeats (selective: the attention core's forward; full: the whole
  forward, Korthikanti et al., arXiv 2205.05198), and the output layer's GEMMs.
- **Stack** (``tasks.model.stack``): the attention kernel (materialised or fused), the
  linear GEMMs' precision, and which communication overlaps compute; the layer's shape
  (grouped-query attention, a gated MLP of ``ffn_hidden``) comes from the model.
- **TP**: four all-reduces per layer (six under full recomputation) and one for the
  vocabulary-parallel embedding (none for a model without a vocabulary), serialized or
  overlapped with the linear GEMMs. Sequence parallelism replaces each by a reduce-scatter
  and an all-gather (Korthikanti et al.) and splits the replicated element-wise kernels.
- **Optimizer**: one memory-bound Adam step over the device's shard of the states.
- **PP**: a point-to-point send of each micro-batch's activations forward and of its
  gradient backward per stage boundary (v times for the interleaved schedule); the
  bubble, (p-1)/v ticks of the M + (p-1)/v a step takes, M micro-batches (Narayanan et
  al. 2021: bubble over ideal time (p-1)/(v*M); for 1F1B the bubble is (p-1)/(M+p-1) of
  the step).
- **DP** (Rajbhandari et al., ZeRO, 2020): what each way of sharding model states splits,
  which collectives it runs, how often and behind what: ``tasks.model.dp_protocol``.
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
otherwise. Times in seconds, sizes in bytes.
"""

from __future__ import annotations

from typing import Dict, List, Mapping

import numpy as np

from tasks.model import metrics
from tasks.model.layout import STRUCTURAL_CONSTRAINTS, first_violation, structural_violations
from tasks.model.plan import step_plan
from tasks.model.step_comm import latency_floor
from tasks.model.step_context import StepContext, StepLayouts, as_layouts

__all__ = ["STEP_MODEL_VERSION", "StepContext", "STATUS_CODES", "step_columns", "reasons"]

#: Bumped whenever the step model's formulas change its numbers (with projection's
#: ``COST_MODEL_VERSION``, part of a study's identity and of scaling keys).
#: What each version changed, and which numbers moved: docs/changelog.md.
STEP_MODEL_VERSION = "step-14"

#: Status codes of ``step_columns``: 0 feasible, then each structural constraint, then memory.
STATUS_CODES: List[str] = ["ok", *STRUCTURAL_CONSTRAINTS, "fits_memory"]
_MEMORY_CODE = len(STATUS_CODES) - 1


def step_columns(layouts: Mapping[str, np.ndarray], ctx: StepContext) -> Dict[str, np.ndarray]:
    """Cost every layout; all inputs are equal-length arrays.

    Reads ``tp``, ``pp``, ``micro_batch``, ``schedule`` (code), ``virtual_stages``,
    ``zero`` (code), ``sequence_parallel`` (bool), ``recompute`` (code). Returns arrays:
    ``dp``, ``microbatches``, ``status_code`` (index into ``STATUS_CODES``),
    ``step_time_s``, ``exposed_comm_s``, ``exposed_comm_share``,
    ``tokens_per_s_per_device``, ``memory_per_device_bytes``, ``latency_s``,
    ``bubble_fraction``, ``compute_s``, ``tp_comm_s``, ``pp_comm_s``, ``dp_comm_s``
    (all TP, PP and DP/ZeRO collectives of a step, hidden or not), ``tp_exposed_s`` and
    ``pp_exposed_s`` (what of them the step waits for), ``optimizer_s``,
    ``dp_traffic_bytes`` (bytes one device sends over its DP rings per step),
    ``params_per_device``. Step metrics are NaN where a structural constraint fails; memory
    is NaN there too.
    """
    model = ctx.model
    dp_int = ctx.devices // np.maximum(np.asarray(layouts["tp"]) * np.asarray(layouts["pp"]), 1)
    violations = structural_violations({**layouts, "dp": dp_int}, heads=model.heads, layers=model.layers,
                                       devices=ctx.devices, global_batch=ctx.global_batch)
    status = first_violation(violations)
    lay = as_layouts(layouts, np.maximum(dp_int, 1).astype(np.float64), ctx)
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


def _step(lay: StepLayouts, ctx: StepContext) -> Dict[str, np.ndarray]:
    """The step's times, traffic and memory (method.md §3, §6 and §8), summed from its plan."""
    plan = step_plan(lay, ctx)
    compute, tp, pp, dp = plan.compute, plan.tp, plan.pp, plan.dp
    ticks, step = plan.ticks, plan.step_time
    exposed_comm = ticks * plan.exposed_per_microbatch + dp["per_step"]
    return {
        "step_time_s": step,
        "exposed_comm_s": exposed_comm,
        "exposed_comm_share": metrics.communication_share(exposed_comm, step),
        "tokens_per_s_per_device": ctx.global_batch * ctx.model.seq_len / step / ctx.devices,
        "latency_s": latency_floor(lay, ctx, ticks, compute["kernels_per_microbatch"]),
        "bubble_fraction": (ticks - lay.microbatches) / ticks,
        "compute_s": ticks * compute["per_microbatch"],
        "tp_comm_s": ticks * tp["total"],
        "pp_comm_s": ticks * pp["total"],
        "tp_exposed_s": ticks * tp["exposed"],
        "pp_exposed_s": ticks * pp["exposed"],
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
