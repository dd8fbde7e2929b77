"""Profile a real layer's training step and attribute its time to operator classes.

``profile_step`` runs ``tasks.measure.transformer_layer`` steps under ``torch.profiler`` and
reads back the time of every ``op:`` region (per operator class and pass), the step's
own time, and what ran outside any region (the unattributed time). On CUDA a region's
time is the device time of its kernels; on the CPU, the region's time by the step's clock
(``tasks.measure.timing.cpu_clock``: the thread's CPU time for a one-thread step, else the
wall clock). Each figure is the fastest of ``steps`` separately profiled steps: on a shared
machine contention only ever adds time, so the fastest is the device's own
(``tasks.measure.stability`` cites the practice). ``measure_points`` does this for a table of
layer configurations and also times the plain step (no profiler), by the same clock, that
end-to-end accuracy is judged against: the fastest of its repeats.

The configurations of a table are measured together in ``rounds`` interleaved rounds: each
round visits every configuration in turn for its share of the profiled steps and then of
the plain steps, so a slow spell of a shared machine falls on one round of many
configurations rather than on the whole of one. Each configuration's fastest plain step is
judged by ``tasks.measure.stability`` (reproduced by a second round, and not above the sum
of the classes' fastest times by more than a bound); the unstable ones are measured again
together, a bounded number of times, their new rounds joining the old, and one still
unstable is stored with status ``unstable`` and the reason. The profiled figures are the
fastest over every measurement of the configuration, and so is the plain step.

Results are one wide row per configuration (``BASELINE_SCHEMA``): a ``t_<class>_s``
column per operator class of ``operators.OP_CLASSES``.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import pyarrow as pa

from tasks.device import DTYPE_BYTES, is_cuda
from tasks.measure.provenance import available_memory_bytes, device_provenance
from tasks.measure.stability import STATUS_UNSTABLE, StabilityRule, Verdict, interleave_until_stable
from tasks.measure.timing import WALL, clock_ns, cpu_clock, sample_times, synchronize
from tasks.measure.transformer_layer import OP_PREFIX, LayerShape, build_layer, region_clock
from tasks.model.kernels import layer
from tasks.model.step import memory
from tasks.model.terms.layout import code
from tasks.model.projection.operators import OP_CLASSES, class_column

__all__ = ["SCHEMA_VERSION", "MEASUREMENT_VERSION", "BASELINE_POINT_SCHEMA", "BASELINE_SCHEMA",
           "ProfileContext", "StepProfile", "profile_step", "measure_points"]

SCHEMA_VERSION = 1
#: Bumped when how a step is built or timed changes; part of every measurement's key.
MEASUREMENT_VERSION = "layer-4"

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
    ("plain_step_s", pa.float64()),      # the same step without the profiler: the fastest of its repeats
    ("plain_median_s", pa.float64()), ("plain_p90_s", pa.float64()),  # of the kept plain steps: the load
    ("spread", pa.float64()),            # p90/p10 - 1 of the kept plain steps (reported, not judged)
    ("drift", pa.float64()),             # second fastest round's fastest plain step / fastest round's - 1
    ("excess", pa.float64()),            # plain step / (sum of the classes' fastest + unattributed) - 1
    ("rejected", pa.int64()),            # plain steps left out of the median and p90 as outliers
    ("attempts", pa.int64()),            # measurements made (1 + re-measurements)
    ("unattributed_s", pa.float64()),    # profiled step time outside every operator region
    ("unattributed_kernel_s", pa.float64()),  # of which operators (kernels) outside every region
    ("profiled_steps", pa.int64()),
    ("threads", pa.int64()),             # torch's threads; one: timed by the thread's CPU clock
    ("wall_s", pa.float64()),            # wall time this configuration's measurement took
    ("device_model", pa.string()), ("torch_version", pa.string()), ("cuda_version", pa.string()),
    ("host", pa.string()),
] + [(class_column(c), pa.float64()) for c in OP_CLASSES])


@dataclass(frozen=True)
class ProfileContext:
    """How each configuration is measured: untimed ``warmup`` steps, then per measurement
    ``steps`` profiled and ``plain_repeats`` unprofiled steps spread over ``rounds``
    interleaved rounds, judged by ``rule``. A measurement's timed steps take about
    ``time_cap_s`` seconds at most (fewer steps on a slow machine), no re-measurement
    starts once a configuration has spent ``time_cap_s`` (``pause_s`` passes before each
    one), and a table's measurement stops after ``time_cap_s`` per configuration in all."""

    warmup: int = 2
    steps: int = 5
    plain_repeats: int = 12
    time_cap_s: float = 10.0
    dropout: float = 0.1
    threads: int = 0  # torch threads on the CPU; 0 keeps torch's default
    rounds: int = 3
    rule: StabilityRule = StabilityRule()
    pause_s: float = 0.5

    def __post_init__(self) -> None:
        if not 1 <= self.rounds <= self.plain_repeats:
            raise ValueError(f"rounds={self.rounds} must be from 1 to plain_repeats={self.plain_repeats}")


