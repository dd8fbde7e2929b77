"""Sweep versions in the lake: each config of a sweep keeps its own rows, the plain view
serves the newest version of each sweep on each hardware, ``KIND_all_versions`` every one,
and entries written before versions existed belong to the version recorded before them."""

from __future__ import annotations

import pyarrow as pa

from sweeps.lake import Lake
from sweeps.lake.kinds import BASELINE, OPMODEL, PROBE, ROI
from sweeps.lake.versions import manifest_version, sweep_version
from sweeps.lake.views import query

PART = {"sweep": "s", "hardware": "h100"}


def _record(lake: Lake, fingerprint: str, *, with_version: bool = True, kind: str = PROBE) -> str:
    version = sweep_version(fingerprint, "hw")
    manifest = {"sweep": "s", "hardware": "h100", "kind": kind, "planned": 3, "sweep_fingerprint": fingerprint,
                "hardware_fingerprint": "hw", "config": {"grid": fingerprint}}
    lake.record_sweep({**manifest, "sweep_version": version} if with_version else manifest)
    return version


def _rows(keys, value: float) -> pa.Table:
    return pa.table({"key": keys, "status": ["ok"] * len(keys), "value": [value] * len(keys)})


def _lake(tmp_path) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    lake.ensure_writable()
    return lake


def test_each_version_keeps_its_rows_and_the_plain_view_serves_the_newest(tmp_path):
    lake = _lake(tmp_path)
    v1 = _record(lake, "tp=[8,16,32]")
    lake.commit(PROBE, PART, _rows(["a", "b", "c"], 1.0), sweep_version=v1)
    v2 = _record(lake, "tp=[8,16]")
    written = lake.commit(PROBE, PART, _rows(["a", "b"], 2.0), sweep_version=v2)
    assert written.rows_written == 2, "a key of another version is not a duplicate"
    assert lake.commit(PROBE, PART, _rows(["a"], 2.0), sweep_version=v2).rows_written == 0
    assert sorted(lake.key_array(PROBE, PART, sweep_version=v1).to_pylist()) == ["a", "b", "c"]
    newest = query(lake, "SELECT key, value, sweep_version FROM probe ORDER BY key").to_pylist()
    assert newest == [{"key": "a", "value": 2.0, "sweep_version": v2}, {"key": "b", "value": 2.0, "sweep_version": v2}]
    every = query(lake, "SELECT sweep_version, count(*) AS n FROM probe_all_versions GROUP BY 1 ORDER BY 1")
    assert dict(zip(*every.to_pydict().values())) == {v1: 3, v2: 2}
    assert [m["sweep_version"] for m in lake.sweep_versions()[("s", "h100")]] == [v1, v2]
    _record(lake, "tp=[8,16,32]")  # the first config run again is the newest again
    assert query(lake, "SELECT count(*) AS n FROM probe").column("n").to_pylist() == [3]
    assert [m["sweep_version"] for m in lake.sweep_versions()[("s", "h100")]] == [v2, v1]


def test_entries_written_before_versions_belong_to_the_manifest_before_them(tmp_path):
    lake = _lake(tmp_path)
    _record(lake, "old", with_version=False)
    lake.commit(PROBE, PART, _rows(["a", "b"], 1.0))  # no sweep_version, as before versions
    old = manifest_version(lake.sweeps()[("s", "h100")])
    assert old == sweep_version("old", "hw")
    assert sorted(lake.key_array(PROBE, PART, sweep_version=old).to_pylist()) == ["a", "b"]
    new = _record(lake, "new")
    lake.commit(PROBE, PART, _rows(["a"], 2.0), sweep_version=new)
    assert query(lake, "SELECT value FROM probe").column("value").to_pylist() == [2.0]
    again = Lake(lake.root_spec)  # a fresh reader replays the log to the same answer
    assert sorted(again.key_array(PROBE, PART, sweep_version=old).to_pylist()) == ["a", "b"]
    assert again.partition_rows(PROBE, PART, old) == 2 and again.partition_rows(PROBE, PART, new) == 1


def test_a_shared_kind_serves_every_versions_rows_and_measures_a_key_once(tmp_path):
    lake = _lake(tmp_path)
    v1 = _record(lake, "one", kind=ROI)
    lake.commit(ROI, PART, _rows(["gemm-1"], 1.0), sweep_version=v1)
    v2 = _record(lake, "two", kind=ROI)
    assert lake.commit(ROI, PART, _rows(["gemm-1", "gemm-2"], 2.0), sweep_version=v2).rows_written == 1
    served = query(lake, "SELECT key, sweep_version FROM roi ORDER BY key").to_pylist()
    assert served == [{"key": "gemm-1", "sweep_version": v1}, {"key": "gemm-2", "sweep_version": v2}]


def test_fits_committed_beside_a_sweep_stay_in_the_plain_view_after_a_new_version(tmp_path):
    """collective_fit, opmodel and accuracy rows are keyed by the measurements they come from
    and committed without a version: a later version of their sweep that measured nothing
    new left the plain view empty, though the fit was still the one projections use."""
    lake = _lake(tmp_path)
    _record(lake, "one", kind=BASELINE)
    lake.commit(OPMODEL, PART, _rows(["fit-a"], 1.0))
    assert query(lake, "SELECT count(*) AS n FROM opmodel").column("n").to_pylist() == [1]
    _record(lake, "two", kind=BASELINE)  # calibrate again with a changed preset: nothing new measured
    assert query(lake, "SELECT key FROM opmodel").column("key").to_pylist() == ["fit-a"]
