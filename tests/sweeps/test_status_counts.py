"""``commscale status`` counts what a version of a sweep would not run again as done: its
own rows of every status (unstable measurements too, which a resumed calibration keeps),
and, for a sweep whose measurements serve every sweep (``SweepJob.share_results``: ROI,
a search's --measure), the points the lake already held when the version was planned.

Every job here has all its points stored when it runs, so no Ray starts."""

from __future__ import annotations

import pyarrow as pa

from analysis.status import sweep_status
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Workload
from sweeps.lake import Lake
from sweeps.lake.kinds import BASELINE, ROI
from sweeps.run import run_job


def _job(kind: str, keys, fingerprint: str, *, shared: bool) -> SweepJob:
    workload = Workload(kind=kind, body=lambda points, context: points, context=None, schema=pa.schema([]),
                        schema_version=1)
    return SweepJob(name="s", hardware="h", points=pa.table({"key": pa.array(keys, pa.string())}), workload=workload,
                    config={"grid": fingerprint}, sweep_fingerprint=fingerprint, hardware_fingerprint="h",
                    share_results=shared)


def _commit(lake: Lake, job: SweepJob, keys, statuses) -> None:
    lake.commit(job.workload.kind, job.partition, pa.table({"key": keys, "status": statuses}),
                sweep_version=job.version)


def _counts(lake: Lake, job: SweepJob) -> dict:
    frame = sweep_status(lake, "s")
    (row,) = frame[frame["version"] == job.version].to_dict("records")
    return {k: row[k] for k in ("planned", "done", "ok", "unstable", "shared", "pending")}


def test_shared_measurements_of_an_earlier_version_are_done_for_a_later_one(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    first = _job(ROI, ["a", "b", "c"], "v1", shared=True)
    lake.ensure_writable()
    _commit(lake, first, ["a", "b", "c"], ["ok"] * 3)
    assert run_job(first, lake).cached == 3
    assert _counts(lake, first) == {"planned": 3, "done": 3, "ok": 3, "unstable": 0, "shared": 0, "pending": 0}

    # A changed config whose points the lake holds: it measures nothing new, and is done.
    same = _job(ROI, ["a", "b", "c"], "v2", shared=True)
    assert run_job(same, lake).cached == 3
    assert _counts(lake, same) == {"planned": 3, "done": 3, "ok": 0, "unstable": 0, "shared": 3, "pending": 0}

    # One new point, measured under the new version; the three shared ones are done too.
    more = _job(ROI, ["a", "b", "c", "d"], "v3", shared=True)
    _commit(lake, more, ["d"], ["ok"])
    assert run_job(more, lake).cached == 4
    assert _counts(lake, more) == {"planned": 4, "done": 4, "ok": 1, "unstable": 0, "shared": 3, "pending": 0}
    assert _counts(lake, first)["done"] == 3


def test_a_calibrations_unstable_measurements_are_counted_as_such(tmp_path):
    """They are stored results a resumed calibration does not measure again (``--restart``
    does): done, in a column of their own, so that done is the sum of its parts."""
    lake = Lake(str(tmp_path / "lake"))
    job = _job(BASELINE, ["a", "b", "c", "d"], "cal", shared=False)
    lake.ensure_writable()
    _commit(lake, job, ["a", "b", "c"], ["ok", "unstable", "unstable"])
    lake.record_sweep({"sweep": "s", "hardware": "h", "kind": BASELINE, "planned": 4, "sweep_version": job.version,
                       "sweep_fingerprint": "cal", "hardware_fingerprint": "h", "config": {"grid": "cal"}})
    assert _counts(lake, job) == {"planned": 4, "done": 3, "ok": 1, "unstable": 2, "shared": 0, "pending": 1}
