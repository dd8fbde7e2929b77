"""``commscale limits``: a preset of one's own run end to end on the embedded Ray (rows in the
lake, read back by DuckDB, a second run served from the lake), its JSON naming each
scenario's thresholds, and bad input refused (exit 2, the field named, no lake made)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.query import query
from sweeps.cli import main
from sweeps.config.scale_limits import flop_grid, load_limits
from sweeps.lake import Lake

COMMSCALE = str(Path(sys.executable).with_name("commscale"))

#: A small question: a 2,048-token family from 1e21 to 1e22 FLOP in 30 days, two scenarios.
TINY = """name: tiny
hardware: h100
stack: megatron-core-2024
kernel_launch_us: 4.5
host_launch_us: 0.0
duration_days: 30
flop_start: 1.0e+21
flop_stop: 1.0e+22
points_per_decade: 1
max_devices: 1048576
family:
  seq_len: 2048
space:
  tp: [1, 2, 4, 8]
  pp: [1, 2, 4]
  micro_batch: [1, 2]
  schedule: [1f1b]
  zero: [zero1, fsdp]
  sequence_parallel: [true]
  recompute: [none, full]
scenarios:
  baseline: {}
  latency_10x_lower:
    latency_factor: 10.0
"""


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


@pytest.fixture
def tiny(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(TINY)
    return path


def test_the_default_preset_states_the_papers_question():
    setup = load_limits([])
    assert set(setup.scenarios) == {"baseline", "latency_10x_lower", "batch_10x", "sparse"}
    assert setup.hardware.kernel_launch_us == 4.5 and setup.stack.host_launch_us == 0.0
    assert setup.scenarios["latency_10x_lower"].hardware.kernel_launch_us == pytest.approx(0.45)
    assert setup.scenarios["batch_10x"].family.batch_scale == 10.0
    sparse = setup.scenarios["sparse"]
    assert (sparse.family.experts, sparse.family.topk, sparse.space.ep) == (64, 8, [1, 8, 64])
    assert setup.scenarios["baseline"].space.ep == [1] and setup.scenarios["baseline"].family.experts == 0
    grid = flop_grid(setup.spec)
    assert grid[0] == pytest.approx(1e24) and grid[-1] == pytest.approx(1e33) and len(grid) == 19


@pytest.mark.ray
def test_limits_runs_on_the_embedded_ray_and_prints_each_scenarios_thresholds(tmp_path, tiny):
    lake = tmp_path / "lake"
    args = [COMMSCALE, "limits", str(tiny), "--lake", str(lake), "--num-cpus", "1", "--format", "json"]
    result = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert list(summary["scenarios"]) == ["baseline", "latency_10x_lower"]
    for scenario in summary["scenarios"].values():
        assert {"utilization_drop_flop", "latency_wall_flop", "latency_floor_wall_flop",
                "plateau_utilization"} <= set(scenario)
        assert [p["status"] for p in scenario["points"]] == ["ok", "ok"] and scenario["plateau_utilization"] > 0
        assert all(0 < p["latency_floor_days"] < p["run_days"] for p in scenario["points"])
    rows = query(Lake(str(lake)), "SELECT scenario, count(*) AS n, max(utilization) AS best FROM limits "
                                  "GROUP BY scenario ORDER BY scenario").to_pylist()
    assert [(r["scenario"], r["n"]) for r in rows] == [("baseline", 2), ("latency_10x_lower", 2)]
    again = subprocess.run(args[:-2], env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "4 points, 0 new, 4 already in the lake" in again.stdout


@pytest.mark.parametrize("override, field", [
    ("duration_days=-1", "limits.duration_days"),
    ("scenarios.baseline.latency_factor=0", "limits.scenarios.baseline.latency_factor"),
    ("flop_stop=1e20", "limits.flop_stop"),
    ("space.recompute=[sometimes]", "limits.space.recompute"),
    ("family.batch_exponent=nan", "limits.family.batch_exponent"),
    ("hardware.power_limit_w=100", "hardware.power_limit_w"),
    ("scenarios.baseline.experts=8", "limits.scenarios.baseline.topk"),
])
def test_bad_input_exits_2_naming_the_field_before_any_lake_is_made(tmp_path, tiny, override, field):
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["limits", str(tiny), override, "--lake", str(lake)])
    assert result.exit_code == 2, result.output
    assert field in result.output and len(result.output.strip().splitlines()) == 1
    assert not lake.exists()
