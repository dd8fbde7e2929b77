"""The study's figures again (Pati et al., arXiv 2302.02825, §4.3.4-4.3.6), projected on the
study's own system (conf/hardware/mi210x4.yaml), beside the study's own numbers.

    python scripts/bench_study.py

Prints, at m = 1, 2 and 4 (compute m times faster, communication unchanged):
- the serialized (TP) share of a layer's time for the highlighted model/TP pairs, over
  SL = 1K-8K at B = 1 (study: about 20-50 % today, 30-65 % at m = 2, 40-75 % at m = 4);
- the overlapped (DP) communication as a percentage of the backward GEMMs at TP 16, over
  the grid of H x SL·B and at SL·B = 4K (study: 17-140 % over the grid, 20-55 % at 4K;
  50-100 % at m = 2; 80-210 % at m = 4);
- the two trends the study reports: overlap falls as SL·B grows, and is higher at small H.
The grid is table2's (conf/sweep/table2.yaml): links ideal, DP 4, head dimension 128, fp16.
"""

from __future__ import annotations

import itertools

import numpy as np

from sweeps.config import load_preset
from tasks.model.projection.grid import project_columns

H = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
SLB = (1024, 2048, 4096, 8192, 16384, 32768)
SL = (1024, 2048, 4096, 8192)
PAIRS = ((4096, 16, "H 4K at TP 16 (about T-NLG)"), (16384, 64, "H 16K at TP 64 (about PaLM)"),
         (65536, 256, "H 64K at TP 256 (PaLM three times wider)"))


def project(hw, rows) -> dict:
    """``project_columns`` over (h, sl, b, tp, m) tuples on the study's grid settings."""
    h, sl, b, tp, m = (np.asarray(c, dtype=np.float64) for c in zip(*rows, strict=True))
    ones = np.ones_like(h)
    return project_columns(dict(h=h, heads=h / 128, sl=sl, b=b, tp=tp, dp=4 * ones, dtype_bytes=2 * ones,
                                flop_vs_bw=m, dp_slowdown=ones, placed=np.zeros_like(h, dtype=bool)), hw)


def main() -> None:
    hw = load_preset("hardware", "mi210x4")
    for m in (1.0, 2.0, 4.0):
        print(f"m = {m:g}")
        for h, tp, label in PAIRS:
            share = 100 * project(hw, [(h, sl, 1, tp, m) for sl in SL])["serialized_fraction"]
            print(f"  serialized share, {label:42s} {share.min():5.1f}-{share.max():5.1f} %")
        rows = [(h, min(slb, 8192), max(slb // 8192, 1), 16, m) for h, slb in itertools.product(H, SLB)]
        grid = project(hw, rows)["overlap_percent"].reshape(len(H), len(SLB))
        at_4k = grid[:, SLB.index(4096)]
        print(f"  overlap at TP 16, grid {grid.min():5.1f}-{grid.max():5.1f} %; at SL·B = 4K "
              f"{at_4k.min():5.1f}-{at_4k.max():5.1f} %")
        falls = bool(np.all(np.diff(grid, axis=1) < 0))
        small_h = bool(np.all(grid[0] >= grid[-1]))
        print(f"  overlap falls as SL·B grows (every H): {falls}; higher at the smallest H than the largest "
              f"(every SL·B): {small_h}")
        print("  overlap % by H (rows) and SL·B (columns " + ", ".join(f"{s // 1024}K" for s in SLB) + "):")
        for h, row in zip(H, grid, strict=True):
            print(f"    H {h:6d}: " + " ".join(f"{v:6.1f}" for v in row))


if __name__ == "__main__":
    main()
