"""A changed config adds a version beside the old one; ``--restart`` removes exactly the rows
of the version it restarts on its hardware, says how many first, and leaves every other
version's, hardware's and sweep's rows alone."""

from __future__ import annotations

import io

import pyarrow as pa
from rich.console import Console

from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Workload
from sweeps.lake import Lake
from sweeps.lake.kinds import FAILURE, PROBE
from sweeps.run import _check_manifest


def _job(hardware: str, fingerprint: str) -> SweepJob:
    workload = Workload(kind=PROBE, body=lambda points, context: points, context=None, schema=pa.schema([]),
                        schema_version=1)
    return SweepJob(name="table2", hardware=hardware, points=pa.table({"key": pa.array([], pa.string())}),
                    workload=workload, config={"grid": fingerprint}, sweep_fingerprint=fingerprint,
                    hardware_fingerprint=hardware)


def _fill(lake: Lake, sweep: str, hardware: str, rows: int, fingerprint: str) -> None:
    """A manifest as commscale before sweep versions wrote it, then rows without a version."""
    keys = [f"{sweep}-{hardware}-{i}" for i in range(rows)]
    lake.record_sweep({"sweep": sweep, "hardware": hardware, "kind": PROBE, "planned": rows,
                       "sweep_fingerprint": fingerprint, "hardware_fingerprint": hardware,
                       "config": {"grid": fingerprint}})
    lake.commit(PROBE, {"sweep": sweep, "hardware": hardware}, pa.table({"key": keys, "status": ["ok"] * rows}))


def _rows(lake: Lake, sweep: str, hardware: str) -> int:
    return lake.partition_rows(PROBE, {"sweep": sweep, "hardware": hardware})


def test_a_changed_config_adds_a_version_and_restart_removes_only_that_version_here(tmp_path):
    lake = Lake(str(tmp_path))
    lake.ensure_writable()
    _fill(lake, "table2", "mi210x4", 5, "old")
    _fill(lake, "table2", "h100", 7, "old")
    _fill(lake, "other", "mi210x4", 3, "old")
    lake.commit(FAILURE, {"sweep": "table2", "hardware": "mi210x4"}, pa.table({"key": ["f1", "f2"]}))
    new = _job("mi210x4", "new")
    said = io.StringIO()
    assert not _check_manifest(lake, new, restart=False, console=Console(file=said, width=300))
    assert (f"adding version {new.version}" in said.getvalue()
            and "The 5 rows of earlier versions stay" in said.getvalue())
    assert _rows(lake, "table2", "mi210x4") == 5
    lake.record_sweep({"sweep": "table2", "hardware": "mi210x4", "kind": PROBE, "planned": 2,
                       "sweep_version": new.version, "sweep_fingerprint": "new", "hardware_fingerprint": "mi210x4"})
    lake.commit(PROBE, new.partition, pa.table({"key": ["table2-mi210x4-0", "n1"], "status": ["ok"] * 2}),
                sweep_version=new.version)  # a key of the old version is a row of the new one too
    assert _rows(lake, "table2", "mi210x4") == 7
    said = io.StringIO()
    assert _check_manifest(lake, new, restart=True, console=Console(file=said, width=300))
    assert f"removing 2 probe rows (and 0 failure rows) of sweep table2 version {new.version} on mi210x4" \
        in said.getvalue()
    assert _rows(lake, "table2", "mi210x4") == 5, "the old version's rows stay"
    assert _rows(lake, "table2", "h100") == 7 and _rows(lake, "other", "mi210x4") == 3
    assert lake.partition_rows(FAILURE, {"sweep": "table2", "hardware": "mi210x4"}) == 2
    old = _job("mi210x4", "old")
    said = io.StringIO()
    assert _check_manifest(lake, old, restart=True, console=Console(file=said, width=300))
    assert f"removing 5 probe rows (and 2 failure rows) of sweep table2 version {old.version}" in said.getvalue()
    assert _rows(lake, "table2", "mi210x4") == 0 and _rows(lake, "table2", "h100") == 7
