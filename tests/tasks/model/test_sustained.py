"""Sustained device rates: each profile's figure traced to a sustained-matmul measurement
(conf/data/gemm_sustained.csv) or marked an assumption, and a training step's compute run
at it while short benchmarks keep the burst ceiling."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from conf import CONF_DIR
from sweeps.config import load_preset
from sweeps.config.specs import validate_hardware
from sweeps.errors import ConfigError
from tasks.model.kernels import roofline
from tasks.model.kernels.sustained import sustained_basis, sustained_ratio, training_device
from tasks.model.projection.grid import layer_times
from tasks.model.step.parts import layer_parts
from tasks.model.step.plan import StepContext
from tasks.model.terms.layout import Layout
from tasks.model.terms.specs import TransformerModel
from tasks.model.terms.stack import Stack
from tasks.validation.predict_runs import find_profile
from tasks.validation.runs import read_runs
from tasks.validation.validate import SUSTAINED_WORDS, validate_runs

SUSTAINED_ROWS = list(csv.DictReader((CONF_DIR / "data" / "gemm_sustained.csv").open(encoding="utf-8")))
PROFILES = {p.stem: load_preset("hardware", p.stem) for p in Path(CONF_DIR / "hardware").glob("*.yaml")}


def test_every_sustained_figure_is_a_measured_rows_fraction_or_says_it_is_an_assumption():
    """A row's ``fitted_to`` names the profile figures it sets: each is MSMF / peak to four
    places. Every other ``gemm_sustained`` entry's source starts with "assumption"."""
    set_by_rows = {}
    for row in SUSTAINED_ROWS:
        assert float(row["msmf_tflops"]) < float(row["mamf_tflops"]) < float(row["peak_tflops"])
        for figure in row["fitted_to"].split():
            profile, _, dtype = figure.split(".")
            set_by_rows[(profile, dtype)] = float(row["msmf_tflops"]) / float(row["peak_tflops"])
    assert set_by_rows
    for name, hw in PROFILES.items():
        for dtype, fraction in hw.gemm_sustained.items():
            if (name, dtype) in set_by_rows:
                assert fraction == pytest.approx(set_by_rows[(name, dtype)], abs=5e-5), (name, dtype)
                assert peak_of(hw, dtype) == pytest.approx(float(_row(name, dtype)["peak_tflops"]))
                assert sustained_basis(hw, dtype) == "measured"
            else:
                assert sustained_basis(hw, dtype) == "assumed", (name, dtype)


def peak_of(hw, dtype: str) -> float:
    return roofline.peak_flops(hw, dtype) / 1e12


def _row(profile: str, dtype: str):
    return next(r for r in SUSTAINED_ROWS if f"{profile}.gemm_sustained.{dtype}" in r["fitted_to"].split())


def test_the_training_device_runs_the_best_gemm_at_the_sustained_rate_and_leaves_memory_alone():
    """On H200 the measured MSMF shape runs at no more than the sustained 708.5 TFLOP/s in
    training, while the short-run law keeps its burst figure; a memory-bound kernel takes
    the same time on both; a profile with no sustained figure is its own training device."""
    h200 = PROFILES["h200"]
    device = training_device(h200)
    m, n, k = (int(x) for x in _row("h200", "bf16")["msmf_shape_mnk"].split("x"))
    burst, sustained = (float(roofline.gemm_tflops(m, n, k, hw)) for hw in (h200, device))
    assert sustained <= 708.5 * 1.0001 and sustained == pytest.approx(burst * sustained_ratio(h200), rel=1e-5)
    assert burst > 760.0
    assert roofline.memory_bound_time(1e9, device) == roofline.memory_bound_time(1e9, h200)
    assert training_device(PROFILES["a100-80gb"]) is PROFILES["a100-80gb"]
    assert sustained_ratio(PROFILES["a100-80gb"]) == 1.0


