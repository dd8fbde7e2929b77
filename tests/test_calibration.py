"""`commscale calibrate` end to end on the CPU (real layer steps, real Ray, real lake),
then `commscale run calibration=...` projecting with what it fitted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.query import frame
from sweeps.lake import Lake
from tasks.model.projection.operators import OP_CLASSES

pytestmark = [pytest.mark.ray, pytest.mark.slow]

COMMSCALE = str(Path(sys.executable).with_name("commscale"))

#: A calibration small enough for a test: 7 fitted configurations, one held out. Its stability
#: thresholds no machine misses: this test is about the pipeline, not about the machine's noise
#: (tests/tasks/measure/test_stability.py tests the rule).
TINY = ["calibration=cpu", "calibration.baseline.h=128", "calibration.baseline.heads=2",
        "calibration.baseline.sl=64", "calibration.baseline.b=1", "calibration.baseline.tp=1",
        "calibration.vary.sl=[32,128]", "calibration.vary.b=[2]", "calibration.vary.h=[64,256]",
        "calibration.vary.tp=[2]", "calibration.held_out=[{h: 192, heads: 3, sl: 96, b: 1, tp: 1}]",
        "calibration.warmup=1", "calibration.steps=2", "calibration.plain_repeats=3", "calibration.judged_from_ms=0",
        "calibration.max_drift=1000", "calibration.max_excess=1000",
        "calibration.threads=2"]  # each measurement asks for 2 CPUs: what --num-cpus 2 offers on any machine
SWEEP = ["sweep=smoke", "sweep.h=[128,1024]", "sweep.sl=[64]", "sweep.b=[1]", "sweep.tp=[1,2]", "sweep.head_dim=64",
         "sweep.highlights=[]"]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.run([COMMSCALE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_calibrate_measures_fits_judges_and_projects(tmp_path):
    lake_dir = str(tmp_path / "lake")
    first = _run("calibrate", *TINY, "--lake", lake_dir, "--num-cpus", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "8 configurations, 8 measured, 0 already in the lake" in first.stdout
    assert "held-out configurations" in first.stdout and "End to end over 1 judged" in first.stdout

    lake = Lake(lake_dir)
    baseline = frame(lake, "SELECT role, status FROM baseline")
    assert sorted(baseline["role"]) == ["baseline"] + ["held_out"] + ["variation"] * 6
    assert set(baseline["status"]) == {"ok"}
    models = frame(lake, "SELECT op_class, alpha_s, beta_s FROM opmodel")
    assert set(models["op_class"]) == set(OP_CLASSES) | {"unattributed"}
    accuracy = frame(lake, "SELECT op_class, measured_s, projected_s, h FROM accuracy")
    assert set(accuracy["h"]) == {192} and "step" in set(accuracy["op_class"])
    assert (accuracy["measured_s"] > 0).all() and (accuracy["projected_s"] > 0).all()

    again = _run("calibrate", *TINY, "--lake", lake_dir, "--num-cpus", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 measured, 8 already in the lake" in again.stdout
    assert len(frame(lake, "SELECT key FROM opmodel")) == len(models)  # the same fit is not stored twice

    run = _run("run", *SWEEP, "calibration=cpu", "--lake", lake_dir, "--num-cpus", "2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "compute from measured:cpu@" in run.stdout
    rows = frame(lake, "SELECT h, tp, calibration, extrapolated, step_time_s, step_time_low_s, step_time_high_s "
                       "FROM projection WHERE calibration LIKE 'measured:%'")
    assert len(rows) == 2 * 2 * 2  # h x tp x m
    assert ((rows["step_time_low_s"] < rows["step_time_s"]) & (rows["step_time_s"] < rows["step_time_high_s"])).all()
    # Measured: H from 64 to 256, TP 1 to 2; H = 1024 lies outside.
    assert rows.groupby("h")["extrapolated"].all().to_dict() == {128: False, 1024: True}


def test_a_calibration_whose_measurements_stay_unstable_is_reported_and_not_fitted(tmp_path):
    # No two rounds' fastest steps are alike: a 1e-9 drift threshold makes every measurement unstable.
    lake_dir = str(tmp_path / "lake")
    done = _run("calibrate", *TINY, "calibration.max_drift=1e-9", "calibration.remeasure=0", "--lake", lake_dir,
                "--num-cpus", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "8 configurations, 8 measured, 0 already in the lake, 8 unstable" in done.stdout
    assert "unstable baseline (H=128, SL=64, B=1, TP=1), not fitted" not in done.stdout
    assert "unstable variation, sl varied (H=128, SL=32, B=1, TP=1), fitted with the fastest" in done.stdout
    assert "Not fitted: no measurement stable (7 of 7 fit configurations measured, every one unstable)" \
        in done.stdout
    lake = Lake(lake_dir)
    baseline = frame(lake, "SELECT status, reason, attempts, plain_step_s FROM baseline")
    assert set(baseline["status"]) == {"unstable"} and set(baseline["attempts"]) == {1}
    assert baseline["reason"].str.startswith("unstable after 1 measurement: fastest step not reproduced").all()
    assert (baseline["plain_step_s"] > 0).all()  # measured, and kept with the reason
    assert frame(lake, "SELECT count(*) AS n FROM opmodel")["n"].iloc[0] == 0


def test_a_held_out_configuration_that_is_also_fitted_is_refused_before_any_work(tmp_path):
    lake_dir = tmp_path / "lake"
    done = _run("calibrate", *TINY, "calibration.held_out=[{h: 128, heads: 2, sl: 64, b: 1, tp: 1}]",
                "--lake", str(lake_dir), cwd=tmp_path)
    assert done.returncode == 2
    assert "calibration.held_out[0]" in done.stderr and "must stay out of the fit" in done.stderr
    assert not lake_dir.exists()


def test_projecting_with_a_calibration_the_lake_lacks_says_how_to_make_it(tmp_path):
    done = _run("run", *SWEEP, "calibration=cpu", "--lake", str(tmp_path / "lake"), cwd=tmp_path)
    assert done.returncode == 2
    assert "commscale calibrate calibration=cpu" in done.stderr


#: The H200 calibration's measurements, kept as scripts/device_check.py wrote them on the GPU machine.
H200 = Path(__file__).resolve().parents[1] / "conf/data/device/h200-2026-11-27/run2/baseline.parquet"


def test_measurements_kept_from_a_gpu_are_fitted_judged_and_projected_with_here(tmp_path):
    """The H200's calibration, measured by scripts/device_check.py on a GPU machine without Ray and
    kept in the repository, gives here the figures it gave there, and a projection uses it."""
    lake = tmp_path / "lake"
    done = _run("calibrate", "calibration=h200", "--measured", str(H200), "--lake", str(lake), "--no-report",
                cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "24 configurations read" in done.stdout and "on NVIDIA H200" in done.stdout
    assert "median |error| 4.7%, worst 5.8%" in done.stdout
    from sweeps.calibrate import load_calibration

    assert load_calibration(Lake(str(lake)), "h200").name.startswith("measured:h200@")
    again = _run("calibrate", "calibration=h200", "--measured", str(H200), "--lake", str(lake), "--no-report",
                 cwd=tmp_path)
    assert again.returncode == 0 and len(frame(Lake(str(lake)), "SELECT * FROM baseline")) == 24  # nothing doubled


def test_measurements_that_are_not_the_calibrations_are_refused_before_the_lake_is_opened(tmp_path):
    import pyarrow.parquet as pq

    short = tmp_path / "short.parquet"
    pq.write_table(pq.read_table(H200).slice(1), short)
    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(H200).drop_columns(["plain_step_s"]), bare)
    cases = [(["calibration=cpu", "--measured", str(H200)], "not of calibration=cpu"),
             (["calibration=h200", "--measured", str(tmp_path / "none.parquet")], "cannot be read as Parquet"),
             (["calibration=h200", "--measured", str(short)], "other configurations than calibration h200's 24"),
             (["calibration=h200", "--measured", str(bare)], "lacks the baseline column(s) plain_step_s")]
    for args, why in cases:
        done = _run("calibrate", *args, "--lake", str(tmp_path / "lake"), cwd=tmp_path)
        assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert not (tmp_path / "lake").exists()
