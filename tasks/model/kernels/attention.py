"""Fused (flash) attention: the time of its kernels and what it keeps for the backward pass.

A fused kernel (Dao et al. 2022, FlashAttention; Shah et al. 2024, FlashAttention-3; cuDNN's
fused attention, which Transformer Engine uses on Hopper) computes softmax(Q K^T) V tile by
tile: the SL x SL matrix is never written, and under a causal mask the tiles above the
diagonal are skipped. Its throughput rises with the sequence length, as each tile's fixed
costs are spread over more work. The curve

    efficiency(SL) = e_max * SL / (SL + SL_half)    (fraction of the device's dense 16-bit peak)

is fitted per pass to the cuDNN rows of ``conf/data/attention_kernels.csv`` (H100 SXM,
head dimension 128, FlashAttention-3 paper's benchmark figures; residuals within 5 %; a test
re-fits it from the file). Those rows count FLOPs as the benchmark does: forward 4 b SL^2 h
(halved under a causal mask), backward 2.5 times the forward. Assumption: other devices'
fused kernels reach the same fraction of their own peak (no published ladder for them here).
Vectorised; seconds.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from tasks.model.kernels.layer import attention_core_flops
from tasks.model.terms.specs import HardwareProfile

__all__ = ["FUSED_EFFICIENCY", "BACKWARD_FLOP_FACTOR", "fused_efficiency", "fused_attention_times",
           "FUSED_STATS_BYTES_PER_ROW"]

#: (e_max, SL_half) per pass and mask, fitted to the cuDNN rows of attention_kernels.csv.
FUSED_EFFICIENCY: Dict[Tuple[str, bool], Tuple[float, float]] = {
    ("fwd", True): (0.565, 375.0),
    ("fwd", False): (0.626, 106.0),
    ("bwd", True): (0.545, 360.0),   # the file does not say whether its backward is causal
    ("bwd", False): (0.545, 360.0),
}

#: The backward of fused attention recomputes the scores: 2.5 x the forward's FLOPs
#: (Dao 2023, FlashAttention-2 §4 benchmark convention).
BACKWARD_FLOP_FACTOR = 2.5

#: What the kernel keeps per query row and head for its backward pass: the softmax's
#: log-sum-exp in fp32 (4 bytes); the output itself is the next GEMM's input.
FUSED_STATS_BYTES_PER_ROW = 4.0


def fused_efficiency(pass_: str, causal: bool, sl):
    """Fraction of the dense 16-bit peak a fused attention kernel reaches at ``sl``."""
    e_max, sl_half = FUSED_EFFICIENCY[(pass_, bool(causal))]
    sl = np.asarray(sl, dtype=np.float64)
    return e_max * sl / (sl + sl_half)


def fused_attention_times(h, sl, b, tp, hw: HardwareProfile, *, causal: bool = True):
    """(forward, backward) seconds of one layer's fused attention on one of ``tp`` devices;
    ``h``: the attention's width (``layer.Block.attention_width``).

    Work = ``attention_core_flops`` (halved where a causal mask lets the kernel skip tiles),
    times ``BACKWARD_FLOP_FACTOR`` for the backward, at ``fused_efficiency`` of the peak;
    never less than one kernel launch."""
    work = attention_core_flops(h, sl, b, tp) * (0.5 if causal else 1.0)
    peak = hw.peak_tflops * 1e12
    floor = hw.kernel_launch_us * 1e-6
    forward = work / (fused_efficiency("fwd", causal, sl) * peak)
    backward = BACKWARD_FLOP_FACTOR * work / (fused_efficiency("bwd", causal, sl) * peak)
    return np.maximum(forward, floor), np.maximum(backward, floor)