@dataclass(frozen=True)
class StepProfile:
    """Seconds per step: each operator class, the whole step, and the unattributed rest."""

    classes: Dict[str, float]
    step_s: float
    unattributed_s: float          # step time outside every region: framework work and kernels
    #: the operators (``aten::`` names) that ran outside every region, with their seconds
    unattributed_operators: Dict[str, float] = field(default_factory=dict)

    @property
    def unattributed_kernel_s(self) -> float:
        """Seconds of the operators (kernels) outside every region, of ``unattributed_s``."""
        return sum(self.unattributed_operators.values())


def _on_host(event) -> bool:
    """An event of the host's timeline: a ``record_function`` region or an operator. On CUDA
    the profiler also lays each region on the device's timeline (a user annotation spanning
    its kernels, of the same name); counting both counted every region twice."""
    return str(getattr(event, "device_type", "CPU")).endswith("CPU")


def _kernel_seconds(prof) -> float:
    """The device time of every kernel of a CUDA profile: device events less the regions'
    annotations, as the profiler's own table totals them."""
    return sum(e.self_device_time_total for e in prof.key_averages()
               if not _on_host(e) and not getattr(e, "is_user_annotation", False)) / 1e6


def _region_times(prof, cuda: bool) -> Dict[str, float]:
    """Seconds per ``op:`` region name in one profiled step (summed over its calls): on CUDA
    the device time of the kernels launched inside the region, on the CPU its own time."""
    times: Dict[str, float] = {}
    for event in prof.key_averages():
        if event.key.startswith(OP_PREFIX) and _on_host(event):
            name = event.key[len(OP_PREFIX):]
            micros = event.device_time_total if cuda else event.cpu_time_total
            times[name] = times.get(name, 0.0) + micros / 1e6
    return times


def _unattributed_operators(prof, cuda: bool) -> Dict[str, float]:
    """Seconds per operator (``aten::`` name) that ran outside every ``op:`` region: the
    outermost such operators only, so nested calls are not counted twice."""
    seconds: Dict[str, float] = {}
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        parent, inside = event.cpu_parent, False
        while parent is not None and not inside:
            inside = parent.name.startswith(OP_PREFIX) or parent.name.startswith("aten::")
            parent = parent.cpu_parent
        if not inside:
            micros = event.device_time_total if cuda else event.cpu_time_total
            seconds[event.name] = seconds.get(event.name, 0.0) + micros / 1e6
    return seconds


#: One profiled step: seconds per class, the step's own time, and its operators outside every region.
_Sample = Tuple[Dict[str, float], float, Dict[str, float]]


