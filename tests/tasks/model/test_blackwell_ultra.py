"""Blackwell Ultra (``b300``, the 8-GPU DGX/HGX B300 node; ``gb300``, a GPU of a GB300 NVL72
rack): each figure follows from the rows its source names (conf/data/accelerators.csv and
gemm_efficiency.csv), what is assumed says so, and Megatron-Bridge's published runs on them
are priced."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from conf import CONF_DIR
from sweeps.jobs.validation import load_profiles
from tasks.model.kernels import roofline
from tasks.model.kernels.gemm_published import predict_row, read_gemm_rows
from tasks.model.kernels.sustained import power_scale, sustained_basis, training_device
from tasks.validation.predict_runs import find_profile
from tasks.validation.runs import read_runs
from tasks.validation.validate import validate_runs

DATA = CONF_DIR / "data"
ACCELERATORS = {r["accelerator"]: r for r in csv.DictReader((DATA / "accelerators.csv").open(encoding="utf-8"))}
MAMF = {(r.gpu, r.dtype): r for r in read_gemm_rows(DATA / "gemm_efficiency.csv")}
B200_MSMF = {r["dtype"]: float(r["msmf_tflops"])
             for r in csv.DictReader((DATA / "gemm_sustained.csv").open(encoding="utf-8")) if r["gpu"] == "B200-SXM"}
PROFILES = load_profiles()


@pytest.mark.parametrize("name, row", [("b300", "B300-SXM"), ("gb300", "GB300-per-GPU")])
def test_datasheet_figures_are_the_accelerators_row(name, row):
    hw, data = PROFILES[name], ACCELERATORS[row]
    assert (hw.peak_tflops, hw.peak_fp8_tflops) == (float(data["dense_bf16_fp16_tflops"]),
                                                    float(data["dense_fp8_tflops"]))
    assert (hw.hbm_gb, hw.hbm_tbps) == (float(data["hbm_gb"]), float(data["hbm_tbps"]))
    assert hw.intra_node.bandwidth_GBps == float(data["scaleup_uni_GBps"])
    assert hw.inter_node.bandwidth_GBps == float(data["scaleout_per_gpu_Gbps"]) / 8.0 == 100.0
    assert hw.compute_units == 160


@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_the_gemm_law_gives_b300s_measured_burst_on_both_parts(dtype):
    """b300's ceiling is its MAMF row over its peak and its tile ceiling is fitted to that row;
    gb300, the same chip with no measurement of its own, bursts at that rate too (its
    fractions are of a higher peak)."""
    row, b300, gb300 = MAMF[("B300-SXM", dtype)], PROFILES["b300"], PROFILES["gb300"]
    for hw in (b300, gb300):
        peak = roofline.peak_flops(hw, dtype) / 1e12
        assert hw.gemm_ceiling[dtype] * peak == pytest.approx(row.tflops, rel=2e-4)
        assert predict_row(row, hw)[0] == pytest.approx(row.tflops, rel=5e-4)
    assert gb300.gemm_tile_ceiling[dtype] == pytest.approx(b300.gemm_tile_ceiling[dtype] * (
        roofline.peak_flops(b300, dtype) / roofline.peak_flops(gb300, dtype)), abs=1e-4)
    assert gb300.source_is_assumption(f"gemm_ceiling.{dtype}") and not b300.source_is_assumption(
        f"gemm_ceiling.{dtype}")


@pytest.mark.parametrize("name, watts", [("b300", 1100.0), ("gb300", 1400.0)])
@pytest.mark.parametrize("dtype", ["bf16", "fp8"])
def test_training_runs_at_b200s_sustained_rate_moved_to_the_parts_power_limit(name, watts, dtype):
    """No Blackwell Ultra sustained measurement: the B200's MSMF at 1,000 W, moved to the
    part's limit by the power law (an assumption, so named), and never above the burst."""
    hw = PROFILES[name]
    assert (hw.tdp_w, hw.gemm_sustained_w) == (watts, 1000.0)
    sustained = roofline.peak_flops(training_device(hw), dtype) / 1e12 * hw.gemm_ceiling[dtype]
    assert sustained == pytest.approx(B200_MSMF[dtype] * power_scale(hw), rel=2e-4)
    assert 1.0 < power_scale(hw) and sustained < MAMF[("B300-SXM", dtype)].tflops
    assert sustained_basis(hw, dtype) == "assumed"


def test_their_names_call_them_and_no_one_elses():
    called = {name: find_profile(name, PROFILES).name for name in
              ("B300", "DGX-B300", "B300-SXM", "GB300", "DGX-GB300", "B200", "DGX-GB200", "GB200")}
    assert called == {"B300": "b300", "DGX-B300": "b300", "B300-SXM": "b300", "GB300": "gb300",
                      "DGX-GB300": "gb300", "B200": "b200", "DGX-GB200": "gb200", "GB200": "gb200"}


def test_every_published_mixture_of_experts_run_is_priced_those_on_blackwell_ultra_too(tmp_path):
    out = tmp_path / "runs.csv"
    subprocess.run([sys.executable, str(CONF_DIR.parent / "scripts" / "moe_runs_to_runs.py"), "--out", str(out)],
                   check=True, capture_output=True)
    source = list(csv.DictReader((DATA / "moe_runs.csv").open(encoding="utf-8")))
    assert out.read_text(encoding="utf-8") == (DATA / "moe_bridge_runs.csv").read_text(encoding="utf-8")
    derived = list(csv.DictReader(out.open(encoding="utf-8")))
    assert len(derived) == len(source) and [r["hw"] for r in derived] == [r["hw"] for r in source]
    ultra = [r for r in read_runs(out, skipped=[]) if r.hw in ("B300", "GB300")]
    assert len(ultra) >= 50
    records = validate_runs(ultra, PROFILES)
    assert len(records) == len(ultra) and {rec.hardware for rec in records} == {"b300", "gb300"}
