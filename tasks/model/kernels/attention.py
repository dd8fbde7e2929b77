"""Fused (flash) attention: the time of its kernels and what it keeps for the backward pass.

A fused kernel (Dao et al. 2022, FlashAttention; Shah et al. 2024, FlashAttention-3; cuDNN's
fused attention, which Transformer Engine uses on Hopper) computes softmax(Q K^T) V tile by
tile: the SL x SL matrix is never written, and under a causal mask the tiles above the
diagonal are skipped. Its throughput rises with the sequence length, as each tile's fixed
costs are spread over more work. The curve

    efficiency(SL) = e_max * SL / (SL + SL_half)    (fraction of the device's dense 16-bit peak)

is fitted per kernel, pass and head dimension to the rows of ``conf/data/attention_kernels.csv``
(H100 SXM, head dimensions 64 and 128, FlashAttention-3 paper's benchmark figures; residuals
within 6 %; a test re-fits it from the file) for each fused kernel a stack may run
(``Stack.attention_impl``, ``stack.ATTENTION_IMPLS``): cuDNN's (Transformer Engine's choice on
Hopper), FlashAttention-2 (its choice with cuDNN's switched off) and FlashAttention-3. At
8,192 tokens and 128-wide heads FlashAttention-2 runs at 0.63 of cuDNN's rate causal forward
and 0.61 backward, FlashAttention-3 at 1.14 and 1.08. Those rows count FLOPs as the benchmark does:
forward 4 b SL^2 h (halved under a causal mask), backward 2.5 times the forward. A narrower
head does less work per tile for the same loads (each of the kernel's two GEMMs is a head
deep): at 4,096 tokens the 64-wide causal forward runs at 0.70 of the 128-wide one's rate,
the backward at 0.84. A head between 64 and 128 wide takes the curves' efficiencies
interpolated in log2 of its width; a wider one the 128-wide curve (the paper's 256-wide
forward runs at 0.98 of the 128-wide one's rate at 16K tokens non-causal; no backward of it is
published), a narrower one the 64-wide.

A device whose profile names its own cuDNN rows (``HardwareProfile.attention_kernels``) runs
at its own 128-wide causal curve (``DEVICE_EFFICIENCY``), fitted the same way to those rows,
each other mask, head width and kernel keeping its H100 relation to that curve (an assumption:
the rows measure one shape and one kernel). GB200's rows (NVIDIA's cuDNN benchmark, cuDNN 9.17) reach more of
the peak forward and less backward than H100's: at 4,096 tokens 0.54 and 0.40 against 0.52
and 0.50, so a fused kernel's forward and backward take 18 % longer there, 4 % at 8,192.
Beyond 32,768 tokens the measured rate falls again (6 and 13 % below its 32K rate at 64K and
128K) where the curve keeps rising: the fit stops at 32K. Assumption: a device naming no rows
reaches the H100 curves' fraction of its own peak (``attention_basis`` says which devices rest
on an assumption).

Kernels timed forward and backward together (``COMBINED_EFFICIENCY``): FlashAttention-2's
release benchmarks FlashAttention (v1) on H100 and A100, and FlashAttention-2 on A100, as
one fwd + bwd rate (README.md's figures at 4f285b35). Each is fitted as the same curve to
those rows, per device, mask and head width, and both passes run at it: the pair's time is
the figure's, its split between the passes an assumption. FlashAttention-1 predates Hopper's
instructions: on H100 it reaches 0.11 of the peak at 2,048 tokens, 128-wide causal heads
(108 TFLOP/s, against cuDNN's 0.47), on A100 0.22. A device with rows of its own for a
kernel (a profile's ``attention_kernels``: A100-SXM) runs at them; any other device takes
the H100 curve of that kernel as a fraction of its peak (or, with cuDNN rows of its own,
that curve's relation to H100's cuDNN one). Vectorised; seconds.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from tasks.model.kernels.layer import attention_core_flops
from tasks.model.terms.specs import HardwareProfile
from tasks.model.terms.stack import DEFAULT_ATTENTION_IMPL

__all__ = ["FUSED_EFFICIENCY", "DEVICE_EFFICIENCY", "COMBINED_EFFICIENCY", "FITTED_HEAD_DIMS", "BACKWARD_FLOP_FACTOR",
           "fused_efficiency", "ROW_DEVICES",
           "fused_attention_times", "REFERENCE_DEVICE", "ATTENTION_BASES", "attention_basis",
           "FUSED_STATS_BYTES_PER_ROW", "DEVICE_ROWS_HEAD_DIM"]

#: (e_max, SL_half) per kernel (``stack.ATTENTION_IMPLS``), pass, mask and head dimension,
#: fitted to that kernel's rows of attention_kernels.csv (the file does not say whether its
#: backward is causal: one curve).
FUSED_EFFICIENCY: Dict[Tuple[str, str, bool, int], Tuple[float, float]] = {
    ("cudnn", "fwd", True, 128): (0.565, 375.0),
    ("cudnn", "fwd", False, 128): (0.626, 106.0),
    ("cudnn", "bwd", True, 128): (0.545, 360.0),
    ("cudnn", "bwd", False, 128): (0.545, 360.0),
    ("cudnn", "fwd", True, 64): (0.402, 391.0),
    ("cudnn", "fwd", False, 64): (0.423, 126.0),
    ("cudnn", "bwd", True, 64): (0.454, 325.0),
    ("cudnn", "bwd", False, 64): (0.454, 325.0),
    ("flash2", "fwd", True, 128): (0.352, 385.0),
    ("flash2", "fwd", False, 128): (0.381, 102.0),
    ("flash2", "bwd", True, 128): (0.333, 272.0),
    ("flash2", "bwd", False, 128): (0.333, 272.0),
    ("flash2", "fwd", True, 64): (0.311, 357.0),
    ("flash2", "fwd", False, 64): (0.331, 78.0),
    ("flash2", "bwd", True, 64): (0.299, 251.0),
    ("flash2", "bwd", False, 64): (0.299, 251.0),
    ("flash3", "fwd", True, 128): (0.656, 567.0),
    ("flash3", "fwd", False, 128): (0.675, 202.0),
    ("flash3", "bwd", True, 128): (0.594, 409.0),
    ("flash3", "bwd", False, 128): (0.594, 409.0),
    ("flash3", "fwd", True, 64): (0.509, 822.0),
    ("flash3", "fwd", False, 64): (0.516, 278.0),
    ("flash3", "bwd", True, 64): (0.499, 389.0),
    ("flash3", "bwd", False, 64): (0.499, 389.0),
}

#: (e_max, SL_half) per pass of a device's own 128-wide causal cuDNN kernel, fitted to its rows
#: of attention_kernels.csv from 512 to 32,768 tokens (the forward within 4 % from 1,024 tokens,
#: 15 % over at 512; the backward within 7 % but at 2,048, 15 % over), by the name a profile's
#: ``attention_kernels`` gives.
DEVICE_EFFICIENCY: Dict[str, Dict[str, Tuple[float, float]]] = {
    "GB200": {"fwd": (0.727, 1470.0), "bwd": (0.583, 1915.0)},
}

#: (e_max, SL_half) per device (the rows' ``gpu``, a profile's ``attention_kernels``), kernel,
#: mask and head dimension of a kernel whose rows time the forward and backward passes together
#: (pass ``forward+backward``): one curve for both passes (module docstring), fitted to the
#: rows (within 7 %, but FlashAttention-1's 128-wide causal rows on H100 at 2,048 tokens, a dip
#: 12 % under it).
COMBINED_EFFICIENCY: Dict[Tuple[str, str, bool, int], Tuple[float, float]] = {
    ("H100-SXM", "flash1", True, 128): (0.1355, 226.9),
    ("H100-SXM", "flash1", False, 128): (0.1366, 44.2),
    ("H100-SXM", "flash1", True, 64): (0.1549, 251.9),
    ("H100-SXM", "flash1", False, 64): (0.1670, 31.3),
    ("A100-SXM", "flash1", True, 128): (0.2633, 292.1),
    ("A100-SXM", "flash1", False, 128): (0.2592, 56.3),
    ("A100-SXM", "flash1", True, 64): (0.3077, 373.8),
    ("A100-SXM", "flash1", False, 64): (0.3544, 133.2),
    ("A100-SXM", "flash2", True, 128): (0.6202, 484.2),
    ("A100-SXM", "flash2", False, 128): (0.6595, 204.9),
    ("A100-SXM", "flash2", True, 64): (0.5626, 503.5),
    ("A100-SXM", "flash2", False, 64): (0.5707, 180.9),
}

#: The accelerator whose rows ``FUSED_EFFICIENCY`` is fitted to (a profile's ``accelerator``).
REFERENCE_DEVICE = "H100-SXM"

#: The names a profile's ``attention_kernels`` may give: devices with rows of their own.
ROW_DEVICES: Tuple[str, ...] = tuple(sorted(set(DEVICE_EFFICIENCY) | {key[0] for key in COMBINED_EFFICIENCY}))

#: Where a device's fused-attention rate comes from: "measured" (rows of that device) or
#: "assumed" (another device's rows as fractions of its peak).
ATTENTION_BASES = ("measured", "assumed")

#: The head dimensions ``FUSED_EFFICIENCY`` holds curves for, narrowest first.
FITTED_HEAD_DIMS: Tuple[int, int] = (64, 128)

#: The backward of fused attention recomputes the scores: 2.5 x the forward's FLOPs
#: (Dao 2023, FlashAttention-2 §4 benchmark convention).
BACKWARD_FLOP_FACTOR = 2.5

#: What the kernel keeps per query row and head for its backward pass: the softmax's
#: log-sum-exp in fp32 (4 bytes); the output itself is the next GEMM's input.
FUSED_STATS_BYTES_PER_ROW = 4.0


def _curve(e_max: float, sl_half: float, sl: np.ndarray) -> np.ndarray:
    """The saturating efficiency curve e_max SL / (SL + SL_half)."""
    return e_max * sl / (sl + sl_half)


def _has_combined(device: str, impl: str) -> bool:
    """Whether ``COMBINED_EFFICIENCY`` holds ``impl``'s curves on ``device`` for every mask and
    fitted head width."""
    return all((device, impl, causal, d) in COMBINED_EFFICIENCY for causal in (True, False) for d in FITTED_HEAD_DIMS)


def _curves(pass_: str, causal: bool, sl: np.ndarray, impl: str, device: str) -> list:
    """``impl``'s curves on ``device``, one per fitted head width: its combined ones where the
    device has them, else the reference device's per-pass ones."""
    if _has_combined(device, impl):
        return [_curve(*COMBINED_EFFICIENCY[(device, impl, bool(causal), d)], sl) for d in FITTED_HEAD_DIMS]
    return [_curve(*FUSED_EFFICIENCY[(impl, pass_, bool(causal), d)], sl) for d in FITTED_HEAD_DIMS]


