"""``commscale search --measure``: bad options refused before any work; on real Ray, the top
layouts' GEMMs and collectives measured on CPU workers, printed beside the projection, landed
as ``roi`` rows, and not measured again by a second run; ``--verify``, its former name, still
works for one release with a warning."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.query import query
from sweeps.cli import main
from sweeps.lake import Lake

COMMSCALE = str(Path(sys.executable).with_name("commscale"))
TINY_MODEL = """name: tiny
year: 2020
layers: 8
hidden: 256
heads: 8
ffn_hidden: 1024
params_b: 0.01
seq_len: 128
architecture: decoder
vocab: 1024
source: "a tiny model for tests"
"""


def _space(tmp_path: Path) -> list:
    model = tmp_path / "tiny.yaml"
    model.write_text(TINY_MODEL)
    return ["small", f"model={model}", "space.tp=[2,4]", "space.pp=[1,2]", "space.micro_batch=[1]",
            "space.schedule=[1f1b]", "space.zero=[none,zero3]", "space.recompute=[none]", "trials=8", "batch=4"]


@pytest.mark.parametrize("options, message", [
    (["--measure", "0"], "--measure=0"),
    (["--measure", "2", "--measure-device", "tpu"], "--measure-device='tpu'"),
    (["--measure", "2", "--measure-dtype", "int4"], "--measure-dtype='int4'"),
    (["--measure", "2", "--measure-world", "1"], "--measure-world=1"),
    (["--verify", "0"], "--measure=0"),
    (["--verify", "2", "--verify-dtype", "int4"], "--measure-dtype='int4'"),
])
def test_bad_measure_options_exit_2_before_any_work(tmp_path, options, message):
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["search", *_space(tmp_path), *options, "--lake", str(lake)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not lake.exists()


@pytest.mark.ray
@pytest.mark.slow
def test_measure_runs_the_top_layouts_once_and_prints_them_beside_the_projection(tmp_path):
    lake = tmp_path / "lake"
    args = [COMMSCALE, "search", *_space(tmp_path), "--measure", "2", "--lake", str(lake), "--num-cpus", "2"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=240)
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Projected vs measured" in first.stdout and "measured among 2 ranks" in " ".join(first.stdout.split())
    table = first.stdout.split("Projected vs measured")[1]
    rows = [line for line in table.splitlines() if line.startswith("│ tp")]
    assert len(rows) == 2, table
    for line in rows:
        cells = [c.strip() for c in line.strip("│").split("│")]
        assert all(float(c.replace(",", "")) > 0 for c in cells[1:4]), line  # GEMMs: projected, measured, ratio
        assert cells[5] != "-" and cells[8] != "-", line  # TP and DP measured
    roi = query(Lake(lake), "SELECT op, status FROM roi").to_pandas()
    assert len(roi) > 0 and (roi["status"] == "ok").all()
    assert {"gemm", "all_reduce"} <= set(roi["op"])
    deprecated = [a if a != "--measure" else "--verify" for a in args]
    again = subprocess.run(deprecated, env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "--verify is deprecated" in again.stderr and "use --measure" in again.stderr
    assert " 0 measured now" in again.stdout and "nothing to run" in again.stdout
    assert len(query(Lake(lake), "SELECT key FROM roi").to_pandas()) == len(roi)