def _profiled_samples(step, *, device: str, steps: int, until: Optional[float] = None,
                      clock: str = WALL) -> List[_Sample]:
    """Profile ``steps`` calls of ``step()``, one at a time; fewer (at least one) once
    ``time.perf_counter()`` has passed ``until``. On the CPU the step and its regions are
    timed by ``clock`` (``tasks.measure.timing``)."""
    from torch.profiler import ProfilerActivity, profile

    cuda = is_cuda(device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    now = clock_ns(clock)
    samples: List[_Sample] = []
    for _ in range(steps):
        if samples and until is not None and time.perf_counter() > until:
            break
        with profile(activities=activities) as prof, region_clock(now) as clocked:
            synchronize(device)
            started = now()
            step()
            synchronize(device)
            wall = (now() - started) / 1e9
        regions = _region_times(prof, cuda) if cuda else dict(clocked)
        unknown = set(regions) - set(OP_CLASSES)
        if unknown:
            raise RuntimeError(f"regions outside the operator classes: {sorted(unknown)}")
        if cuda:
            wall = _kernel_seconds(prof)
        samples.append(({c: regions.get(c, 0.0) for c in OP_CLASSES}, wall, _unattributed_operators(prof, cuda)))
    return samples


def _fastest(samples: List[_Sample]) -> StepProfile:
    """The fastest time of each class, and the fastest step with what of it ran outside every region."""
    classes = {c: min(s[0][c] for s in samples) for c in OP_CLASSES}
    per_class, wall, stray = min(samples, key=lambda s: s[1])
    return StepProfile(classes, wall, max(0.0, wall - sum(per_class.values())), dict(stray))


def profile_step(step, *, device: str, steps: int, clock: str = WALL) -> StepProfile:
    """Profile ``steps`` calls of ``step()`` one at a time; the fastest time per class.

    The step's time is its time by ``clock`` on the CPU and, on CUDA, the device time of all
    the kernels it ran; the unattributed time is the step's time less the sum of its regions.
    """
    return _fastest(_profiled_samples(step, device=device, steps=steps, clock=clock))


def _split(total: int, parts: int) -> List[int]:
    """``total`` shared over ``parts`` as evenly as can be, the larger shares first."""
    return [total // parts + (i < total % parts) for i in range(parts)]


@dataclass
class _Subject:
    """One configuration being measured: its row so far, its layer while kept between
    visits, its profiled steps, its time, and (status, reason) if a visit ran out of memory."""

    row: dict
    built: object = None
    profiled: List[_Sample] = field(default_factory=list)
    wall_s: float = 0.0
    failed: Optional[Tuple[str, str]] = None


class _Visits:
    """``visit(i, r)`` of ``interleave_until_stable``: configuration ``i``'s share of round
    ``r``. Its layer is built (then warmed up by ``warmup`` steps) or reused (one untimed step,
    as the configurations before it left the caches cold); then come its share of the
    profiled steps and of the plain steps, whose seconds it returns. A visit's timed steps
    stop early (keeping at least one of each) past its ``budget``, so a slowed machine
    stretches a calibration by at most that. On the CPU, steps are timed by ``clock``."""

    def __init__(self, subjects: List[_Subject], context: ProfileContext, *, keep_layers: bool,
                 clock: str = WALL) -> None:
        self.subjects, self.context, self.keep_layers, self.clock = subjects, context, keep_layers, clock
        self.profiled_shares = _split(context.steps, context.rounds)
        self.plain_shares = _split(context.plain_repeats, context.rounds)
        # The time cap of the whole (interleave_until_stable's), and the visits of its first measurement.
        self.deadline = time.perf_counter() + context.time_cap_s * len(subjects)
        self.first_pass, self.visits = len(subjects) * context.rounds, 0

    def budget(self) -> float:
        """Seconds for the timed steps of the next visit: its share of the time cap,
        ``time_cap_s / rounds``, but no more than what is left of the whole's time cap shared
        over the first measurement's visits still to come. A slowed machine thus takes fewer
        steps in each visit rather than fewer rounds, which would leave no measurement whole."""
        left = max(1, self.first_pass - self.visits)
        return min(self.context.time_cap_s / self.context.rounds, max(0.0, self.deadline - time.perf_counter()) / left)

    def floor(self, i: int) -> Optional[float]:
        """The least configuration ``i``'s step can take by what was profiled of it: the sum of
        its classes' fastest times and what ran outside them (the excess test's floor)."""
        if not self.subjects[i].profiled:
            return None
        fastest = _fastest(self.subjects[i].profiled)
        return sum(fastest.classes.values()) + fastest.unattributed_s

    def __call__(self, i: int, r: int) -> Optional[List[float]]:
        import torch

        subject, context = self.subjects[i], self.context
        point = subject.row
        started = time.perf_counter()
        try:
            fresh = subject.built is None
            built = build_layer(LayerShape(point["h"], point["heads"], point["sl"], point["b"], point["tp"]),
                                dtype=point["dtype"], device=point["device"], causal=point["causal"],
                                dropout=context.dropout) if fresh else subject.built
            for _ in range(context.warmup if fresh else min(1, context.warmup)):
                built.step()
            synchronize(point["device"])
            # Half of the visit's budget for its profiled steps, the rest for its plain steps.
            budget, timed_from = self.budget(), time.perf_counter()
            subject.profiled += _profiled_samples(built.step, device=point["device"], steps=self.profiled_shares[r],
                                                  until=timed_from + budget / 2, clock=self.clock)
            plain = sample_times(built.step, device=point["device"], repeats=self.plain_shares[r],
                                 until=timed_from + budget, clock=self.clock)
            subject.built = built if self.keep_layers else None
            return plain
        except torch.OutOfMemoryError as exc:
            subject.built = None
            subject.failed = ("oom", str(exc).splitlines()[0] + "\n" + traceback.format_exc(limit=1))
            if is_cuda(point["device"]):
                torch.cuda.empty_cache()
            return None
        finally:
            subject.wall_s += time.perf_counter() - started
            self.visits += 1


def _measured_row(subject: _Subject, verdicts: List[Verdict]) -> dict:
    """A configuration's row: the fastest of all its profiled steps, and the verdict on its plain
    steps (the last, which judged them all),
    stable (``ok``) or not (``unstable``, with the reason; without times when the time cap of
    the whole ran out before it was measured)."""
    if subject.failed is not None:
        return {**subject.row, "status": subject.failed[0], "reason": subject.failed[1], "wall_s": subject.wall_s}
    if not verdicts:
        return {**subject.row, "status": STATUS_UNSTABLE, "attempts": 0, "wall_s": subject.wall_s,
                "reason": "not measured: the time cap of the whole calibration ran out first"}
    plain = verdicts[-1]
    fastest = _fastest(subject.profiled)
    times = f"{len(verdicts)} measurement{'s' if len(verdicts) > 1 else ''}"
    status, reason = ("ok", None) if plain.stable else (STATUS_UNSTABLE, f"unstable after {times}: {plain.reason}")
    return {**subject.row, "status": status, "reason": reason, "step_s": fastest.step_s,
            "plain_step_s": plain.fastest_s, "plain_median_s": plain.median_s, "plain_p90_s": plain.p90_s,
            "spread": plain.spread, "drift": plain.drift, "excess": plain.excess, "rejected": plain.rejected,
            "attempts": len(verdicts),
            "unattributed_s": fastest.unattributed_s, "unattributed_kernel_s": fastest.unattributed_kernel_s,
            "profiled_steps": len(subject.profiled), "wall_s": subject.wall_s,
            **{class_column(c): t for c, t in fastest.classes.items()}}


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
    """Measure every configuration of ``points`` (``BASELINE_POINT_SCHEMA``, all on one
    device) in interleaved rounds (``interleave_until_stable``); returns ``BASELINE_SCHEMA``
    rows in the same order. A configuration that cannot fit in the device's memory, or whose
    device is missing, is a row with status and reason; other errors propagate. Layers are
    kept between rounds while all of them fit in half the device's free memory, else
    built again at each visit. CPU steps are timed by ``cpu_clock`` of torch's threads."""
    import torch

    if context.threads:
        torch.set_num_threads(context.threads)
    rows: List[dict] = []
    subjects: List[_Subject] = []
    for point in points.to_pylist():
        cuda = is_cuda(point["device"])
        provenance = device_provenance(point["device"]) if not cuda or torch.cuda.is_available() else {}
        row = {**point, "threads": torch.get_num_threads(), "profiled_steps": 0,
               **{f: provenance.get(f) for f in ("device_model", "torch_version", "cuda_version", "host")}}
        if cuda and not torch.cuda.is_available():
            row.update(status="infeasible", reason=f"device {point['device']} is not available on this worker")
        elif _layer_bytes(point) > available_memory_bytes(point["device"]):
            row.update(status="infeasible",
                       reason=f"about {_layer_bytes(point) / 1e9:.1f} GB needed, more than the device has free")
        else:
            subjects.append(_Subject(row))
        rows.append(row)
    if subjects:
        device = subjects[0].row["device"]
        keep = sum(_layer_bytes(s.row) for s in subjects) <= available_memory_bytes(device) / 2
        visits = _Visits(subjects, context, keep_layers=keep, clock=cpu_clock(torch.get_num_threads()))
        verdicts = interleave_until_stable(len(subjects), visits, context.rule, rounds=context.rounds,
                                           time_cap_s=context.time_cap_s, pause_s=context.pause_s, floor=visits.floor)
        measured = {id(s.row): _measured_row(s, v) for s, v in zip(subjects, verdicts)}
        rows = [measured.get(id(row), row) for row in rows]
        for subject in subjects:
            subject.built = None
    return pa.Table.from_pylist(rows, schema=BASELINE_SCHEMA)
