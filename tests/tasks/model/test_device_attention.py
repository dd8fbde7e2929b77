"""Fused attention on a device with its own measured cuDNN rows (GB200, NVIDIA's cuDNN
benchmark): the curve is the fit of those rows, a profile that names them is timed by them,
other masks and head widths keep their H100 relation, a name with no rows is refused, and
`validate` says which runs rest on a measured attention rate and which on an assumed one."""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import curve_fit

from conf import CONF_DIR
from sweeps.config import load_preset
from sweeps.config.specs import validate_hardware
from sweeps.errors import ConfigError
from tasks.model.kernels.attention import DEVICE_EFFICIENCY, attention_basis, fused_attention_times, fused_efficiency
from tasks.validation.predict_runs import find_profile
from tasks.validation.runs import read_runs
from tasks.validation.validate import ATTENTION_WORDS, validate_runs

ROOT = Path(__file__).resolve().parents[3]
GB200_PEAK_TFLOPS = 2500.0


def _gb200_rows(pass_: str):
    """(SL, fraction of GB200's dense bf16 peak) of the file's GB200 cuDNN rows of ``pass_``."""
    with open(ROOT / "conf" / "data" / "attention_kernels.csv", encoding="utf-8") as f:
        rows = [r for r in csv.reader(f)][1:]
    picked = [(float(r[3]), float(r[7]) / GB200_PEAK_TFLOPS) for r in rows
              if r[0] == "GB200" and r[4] == pass_ and r[6] == "cudnn" and r[2] == "128"]
    return (np.array(v) for v in zip(*sorted(picked), strict=True))


@pytest.mark.parametrize("pass_, name", [("fwd", "forward"), ("bwd", "backward")])
def test_gb200_curve_is_the_fit_of_its_rows_up_to_32k(pass_, name):
    sl, eff = _gb200_rows(name)
    fitted = sl <= 32768
    (e_max, sl_half), _ = curve_fit(lambda s, a, b: a * s / (s + b), sl[fitted], eff[fitted], p0=(0.6, 300.0))
    assert DEVICE_EFFICIENCY["GB200"][pass_] == (pytest.approx(e_max, abs=0.005), pytest.approx(sl_half, rel=0.05))
    own = fused_efficiency(pass_, True, sl, 128.0, "GB200")
    residual = own / eff - 1.0
    # the forward within 4 % from 1,024 tokens (512: 15 % over); the backward within 7 % but at 2,048
    inside = fitted & ((sl >= 1024) if pass_ == "fwd" else (sl != 2048))
    assert np.max(np.abs(residual[inside])) < (0.04 if pass_ == "fwd" else 0.07)
    assert np.max(np.abs(residual[fitted])) < 0.16
    # beyond the fit the measured rate falls and the curve does not: the curve is above it there
    assert np.all(residual[~fitted] > 0)


def test_a_profile_naming_its_rows_times_fused_attention_by_them():
    gb200 = load_preset("hardware", "gb200")
    assert gb200.attention_kernels == "GB200" and load_preset("hardware", "b200").attention_kernels == "GB200"
    reference = dataclasses.replace(gb200, attention_kernels=None)
    for head_dim in (64.0, 128.0):
        own = fused_attention_times(8192.0, 4096.0, 1.0, 1.0, gb200, head_dim=head_dim)
        h100_curves = fused_attention_times(8192.0, 4096.0, 1.0, 1.0, reference, head_dim=head_dim)
        for t_own, t_ref, pass_ in zip(own, h100_curves, ("fwd", "bwd"), strict=True):
            # every head width keeps its H100 relation: the ratio is the 128-wide causal curves'
            ratio = fused_efficiency(pass_, True, 4096.0) / fused_efficiency(pass_, True, 4096.0, 128.0, "GB200")
            assert float(t_own / t_ref) == pytest.approx(float(ratio), rel=1e-12)
    fwd, bwd = fused_attention_times(8192.0, 4096.0, 1.0, 1.0, gb200)
    ref_fwd, ref_bwd = fused_attention_times(8192.0, 4096.0, 1.0, 1.0, reference)
    assert fwd < ref_fwd and bwd > 1.2 * ref_bwd     # GB200's rows: a faster forward, a slower backward at 4K
    assert fwd + bwd == pytest.approx(1.18 * (ref_fwd + ref_bwd), rel=0.01)


