"""The probe job: synthetic points (``tasks.measure.probe``) that check a cluster end to end
(dispatch, retries, fault sorting, the lake) without a device (``commscale probe``)."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from typing import Dict, Mapping, Optional

import pyarrow as pa

from sweeps.config.checks import check_name
from sweeps.errors import ConfigError
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Resources, Workload, fingerprint_of, key_of
from sweeps.lake.kinds import PROBE
from tasks.measure import probe

__all__ = ["probe_key", "probe_job", "remove_markers"]


#: Ray's own resources, which a task asks for with its own arguments, not as custom ones.
RAY_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def probe_key(name: str, config_fingerprint: str, index: int) -> str:
    """The lake key of one probe point (kind ``probe``): the probe's name, the fingerprint of
    its settings and the point's index."""
    return key_of([PROBE, name, config_fingerprint, index])


def _check(points: int, sleep_s: float, fail: Mapping[str, int], resources: Mapping[str, float]) -> None:
    for name, amount in resources.items():
        if name in RAY_RESOURCES:
            raise ConfigError("resource", f"{name}={amount:g}", "is one of Ray's own resources, not a custom one "
                                                                "(--cpus-per-point sets the CPUs)")
    if points <= 0:
        raise ConfigError("points", points, "must be positive")
    if sleep_s < 0:
        raise ConfigError("sleep_ms", sleep_s * 1000, "must not be negative")
    for mode, count in fail.items():
        if mode not in probe.FAIL_MODES or not mode:
            raise ConfigError("fail", mode, f"unknown mode; choose from {', '.join(m for m in probe.FAIL_MODES if m)}")
        if count < 0:
            raise ConfigError("fail", f"{mode}:{count}", "count must not be negative")
    if sum(fail.values()) > points:
        raise ConfigError("fail", dict(fail), f"asks for more failing points than the {points} points")


def probe_job(*, name: str, points: int, sleep_s: float, fail: Mapping[str, int], resources: Dict[str, float],
              cpus_per_point: float = 1.0, point_timeout_s: float = 60.0, marker_dir: Optional[str] = None) -> SweepJob:
    """``points`` synthetic points that sleep ``sleep_s``; the first ones fail on purpose,
    ``fail[mode]`` points per mode. Each task asks for ``cpus_per_point`` CPUs and
    ``resources`` (custom Ray resources standing in for GPUs).

    The "once" modes keep markers in ``marker_dir`` (default: a new name in the temp
    folder), which the first marker creates; nothing is created here, and
    ``remove_markers`` removes the folder once the job has run."""
    check_name("--name", name)
    _check(points, sleep_s, fail, resources)
    modes = [mode for mode, count in sorted(fail.items()) for _ in range(count)]
    modes += [""] * (points - len(modes))
    config = {"points": points, "sleep_s": sleep_s, "fail": dict(sorted(fail.items()))}
    fp = fingerprint_of(config)
    rows = [{"key": probe_key(name, fp, i), "index": i, "sleep_s": sleep_s, "fail": mode}
            for i, mode in enumerate(modes)]
    markers = marker_dir or os.path.join(tempfile.gettempdir(), f"commscale-probe-{uuid.uuid4().hex[:12]}")
    context = probe.ProbeContext(markers)
    workload = Workload(kind=PROBE, body=probe.probe_table, context=context, schema=probe.PROBE_SCHEMA,
                        schema_version=probe.SCHEMA_VERSION,
                        resources=Resources(cpus=cpus_per_point, custom=dict(resources)),
                        point_timeout_s=point_timeout_s)
    label = "+".join(sorted(resources)) or "cpu"
    return SweepJob(name=name, hardware=label, points=pa.Table.from_pylist(rows, schema=probe.PROBE_POINT_SCHEMA),
                    workload=workload, config=config, sweep_fingerprint=fp,
                    hardware_fingerprint=fingerprint_of(dict(resources)))


def remove_markers(job: SweepJob) -> None:
    """Remove the folder of "once" markers of a probe ``job``, as this host sees it (the
    workers of a cluster on other hosts keep theirs in their own temp folders)."""
    shutil.rmtree(job.workload.context.marker_dir, ignore_errors=True)
