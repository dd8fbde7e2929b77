"""Profile a real layer's training step and attribute its time to operator classes.

``profile_step`` runs ``tasks.measure.transformer_layer`` steps under ``torch.profiler`` and
reads back the time of every ``op:`` region (per operator class and pass), the step's
own time, and what ran outside any region (the unattributed time). On CUDA a region's
time is the device time of its kernels; on the CPU, the region's wall time. Each figure
is the fastest of ``steps`` separately profiled steps: on a shared machine contention
only ever adds time, so the fastest step is the device's own. ``measure_points`` does this for a table of layer configurations and also
times the plain step (no profiler) that end-to-end accuracy is judged against.

Results are one wide row per configuration (``BASELINE_SCHEMA``): a ``t_<class>_s``
column per operator class of ``operators.OP_CLASSES``.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass
from typing import Dict, List

import pyarrow as pa

from tasks.device import DTYPE_BYTES, is_cuda
from tasks.measure.provenance import available_memory_bytes, device_provenance
from tasks.measure.timing import synchronize, time_kernel
from tasks.measure.transformer_layer import OP_PREFIX, LayerShape, build_layer
from tasks.model import layer, memory
from tasks.model.layout import code
from tasks.model.operators import OP_CLASSES, class_column
from tasks.outcomes import InfeasibleError

__all__ = ["SCHEMA_VERSION", "MEASUREMENT_VERSION", "BASELINE_POINT_SCHEMA", "BASELINE_SCHEMA",
           "ProfileContext", "StepProfile", "profile_step", "measure_points"]

SCHEMA_VERSION = 1
#: Bumped when how a step is built or timed changes; part of every measurement's key.
MEASUREMENT_VERSION = "layer-1"

#: ``role``: "baseline" (the profiled baseline iteration), "variation" (one
#: hyperparameter moved from the baseline, named in ``varied``) or "held_out" (kept out
#: of every fit, to judge the projection).
BASELINE_POINT_SCHEMA = pa.schema([
    ("key", pa.string()), ("calibration", pa.string()), ("role", pa.string()), ("varied", pa.string()),
    ("h", pa.int64()), ("heads", pa.int64()), ("sl", pa.int64()), ("b", pa.int64()), ("tp", pa.int64()),
    ("dtype", pa.string()), ("device", pa.string()), ("causal", pa.bool_()),
])


BASELINE_SCHEMA = pa.schema(list(BASELINE_POINT_SCHEMA) + [
    ("status", pa.string()), ("reason", pa.string()),
    ("step_s", pa.float64()),            # the fastest profiled step
    ("plain_step_s", pa.float64()),      # the same step without the profiler: p10 of its repeats
    ("plain_median_s", pa.float64()), ("plain_p90_s", pa.float64()),
    ("unattributed_s", pa.float64()),    # profiled step time outside every operator region
    ("unattributed_kernel_s", pa.float64()),  # of which operators (kernels) outside every region
    ("profiled_steps", pa.int64()), ("threads", pa.int64()),
    ("wall_s", pa.float64()),            # wall time this configuration's measurement took
    ("device_model", pa.string()), ("torch_version", pa.string()), ("cuda_version", pa.string()),
    ("host", pa.string()),
] + [(class_column(c), pa.float64()) for c in OP_CLASSES])


@dataclass(frozen=True)
class ProfileContext:
    """How each configuration is measured: untimed ``warmup`` steps, ``steps`` profiled
    steps, ``plain_repeats`` unprofiled steps (at least; more while they are noisy, up
    to ``time_cap_s``), and the dropout probability of the layer."""

    warmup: int = 2
    steps: int = 5
    plain_repeats: int = 10
    time_cap_s: float = 10.0
    dropout: float = 0.1
    threads: int = 0  # torch threads on the CPU; 0 keeps torch's default


@dataclass(frozen=True)
class StepProfile:
    """Seconds per step: each operator class, the whole step, and the unattributed rest."""

    classes: Dict[str, float]
    step_s: float
    unattributed_s: float          # step time outside every region: framework work and kernels
    unattributed_kernel_s: float   # of which operators (kernels) outside every region


def _region_times(prof, cuda: bool) -> Dict[str, float]:
    """Seconds per ``op:`` region name in one profiled step (summed over its calls)."""
    times: Dict[str, float] = {}
    for event in prof.key_averages():
        if event.key.startswith(OP_PREFIX):
            name = event.key[len(OP_PREFIX):]
            micros = event.device_time_total if cuda else event.cpu_time_total
            times[name] = times.get(name, 0.0) + micros / 1e6
    return times


def _unattributed_kernel_time(prof, cuda: bool) -> float:
    """Seconds of operators (``aten::``) that ran outside every ``op:`` region: the
    outermost such operators only, so nested calls are not counted twice."""
    total = 0.0
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        parent, inside = event.cpu_parent, False
        while parent is not None and not inside:
            inside = parent.name.startswith(OP_PREFIX) or parent.name.startswith("aten::")
            parent = parent.cpu_parent
        if not inside:
            total += (event.device_time_total if cuda else event.cpu_time_total) / 1e6
    return total


def profile_step(step, *, device: str, steps: int) -> StepProfile:
    """Profile ``steps`` calls of ``step()`` one at a time; the fastest time per class.

    The step's time is its wall time on the CPU and, on CUDA, the device time of all the
    kernels it ran; the unattributed time is the step's time less the sum of its regions.
    """
    from torch.profiler import ProfilerActivity, profile

    cuda = is_cuda(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    per_class: Dict[str, List[float]] = {c: [] for c in OP_CLASSES}
    step_times: List[float] = []
    stray: List[float] = []
    for _ in range(steps):
        with profile(activities=activities) as prof:
            synchronize(device)
            started = time.perf_counter()
            step()
            synchronize(device)
            wall = time.perf_counter() - started
        regions = _region_times(prof, cuda)
        unknown = set(regions) - set(per_class)
        if unknown:
            raise RuntimeError(f"regions outside the operator classes: {sorted(unknown)}")
        for op_class in per_class:
            per_class[op_class].append(regions.get(op_class, 0.0))
        if cuda:
            wall = sum(e.self_device_time_total for e in prof.key_averages()) / 1e6
        step_times.append(wall)
        stray.append(_unattributed_kernel_time(prof, cuda))
    classes = {c: min(v) for c, v in per_class.items()}
    fastest = min(range(steps), key=step_times.__getitem__)
    unattributed = step_times[fastest] - sum(v[fastest] for v in per_class.values())
    return StepProfile(classes, step_times[fastest], max(0.0, unattributed), stray[fastest])


def _measure_one(point: dict, context: ProfileContext) -> dict:
    shape = LayerShape(point["h"], point["heads"], point["sl"], point["b"], point["tp"])
    device = point["device"]
    layer = build_layer(shape, dtype=point["dtype"], device=device, causal=point["causal"], dropout=context.dropout)
    for _ in range(context.warmup):
        layer.step()
    synchronize(device)
    profiled = profile_step(layer.step, device=device, steps=context.steps)
    plain = time_kernel(layer.step, device=device, warmup=0, min_repeats=context.plain_repeats,
                        max_repeats=max(context.plain_repeats, 50), time_cap_s=context.time_cap_s)
    return {"status": "ok", "reason": None, "step_s": profiled.step_s, "plain_step_s": plain.p10_s,
            "plain_median_s": plain.median_s, "plain_p90_s": plain.p90_s, "unattributed_s": profiled.unattributed_s,
            "unattributed_kernel_s": profiled.unattributed_kernel_s,
            "profiled_steps": context.steps,
            **{class_column(c): t for c, t in profiled.classes.items()}}


def _layer_bytes(point: dict) -> float:
    """A rough upper bound of the memory one layer's step holds: weights and their
    gradients (``layer.layer_params`` / TP each) plus the activations kept for the backward
    pass (``memory.layer_activation_bytes``, 16-bit, scaled to the dtype), times 2 for the
    private graphs."""
    p = DTYPE_BYTES[point["dtype"]]
    weights = 2 * float(layer.layer_params(point["h"])) / point["tp"] * p
    activations = float(memory.layer_activation_bytes(point["sl"], point["b"], point["h"], point["heads"], point["tp"],
                                                      sequence_parallel=False, recompute=code("recompute", "none")))
    activations *= p / 2
    return 2 * (weights + activations)


def measure_points(points: pa.Table, context: ProfileContext) -> pa.Table:
    """Measure every configuration of ``points`` (``BASELINE_POINT_SCHEMA``); returns
    ``BASELINE_SCHEMA`` rows. A configuration that cannot fit in the device's memory, or
    whose device is missing, is a row with status and reason; other errors propagate."""
    import torch

    if context.threads:
        torch.set_num_threads(context.threads)
    rows = []
    for point in points.to_pylist():
        cuda = is_cuda(point["device"])
        provenance = device_provenance(point["device"]) if not cuda or torch.cuda.is_available() else {}
        base = {**point, "threads": torch.get_num_threads(), "profiled_steps": 0,
                **{f: provenance.get(f) for f in ("device_model", "torch_version", "cuda_version", "host")}}
        try:
            if cuda and not torch.cuda.is_available():
                raise InfeasibleError(f"device {point['device']} is not available on this worker")
            if _layer_bytes(point) > available_memory_bytes(point["device"]):
                raise InfeasibleError(f"about {_layer_bytes(point) / 1e9:.1f} GB needed, more than the device has free")
            started = time.perf_counter()
            measured = _measure_one(point, context)
            rows.append({**base, **measured, "wall_s": time.perf_counter() - started})
        except InfeasibleError as exc:
            rows.append({**base, "status": "infeasible", "reason": str(exc)})
        except torch.OutOfMemoryError as exc:
            rows.append({**base, "status": "oom", "reason": str(exc).splitlines()[0] + "\n" + traceback.format_exc(limit=1)})
            if cuda:
                torch.cuda.empty_cache()
    return pa.Table.from_pylist(rows, schema=BASELINE_SCHEMA)
