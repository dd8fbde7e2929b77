"""FlashAttention (v1) and kernels timed forward and backward together: the curves are the fit
of their rows in conf/data/attention_kernels.csv, both passes run at the pair's rate, and a
device with rows of its own (A100) runs at them while cuDNN's kernel there keeps H100's."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy.optimize import curve_fit

from sweeps.config import load_preset
from sweeps.config.specs import validate_hardware
from sweeps.errors import ConfigError
from tasks.model.kernels.attention import BACKWARD_FLOP_FACTOR, COMBINED_EFFICIENCY, FITTED_HEAD_DIMS, \
    REFERENCE_DEVICE, attention_basis, fused_attention_times, fused_efficiency
from tasks.model.kernels.layer import attention_core_flops

ROOT = Path(__file__).resolve().parents[3]
PEAK_TFLOPS = {"H100-SXM": 989.0, "A100-SXM": 312.0}


def _combined_rows():
    """{(device, kernel, causal, head width): (SL array, fraction of the peak)} of the file's
    rows timed forward and backward together."""
    rows = {}
    with open(ROOT / "conf" / "data" / "attention_kernels.csv", encoding="utf-8") as f:
        for line in list(f)[1:]:
            gpu, _, head_dim, seq, pass_, causal, impl, tflops = line.split(",")[:8]
            if pass_ == "forward+backward":
                key = (gpu, impl, causal == "true", int(head_dim))
                rows.setdefault(key, []).append((float(seq), float(tflops) / PEAK_TFLOPS[gpu]))
    return {key: tuple(np.array(v) for v in zip(*sorted(points), strict=True)) for key, points in rows.items()}


def test_combined_curves_are_the_fit_of_their_rows():
    rows = _combined_rows()
    assert set(rows) == set(COMBINED_EFFICIENCY)
    for key, (sl, eff) in rows.items():
        (fit_max, fit_half), _ = curve_fit(lambda s, a, b: a * s / (s + b), sl, eff, p0=(0.3, 200.0))
        assert COMBINED_EFFICIENCY[key] == (pytest.approx(fit_max, abs=0.002), pytest.approx(fit_half, rel=0.03))
        residual = _curve(*COMBINED_EFFICIENCY[key], sl) / eff - 1.0
        dip = key == ("H100-SXM", "flash1", True, 128)                 # 108 TFLOP/s at 2,048 tokens
        assert np.max(np.abs(residual)) < (0.12 if dip else 0.07), key


def _curve(e_max, sl_half, sl):
    return e_max * sl / (sl + sl_half)


def test_both_passes_run_at_the_pairs_rate_so_their_sum_is_the_figures_time(h100):
    """FlashAttention-1 on H100, 128-wide causal heads at 2,048 tokens: the pair takes 3.5 x the
    forward's work at the fitted fwd + bwd rate, each pass at that rate; cuDNN's kernel runs it
    about four times as fast (0.47 of the peak against 0.12)."""
    work = attention_core_flops(4096.0, 2048.0, 1.0, 1.0) * 0.5
    fwd, bwd = fused_attention_times(4096.0, 2048.0, 1.0, 1.0, h100, impl="flash1")
    rate = _curve(*COMBINED_EFFICIENCY[(REFERENCE_DEVICE, "flash1", True, 128)], 2048.0) * h100.peak_tflops * 1e12
    assert (fwd, bwd) == (pytest.approx(work / rate, rel=1e-12), pytest.approx(BACKWARD_FLOP_FACTOR * work / rate,
                                                                              rel=1e-12))
    cudnn = sum(fused_attention_times(4096.0, 2048.0, 1.0, 1.0, h100))
    assert (fwd + bwd) / cudnn == pytest.approx(3.8, rel=0.05)
    for head_dim in FITTED_HEAD_DIMS:                                    # the pair's rate in each pass
        assert fused_efficiency("fwd", False, 4096.0, head_dim, impl="flash1") == \
            fused_efficiency("bwd", False, 4096.0, head_dim, impl="flash1")


def test_a100_runs_flashattention_at_its_own_rows_and_cudnn_at_h100s_fraction():
    """A100's rows: FlashAttention-1 reaches 0.22 of its peak at 2,048 tokens (128-wide, causal),
    nearly twice H100's fraction (a kernel without Hopper's instructions), FlashAttention-2 0.50; cuDNN's
    kernel and FlashAttention-3 keep the H100 curves as fractions of the peak (assumed). The 40 GB
    part borrows the 80 GB rows (an assumption, said so)."""
    a100, a100_40, h100 = (load_preset("hardware", name) for name in ("a100-80gb", "a100-40gb", "h100"))
    assert a100.attention_kernels == a100_40.attention_kernels == "A100-SXM"
    own = {impl: float(fused_efficiency("fwd", True, 2048.0, 128.0, a100.attention_kernels, impl))
           for impl in ("flash1", "flash2", "cudnn", "flash3")}
    assert own["flash1"] == pytest.approx(69.0 / 312.0, rel=0.05)
    assert own["flash2"] == pytest.approx(155.0 / 312.0, rel=0.03)
    assert own["flash1"] > 1.8 * float(fused_efficiency("fwd", True, 2048.0, 128.0, None, "flash1"))
    for impl in ("cudnn", "flash3"):
        assert own[impl] == float(fused_efficiency("fwd", True, 2048.0, 128.0, None, impl))
    assert [attention_basis(a100, impl) for impl in ("flash1", "flash2", "cudnn", "flash3")] == \
        ["measured", "measured", "assumed", "assumed"]
    assert attention_basis(a100_40, "flash2") == "assumed" and attention_basis(h100, "flash1") == "measured"
    assert attention_basis(a100, "flash1", head_dim=256.0) == "assumed"


def test_a_device_with_cudnn_rows_keeps_flashattention_1s_h100_relation_and_names_are_checked(h100):
    """GB200 has cuDNN rows only: FlashAttention-1 there is H100's curve times GB200's cuDNN
    curve over H100's (assumed); a profile may name a device with rows of either kind, and no
    other."""
    gb200 = load_preset("hardware", "gb200")
    for pass_ in ("fwd", "bwd"):
        ratio = fused_efficiency(pass_, True, 4096.0, 128.0, "GB200") / fused_efficiency(pass_, True, 4096.0)
        assert fused_efficiency(pass_, True, 4096.0, 128.0, "GB200", "flash1") == \
            pytest.approx(ratio * fused_efficiency(pass_, True, 4096.0, 128.0, None, "flash1"), rel=1e-12)
    assert attention_basis(gb200, "flash1") == "assumed"
    validate_hardware(dataclasses.replace(h100, attention_kernels="A100-SXM"))
    with pytest.raises(ConfigError, match="A100-SXM"):
        validate_hardware(dataclasses.replace(h100, attention_kernels="V100"))