def fused_efficiency(pass_: str, causal: bool, sl, head_dim=128.0, kernels=None, impl: str = DEFAULT_ATTENTION_IMPL):
    """Fraction of the dense 16-bit peak the fused kernel ``impl`` (``stack.ATTENTION_IMPLS``)
    reaches at ``sl`` with heads ``head_dim`` wide (module docstring: interpolated in log2
    between the fitted widths, clamped to them), on the device whose rows ``kernels`` names:
    its own rows of ``impl`` timed forward and backward together (``COMBINED_EFFICIENCY``), else
    its measured cuDNN curve (``DEVICE_EFFICIENCY``) and the H100 relation of ``impl``'s to
    cuDNN's; None, or a device with neither: the H100 curves."""
    sl = np.asarray(sl, dtype=np.float64)
    narrow, wide = FITTED_HEAD_DIMS
    own = kernels is not None and _has_combined(kernels, impl)
    curves = _curves(pass_, causal, sl, impl, kernels if own else REFERENCE_DEVICE)
    share = np.clip(np.log2(np.asarray(head_dim, dtype=np.float64) / narrow) / np.log2(wide / narrow), 0.0, 1.0)
    efficiency = curves[0] + share * (curves[1] - curves[0])
    if own or kernels not in DEVICE_EFFICIENCY:
        return efficiency
    return efficiency * _curve(*DEVICE_EFFICIENCY[kernels][pass_], sl) \
        / _curve(*FUSED_EFFICIENCY[(DEFAULT_ATTENTION_IMPL, pass_, True, wide)], sl)


