"""Published GEMM throughput beside ``roofline.gemm_kernel_time``'s prediction of it.

``conf/data/gemm_efficiency.csv`` holds maximum achievable matmul TFLOP/s per accelerator
and dtype (MAMF, found by a search over shapes; a row's shape is the best one found, or
``best found`` where the source gives none) and an A100 fp16 square-GEMM curve;
``conf/data/gemm_k_sweeps.csv`` (same columns) GEMMs of one M x N over K. A row is
predicted on the hardware profile ``PROFILE_OF_GPU`` maps its ``gpu`` to; rows of hardware
without a profile are skipped by the caller (``profile`` is ``None``).
"""

from __future__ import annotations

import csv
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Tuple, Union

import numpy as np

from tasks.model.kernels import roofline
from tasks.model.terms.specs import HardwareProfile

__all__ = ["GEMM_KINDS", "PROFILE_OF_GPU", "BEST_FOUND_SIDES", "MAMF_TOLERANCE", "CURVE_TOLERANCE", "CURVE_FROM",
           "GemmRow", "read_gemm_rows", "best_found", "predict_row"]

#: The csv's ``gpu`` -> the ``conf/hardware`` profile it is predicted on. Not here (skipped):
#: A100-PCIe and GH200, which have no profile. The H800 SXM is an H100 SXM with fewer
#: NVLink links: the same 132 SMs, clocks and dense tensor peaks, so its GEMMs are the h100's.
PROFILE_OF_GPU = {"A100-SXM": "a100-80gb", "H100-SXM": "h100", "H800-SXM": "h100", "H200-SXM": "h200",
                  "B200-SXM": "b200", "GB200": "gb200", "B300-SXM": "b300",
                  "MI300X": "mi300x", "MI325X": "mi325x", "MI355X": "mi355x", "MI250X-GCD": "mi250x"}

#: A 'best found' row is predicted as the best of every (m, n, k) drawn from these sides:
#: large shapes, as a MAMF search would try.
BEST_FOUND_SIDES = (4096, 6144, 8192, 12288, 16384)

#: Targets: |predicted / published - 1| within MAMF_TOLERANCE for measured rows (confidence
#: 'V'), within CURVE_TOLERANCE for rows read off a figure (confidence '~') from CURVE_FROM
#: (m = n = k) up. Below it the figure's small GEMMs pay fixed costs beyond the launch floor
#: that the law does not model; they are shown without a target.
MAMF_TOLERANCE = 0.05
#: What a row is: a maximum-achievable figure, a point read off a vendor curve, or a point of
#: a K sweep (no target: the sweeps are where the law's K overhead is fitted and checked).
GEMM_KINDS = ("MAMF", "curve", "K sweep")
CURVE_TOLERANCE = 0.10
CURVE_FROM = 2048


@dataclass(frozen=True)
class GemmRow:
    """One published row: ``row`` is its 1-based data row, ``shape`` (m, n, k) or ``None``
    for 'best found', ``tflops`` the published 10^12 FLOP/s, ``confidence`` the csv's
    ('V' measured, 'T' one transcription, '~' read off a figure), ``kind`` one of
    ``GEMM_KINDS``."""

    row: int
    gpu: str
    dtype: str
    shape: Optional[Tuple[int, int, int]]
    tflops: float
    confidence: str
    source: str
    kind: str = "MAMF"

    @property
    def profile(self) -> Optional[str]:
        """The hardware profile this row is predicted on, or ``None`` (no profile: skipped)."""
        return PROFILE_OF_GPU.get(self.gpu)

    @property
    def tolerance(self) -> Optional[float]:
        """The largest |signed error| this row's target allows, or ``None`` (no target)."""
        if self.kind == "K sweep":
            return None
        if self.kind == "MAMF":
            return MAMF_TOLERANCE
        return CURVE_TOLERANCE if self.shape is not None and min(self.shape) >= CURVE_FROM else None


def _shape(text: str) -> Optional[Tuple[int, int, int]]:
    if text.strip() == "best found":
        return None
    m, n, k = (int(side) for side in text.lower().split("x"))
    return m, n, k


def read_gemm_rows(path: Union[str, Path], *, sweep: bool = False) -> List[GemmRow]:
    """Every data row of a csv with the columns of ``conf/data/gemm_efficiency.csv``: K-sweep
    points where ``sweep``, else curve points (confidence '~') and MAMF rows."""
    with open(path, newline="", encoding="utf-8") as handle:
        return [GemmRow(i, r["gpu"], r["dtype"], _shape(r["shape_mnk"]), float(r["tflops"]),
                        r["confidence"], r["source"],
                        "K sweep" if sweep else "curve" if r["confidence"] == "~" else "MAMF")
                for i, r in enumerate(csv.DictReader(handle), start=1)]


def best_found(hw: HardwareProfile, dtype: str) -> Tuple[float, Tuple[int, int, int]]:
    """The highest predicted TFLOP/s over the shapes of ``BEST_FOUND_SIDES``, and its shape."""
    shapes = np.array(list(itertools.product(BEST_FOUND_SIDES, repeat=3)), dtype=np.float64)
    tflops = roofline.gemm_tflops(shapes[:, 0], shapes[:, 1], shapes[:, 2], hw, dtype)
    best = int(np.argmax(tflops))
    m, n, k = (int(side) for side in shapes[best])
    return float(tflops[best]), (m, n, k)


def predict_row(row: GemmRow, hw: HardwareProfile) -> Tuple[float, Tuple[int, int, int]]:
    """Predicted TFLOP/s of one published row on ``hw`` and the shape it was predicted at
    (the row's own, or the best of ``best_found``). Raises ``roofline.MissingFigure`` where
    ``hw`` lacks the row's dtype."""
    if row.shape is None:
        return best_found(hw, row.dtype)
    m, n, k = row.shape
    return float(roofline.gemm_tflops(m, n, k, hw, row.dtype)), row.shape