def test_a_training_steps_gemms_and_the_studys_layer_slow_by_the_sustained_ratio(h100):
    """The step model's linear GEMMs of a large layer take 1 / ``sustained_ratio`` of the
    burst profile's time on H100 (0.892 in bf16); the per-layer projection's GEMMs (the
    study's materialised attention among them, partly memory-bound) take longer by at most
    that much."""
    burst = dataclasses.replace(h100, gemm_sustained={})
    model = TransformerModel(name="t", year=0, layers=8, hidden=8192, heads=64, ffn_hidden=32768, params_b=0.0,
                             seq_len=4096, architecture="decoder", vocab=0)
    layout = Layout(tp=1, pp=1, dp=1, micro_batch=1)
    flash = Stack(attention="flash")   # the layer's GEMMs are then its linear ones, all compute-bound
    times = [layer_parts(layout, StepContext(model, hw, devices=1, global_batch=1, stack=flash))["gemm_s"]
             for hw in (h100, burst)]
    assert times[0] / times[1] == pytest.approx(1.0 / sustained_ratio(h100), rel=1e-3)
    assert sustained_ratio(h100) == pytest.approx(0.7164 / 0.8033, rel=1e-4)
    grid = [layer_times(np.array([8192.0]), 64.0, 4096.0, 1.0, 1.0, 2.0, hw)[0][0] for hw in (h100, burst)]
    assert 1.05 < grid[0] / grid[1] <= 1.0 / sustained_ratio(h100) + 1e-6


@pytest.mark.parametrize("figures, field, why", [
    ({"bf16": 0.9}, "hardware.gemm_sustained.bf16", "is above gemm_ceiling 0.8033"),
    ({"int4": 0.5}, "hardware.gemm_sustained", "no dtype"),
    ({"bf16": 0.0}, "hardware.gemm_sustained.bf16", ""),
])
def test_a_sustained_figure_that_cannot_hold_is_refused_naming_it(h100, figures, field, why):
    with pytest.raises(ConfigError) as caught:
        validate_hardware(dataclasses.replace(h100, gemm_sustained=figures))
    assert caught.value.field == field and why in str(caught.value)


def test_validate_says_which_runs_rest_on_an_assumed_sustained_rate():
    """Each held-out run's detail names the basis of its device's sustained rate: the B200
    row measured, H100 and GB200 rows assumed (a sibling's measurement), A100 rows none."""
    runs = read_runs(CONF_DIR / "data" / "holdout_runs.csv")
    known = [r for r in runs if find_profile(r.hw, PROFILES) is not None]
    records = validate_runs(known, PROFILES)
    said = {}
    for run, record in zip(known, records, strict=True):
        words = [w for w in SUSTAINED_WORDS.values() if w in record.detail.split("; ")]
        assert len(words) == 1, record.detail
        said.setdefault(record.hardware, set()).add(words[0])
    assert said["b200"] == {SUSTAINED_WORDS["measured"]}
    assert said["h100"] == said["gb200"] == {SUSTAINED_WORDS["assumed"]}
    assert said["a100-80gb"] == {SUSTAINED_WORDS["none"]}


def test_the_h200_profile_prices_a_gemm_held_at_the_power_limit_as_an_h200_measured_it():
    """One H200 here (conf/data/device/h200-2026-11-27, run1: scripts/device_check.py) ran 8192^3
    bf16 products on random data for 40 s: 791.8 TFLOP/s in the first window, 668.4 sustained at
    its 700 W limit. Nothing was fitted to it: the profile's burst law and its sustained ratio
    (a published thermal-soak table) give the same figures within a few per cent."""
    import json

    run = json.loads((CONF_DIR / "data" / "device" / "h200-2026-11-27" / "run1" / "device_check.json").read_text())
    random_data = next(s for s in run["sustained"] if s["fill"] == "random")
    hw = PROFILES["h200"]

    def tflops(device) -> float:
        n = float(random_data["n"])
        return 2 * n**3 / float(roofline.gemm_kernel_time(n, n, n, 1.0, device, dtype="bf16")) / 1e12

    assert tflops(training_device(hw)) == pytest.approx(random_data["sustained_tflops"], rel=0.03)
    assert tflops(hw) == pytest.approx(random_data["first_tflops"], rel=0.07)
    assert random_data["sustained_watts"] > 0.95 * random_data["power_limit_w"]  # held at the limit