def test_a_name_with_no_measured_rows_is_refused(h100):
    with pytest.raises(ConfigError) as info:
        validate_hardware(dataclasses.replace(h100, attention_kernels="H999"))
    assert info.value.field == "hardware.attention_kernels" and "GB200" in str(info.value)
    validate_hardware(dataclasses.replace(h100, attention_kernels="GB200"))


def test_each_profile_says_whether_its_attention_rate_was_measured_on_it():
    """H100 (the curves' own rows) and GB200 (its own rows) measured; B200 (GB200's rows), H200 and
    the others (H100's curves as fractions of their peak) assumed."""
    basis = {name: attention_basis(load_preset("hardware", name))
             for name in ("h100", "gb200", "b200", "h200", "a100-80gb", "mi300x")}
    assert basis == {"h100": "measured", "gb200": "measured", "b200": "assumed", "h200": "assumed",
                     "a100-80gb": "assumed", "mi300x": "assumed"}


def test_validate_says_which_runs_rest_on_an_assumed_attention_rate():
    """A held-out run with fused attention names the basis of its attention rate, and the kernel
    where it is not cuDNN's; one without names none."""
    profiles = {name: load_preset("hardware", name) for name in ("h100", "b200", "gb200", "a100-80gb")}
    runs = [r for r in read_runs(CONF_DIR / "data" / "holdout_runs.csv") if find_profile(r.hw, profiles)]
    said = {}
    for run, record in zip(runs, validate_runs(runs, profiles), strict=True):
        parts = record.detail.split("; ")
        words = [w for w in ATTENTION_WORDS.values() if w in parts or f"{w} ({run.attention_impl})" in parts]
        assert len(words) == (1 if run.flash_attention else 0), record.detail
        assert (f"({run.attention_impl})" in record.detail) == (run.attention_impl != "cudnn"), record.detail
        for word in words:
            said.setdefault(record.hardware, set()).add(word)
    assert said["h100"] == said["gb200"] == {ATTENTION_WORDS["measured"]}
    assert said["b200"] == {ATTENTION_WORDS["assumed"]}
    assert not all(run.flash_attention for run in runs)      # a run without fused attention is among them
    assert any(run.attention_impl == "flash2" for run in runs)


def test_another_kernel_on_a_device_with_its_own_cudnn_rows_rests_on_an_assumption():
    """GB200's rows time cuDNN's kernel: FlashAttention-2 there keeps its H100 relation to
    cuDNN's (assumed), on H100 it is measured (the FlashAttention-3 paper's rows)."""
    gb200, h100 = load_preset("hardware", "gb200"), load_preset("hardware", "h100")
    assert (attention_basis(gb200), attention_basis(gb200, "flash2")) == ("measured", "assumed")
    assert attention_basis(h100, "flash2") == attention_basis(h100, "flash3") == "measured"
    on_gb200 = [fused_efficiency("fwd", True, 8192.0, 128.0, "GB200", impl) for impl in ("flash2", "cudnn")]
    on_h100 = [fused_efficiency("fwd", True, 8192.0, 128.0, None, impl) for impl in ("flash2", "cudnn")]
    assert on_gb200[0] / on_gb200[1] == pytest.approx(on_h100[0] / on_h100[1])


def test_a_head_width_the_rows_do_not_measure_rests_on_an_assumption():
    """GB200's rows are 128-wide: GPT-OSS's 64-wide heads there keep H100's 64/128 relation
    (assumed); H100's rows span 64 to 128 (measured between), and DeepSeek-V3's latent heads
    (192-wide keys, 128-wide values) lie beyond them (assumed)."""
    gb200, h100 = load_preset("hardware", "gb200"), load_preset("hardware", "h100")
    assert [attention_basis(gb200, "cudnn", d) for d in (64.0, 128.0)] == ["assumed", "measured"]
    assert [attention_basis(h100, "cudnn", d) for d in (64.0, 96.0, 128.0, 160.0)] == ["measured"] * 3 + ["assumed"]
    profiles = {name: load_preset("hardware", name) for name in ("h100", "gb200")}
    runs = [r for r in read_runs(CONF_DIR / "data" / "moe_bridge_runs.csv", skipped=[])
            if r.source == "bridge2604" and r.hw.lower() == "gb200"]
    said = {r.model: ATTENTION_WORDS["assumed"] in r.detail for r in validate_runs(runs, profiles)}
    assert said == {"DeepSeek-V3": True, "GPT-OSS-120B": True, "Qwen3-30B-A3B": False, "Qwen3-235B-A22B": False}
