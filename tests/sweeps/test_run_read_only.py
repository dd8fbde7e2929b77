"""A sweep the lake holds whole runs against a lake it cannot write: nothing to compute,
nothing to write, so a read-only lake (a shared copy, a snapshot) serves it. A sweep with
points to run still refuses, in one line, before any work."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Workload
from sweeps.lake import Lake
from sweeps.lake.kinds import PROBE
from sweeps.errors import LakeError
from sweeps.run import run_job


class ReadOnlyHandler(pafs.FileSystemHandler):
    """The local filesystem, read-only: every write raises ``PermissionError``, as a
    read-only mount does (directory permissions do not stop root, so chmod cannot stand in)."""

    def __init__(self) -> None:
        self.local = pafs.LocalFileSystem()

    def get_type_name(self) -> str:
        return "read-only-local"

    def equals(self, other) -> bool:
        return isinstance(other, ReadOnlyHandler)

    def normalize_path(self, path: str) -> str:
        return self.local.normalize_path(path)

    def get_file_info(self, paths):
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector):
        return self.local.get_file_info(selector)

    def open_input_stream(self, path: str):
        return self.local.open_input_stream(path)

    def open_input_file(self, path: str):
        return self.local.open_input_file(path)

    def _refuse(self, *args, **kwargs):
        raise PermissionError(f"[Errno 30] Read-only file system: {args[0] if args else ''}")

    create_dir = delete_dir = delete_dir_contents = delete_file = move = copy_file = _refuse
    open_output_stream = open_append_stream = _refuse

    def delete_root_dir_contents(self) -> None:
        self._refuse("/")


def _job(keys) -> SweepJob:
    workload = Workload(kind=PROBE, body=lambda points, context: points, context=None, schema=pa.schema([]),
                        schema_version=1)
    return SweepJob(name="stored", hardware="h", points=pa.table({"key": pa.array(keys, pa.string())}),
                    workload=workload, config={"grid": "g"}, sweep_fingerprint="g", hardware_fingerprint="h")


def _read_only(root) -> Lake:
    lake = Lake(str(root))
    lake.fs = pafs.PyFileSystem(ReadOnlyHandler())
    return lake


def test_a_stored_sweep_runs_against_a_read_only_lake(tmp_path):
    job = _job(["a", "b", "c"])
    writable = Lake(str(tmp_path / "lake"))
    writable.ensure_writable()
    writable.commit(PROBE, job.partition, pa.table({"key": ["a", "b", "c"], "status": ["ok"] * 3}),
                    sweep_version=job.version)
    first = run_job(job, writable)  # records the sweep; every point is stored, so no Ray starts
    assert (first.planned, first.cached, first.committed) == (3, 3, 0)

    again = run_job(job, _read_only(tmp_path / "lake"))
    assert (again.planned, again.cached, again.committed) == (3, 3, 0)
    assert again.where == "nothing to run: every point is in the lake"


def test_a_sweep_with_points_to_run_refuses_a_read_only_lake_before_any_work(tmp_path):
    job = _job(["a", "b"])
    Lake(str(tmp_path / "lake")).ensure_writable()
    with pytest.raises(LakeError, match="not writable"):
        run_job(job, _read_only(tmp_path / "lake"))