def fused_attention_times(h, sl, b, tp, hw: HardwareProfile, *, causal: bool = True, head_dim=128.0,
                          impl: str = DEFAULT_ATTENTION_IMPL):
    """(forward, backward) seconds of one layer's fused attention on one of ``tp`` devices, run
    by the kernel ``impl`` (``stack.ATTENTION_IMPLS``); ``h``: the attention's width
    (``layer.Block.attention_width``), its heads ``head_dim`` wide (the depth of a head's
    scores and context: ``layer.Block.kv_dim``).

    Work = ``attention_core_flops`` (halved where a causal mask lets the kernel skip tiles),
    times ``BACKWARD_FLOP_FACTOR`` for the backward, at ``fused_efficiency`` of the peak (the
    device's own curve where ``hw.attention_kernels`` names one); never less than one kernel
    launch."""
    work = attention_core_flops(h, sl, b, tp) * (0.5 if causal else 1.0)
    peak = hw.peak_tflops * 1e12
    floor = hw.kernel_launch_us * 1e-6
    kernels = hw.attention_kernels
    forward = work / (fused_efficiency("fwd", causal, sl, head_dim, kernels, impl) * peak)
    backward = BACKWARD_FLOP_FACTOR * work / (fused_efficiency("bwd", causal, sl, head_dim, kernels, impl) * peak)
    return np.maximum(forward, floor), np.maximum(backward, floor)


