"""``--restart`` removes exactly the rows of the sweep it restarts on its hardware, says how
many first, and leaves every other hardware's and every other sweep's rows alone."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from rich.console import Console

from sweeps.errors import UserError
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
    keys = [f"{sweep}-{hardware}-{i}" for i in range(rows)]
    lake.commit(PROBE, {"sweep": sweep, "hardware": hardware}, pa.table({"key": keys, "status": ["ok"] * rows}))
    lake.record_sweep({"sweep": sweep, "hardware": hardware, "kind": PROBE, "planned": rows,
                       "sweep_fingerprint": fingerprint, "hardware_fingerprint": hardware, "config": {"grid": fingerprint}})


def _rows(lake: Lake, sweep: str, hardware: str) -> int:
    return lake.partition_rows(PROBE, {"sweep": sweep, "hardware": hardware})


def test_restart_removes_only_its_own_hardware_and_says_how_many(tmp_path):
    lake = Lake(str(tmp_path))
    _fill(lake, "table2", "mi210x4", 5, "old")
    _fill(lake, "table2", "h100", 7, "old")
    _fill(lake, "other", "mi210x4", 3, "old")
    lake.commit(FAILURE, {"sweep": "table2", "hardware": "mi210x4"}, pa.table({"key": ["f1", "f2"]}))
    with pytest.raises(UserError, match="--restart"):
        _check_manifest(lake, _job("mi210x4", "new"), restart=False, console=Console(file=io.StringIO()))
    assert _rows(lake, "table2", "mi210x4") == 5
    said = io.StringIO()
    assert _check_manifest(lake, _job("mi210x4", "new"), restart=True, console=Console(file=said, width=300))
    assert "removing 5 probe rows (and 2 failure rows) of sweep table2 on mi210x4" in said.getvalue()
    assert _rows(lake, "table2", "mi210x4") == 0
    assert _rows(lake, "table2", "h100") == 7 and _rows(lake, "other", "mi210x4") == 3
    assert lake.partition_rows(FAILURE, {"sweep": "table2", "hardware": "mi210x4"}) == 0
