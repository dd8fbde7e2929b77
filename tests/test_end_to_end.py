"""`commscale run` end to end against a real embedded Ray, then read back by DuckDB."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from sweeps.config import load_run_config
from sweeps.jobs.projection import plan_points

pytestmark = [pytest.mark.ray, pytest.mark.slow]

COMMSCALE = str(Path(sys.executable).with_name("commscale"))


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([COMMSCALE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_smoke_sweep_lands_every_point_once_and_a_rerun_projects_nothing(tmp_path):
    lake = tmp_path / "lake"
    expected_keys = set(plan_points(load_run_config(["sweep=smoke"])).points.column("key").to_pylist())

    first = _run("run", "sweep=smoke", "--lake", str(lake), "--num-cpus", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"{len(expected_keys)} points, {len(expected_keys)} new, 0 already in the lake" in first.stdout
    assert "auth: token" in first.stdout
    assert str(lake) in first.stdout and "commscale query" in first.stdout

    glob = f"{lake}/kind=projection/**/*.parquet"
    keys = [k for (k,) in duckdb.sql(f"SELECT key FROM read_parquet('{glob}', hive_partitioning = true)").fetchall()]
    assert len(keys) == len(set(keys)) == len(expected_keys)
    assert set(keys) == expected_keys
    files_after_first = sorted(lake.rglob("*.parquet"))

    second = _run("run", "sweep=smoke", "--lake", str(lake), cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert f"0 new, {len(expected_keys)} already in the lake" in second.stdout
    assert sorted(lake.rglob("*.parquet")) == files_after_first

    summary = _run("query", "SELECT count(*) AS n, count(DISTINCT key) AS k FROM projection", "--lake", str(lake),
                   "--format", "csv", cwd=tmp_path)
    assert summary.returncode == 0, summary.stderr
    assert summary.stdout.splitlines()[1] == f"{len(expected_keys)},{len(expected_keys)}"


def test_overrides_reach_the_rows(tmp_path):
    lake = tmp_path / "lake"
    result = _run("run", "sweep=smoke", "hardware=h100", "sweep.tp=[8]", "sweep.flop_vs_bw=[2.0]",
                  "sweep.highlights=[]", "--lake", str(lake), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = duckdb.sql(
        f"SELECT DISTINCT hardware, tp, flop_vs_bw FROM read_parquet('{lake}/**/*.parquet', hive_partitioning = true)"
    ).fetchall()
    assert rows == [("h100", 8, 2.0)]