#: The head width of a device's own rows (``DEVICE_EFFICIENCY``: 128-wide causal cuDNN rows).
DEVICE_ROWS_HEAD_DIM = 128.0


def attention_basis(hw: HardwareProfile, impl: str = DEFAULT_ATTENTION_IMPL, head_dim=128.0) -> str:
    """One of ``ATTENTION_BASES`` for the fused kernel ``impl`` on ``hw`` with heads ``head_dim``
    wide: "measured" on the reference device without rows of its own named, for heads within
    its rows' widths (``FITTED_HEAD_DIMS``, interpolated between); on a profile naming rows
    whose source (``sources['attention_kernels']``) is no assumption, for a kernel those rows
    time forward and backward together (``COMBINED_EFFICIENCY``) with heads within their widths,
    or for cuDNN's kernel with heads as wide as its cuDNN rows (``DEVICE_ROWS_HEAD_DIM``);
    "assumed" otherwise (another kernel, or another head width, keeps its H100 relation to the
    rows' kernel and width)."""
    width = float(head_dim)
    within = FITTED_HEAD_DIMS[0] <= width <= FITTED_HEAD_DIMS[1]
    if hw.attention_kernels is None:
        return "measured" if hw.accelerator == REFERENCE_DEVICE and within else "assumed"
    own_rows = (_has_combined(hw.attention_kernels, impl) and within) or \
        (impl == DEFAULT_ATTENTION_IMPL and width == DEVICE_ROWS_HEAD_DIM and hw.attention_kernels in DEVICE_EFFICIENCY)
    return "measured" if own_rows and not hw.source_is_assumption("attention_kernels") else "assumed"
