"""``commscale codesign``: a small study run and resumed (its journal persists, its rows land in
the lake), its front printed as JSON, its full space far too large to enumerate, and bad
input refused (exit 2, the field named, no lake made)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from analysis.query import query
from sweeps.cli import main
from sweeps.config.codesign import MIN_FULL_POINTS, load_codesign
from sweeps.lake import Lake

SMALL = ["model=llama2-7b", "global_batch=256", "trials=60", "batch=20", "population=20",
         "knobs.devices=[64,128]", "knobs.domain=[8,16]", "knobs.scale_up=[1.0]", "knobs.scale_out=[0.5,1.0]",
         "knobs.hbm_gb=[80]", "knobs.flops=[1.0,2.0]", "space.tp=[1,2,4]", "space.pp=[1,2]", "space.micro_batch=[1]",
         "space.schedule=[1f1b]", "space.zero=[zero1,fsdp]", "space.recompute=[none]", "space.cp=[1]"]


def test_the_default_space_is_far_too_large_to_enumerate_and_its_reduced_one_is_not():
    setup = load_codesign([])
    assert setup.full_size >= MIN_FULL_POINTS
    assert setup.spec.reduced.knobs.size * setup.spec.reduced.space.size <= 10**5


def test_a_study_runs_resumes_and_lands_in_the_lake(tmp_path):
    lake = tmp_path / "lake"
    first = CliRunner().invoke(main, ["codesign", *SMALL, "--lake", str(lake), "--format", "json"])
    assert first.exit_code == 0, first.output
    summary = json.loads(first.output)
    assert summary["trials"] == 60 and 0 < summary["feasible"] <= 60 and summary["front"]
    steps = [p["step_time_s"] for p in summary["front"]]
    costs = [p["cost_usd"] for p in summary["front"]]
    assert steps == sorted(steps) and costs == sorted(costs, reverse=True)   # a front: faster costs more
    more = CliRunner().invoke(main, ["codesign", *[s if s != "trials=60" else "trials=80" for s in SMALL],
                                     "--lake", str(lake)])
    assert more.exit_code == 0, more.output
    assert "60 trials before, 20 now" in more.output
    (row,) = query(Lake(str(lake)), "SELECT count(*) AS n, count(DISTINCT trial) AS trials FROM codesign").to_pylist()
    assert row == {"n": 80, "trials": 80}


@pytest.mark.parametrize("override, field", [
    ("knobs.hbm_gb=[100]", "codesign.knobs.hbm_gb"),
    ("knobs.flops=[0]", "codesign.knobs.flops"),
    ("cost.die=-5", "codesign.cost.die"),
    ("batch=100000", "codesign.batch"),
    ("space.zero=[zero9]", "codesign.space.zero"),
    ("model.layers=0", "model.layers"),
])
def test_bad_input_exits_2_naming_the_field_before_any_lake_is_made(tmp_path, override, field):
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["codesign", override, "--lake", str(lake)])
    assert result.exit_code == 2, result.output
    assert field in result.output and len(result.output.strip().splitlines()) == 1
    assert not lake.exists()