def test_a_power_capped_device_settles_lower_as_the_stated_law_has_it():
    """Below the datasheet's limit the sustained clock scales as the cube root of the power
    left beyond the static quarter (both assumptions, so the rate is "assumed"); at or above
    the limit nothing moves; a cap at or below the static part is refused naming the field."""
    from tasks.model.kernels.sustained import DVFS_EXPONENT, STATIC_POWER_SHARE, power_scale

    h100 = load_preset("hardware", "h100")
    assert h100.tdp_w == 700 and power_scale(h100) == 1.0
    at_limit = dataclasses.replace(h100, power_limit_w=700.0)
    assert training_device(at_limit).peak_tflops == training_device(h100).peak_tflops
    capped = dataclasses.replace(h100, power_limit_w=500.0)
    static = STATIC_POWER_SHARE * 700.0
    scale = ((500.0 - static) / (700.0 - static)) ** (1.0 / DVFS_EXPONENT)
    assert power_scale(capped) == pytest.approx(scale) and 0.8 < scale < 0.9
    assert training_device(capped).peak_tflops == pytest.approx(training_device(h100).peak_tflops * scale)
    assert training_device(capped).peak_fp8_tflops == pytest.approx(training_device(h100).peak_fp8_tflops * scale)
    assert sustained_basis(h100) == "assumed" and sustained_basis(load_preset("hardware", "b200")) == "measured"
    assert sustained_basis(dataclasses.replace(load_preset("hardware", "b200"), power_limit_w=800.0)) == "assumed"
    for limit, why in ((static, "at or below"), (100.0, "at or below")):
        with pytest.raises(ConfigError, match=why) as error:
            validate_hardware(dataclasses.replace(h100, power_limit_w=limit))
        assert error.value.field == "hardware.power_limit_w"
    with pytest.raises(ConfigError, match="needs hardware.tdp_w"):
        validate_hardware(dataclasses.replace(load_preset("hardware", "a100-80gb"), power_limit_w=300.0))


def test_a_siblings_figure_measured_at_a_lower_limit_settles_higher_by_the_same_law():
    """GB200 runs the B200 die at 1,200 W; its sustained figure is B200's MSMF, measured at
    1,000 W. Its compute runs at that rate times the stated law's scale from 1,000 to 1,200 W,
    with the static quarter of the measured board's limit: never B200's fraction of GB200's
    higher peak, which counts a boost clock a power-saturated device does not hold."""
    from tasks.model.kernels.sustained import DVFS_EXPONENT, STATIC_POWER_SHARE, power_scale

    gb200, b200 = PROFILES["gb200"], PROFILES["b200"]
    assert (gb200.tdp_w, gb200.gemm_sustained_w, b200.tdp_w) == (1200, 1000, 1000)
    static = STATIC_POWER_SHARE * 1000.0
    scale = ((1200.0 - static) / (1000.0 - static)) ** (1.0 / DVFS_EXPONENT)
    assert power_scale(gb200) == pytest.approx(scale) and 1.05 < scale < 1.10
    for dtype in ("bf16", "fp8"):
        b200_rate = peak_of(training_device(b200), dtype) * b200.gemm_ceiling[dtype]
        assert peak_of(gb200, dtype) * gb200.gemm_sustained[dtype] == pytest.approx(b200_rate, rel=1e-3)
        gb200_rate = peak_of(training_device(gb200), dtype) * gb200.gemm_ceiling[dtype]
        assert gb200_rate == pytest.approx(b200_rate * scale, rel=1e-3)
        assert gb200_rate < peak_of(gb200, dtype) * b200.gemm_sustained[dtype]  # below the old assumption
    assert sustained_basis(gb200) == "assumed"
    # Capped below the limit it was measured at, it settles below the sibling's rate.
    capped = dataclasses.replace(gb200, power_limit_w=900.0)
    assert power_scale(capped) == pytest.approx(((900.0 - static) / (1000.0 - static)) ** (1.0 / DVFS_EXPONENT))
    # A device sustains no more than its burst ceiling, whatever the law gives.
    hot = dataclasses.replace(gb200, gemm_sustained_w=300.0)
    assert peak_of(training_device(hot), "bf16") == pytest.approx(peak_of(gb200, "bf16"))
    with pytest.raises(ConfigError, match="needs hardware.tdp_w") as error:
        validate_hardware(dataclasses.replace(gb200, tdp_w=None))
    assert error.value.field == "hardware.gemm_sustained_w"
