"""ROI measurement figures: harness fidelity, the α-β fit of a measured ladder, and the
wall time of the CPU ROI smoke sweep.

    python scripts/bench_roi.py
    python scripts/bench_roi.py --device cuda --dtype bf16 --size 8192    # on a GPU worker

1. Fidelity: a GEMM timed through the harness (``tasks.measure.timing.time_kernel`` around
   ``tasks.measure.kernels.build_kernel``) against a bare timed loop of ``torch.matmul`` at the
   same shape, in the same process, alternating; the ratio of their medians.
2. Collective fit: ``--fit-runs`` all-reduce ladders among 2 gloo actors on an embedded
   Ray, each measured in interleaved rounds and fitted with ``fit_alpha_beta`` as the
   sweep stores it (on messages of 1 MiB and more) and, for comparison, on the whole
   ladder; the worst relative error over messages of 1 MiB and more, and the measured
   p10-p90 spread.
3. `commscale run sweep=roi-smoke` from a cold start into an empty lake.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def fidelity(size: int, dtype: str, device: str, rounds: int = 5) -> None:
    import torch

    from tasks.measure.kernels import build_kernel, kernel_flops
    from tasks.measure.timing import time_kernel

    fn, operands = build_kernel("gemm", size, size, size, 1, dtype, device)
    a, b = operands["a"], operands["b"]
    sync = (lambda: torch.cuda.synchronize()) if device.startswith("cuda") else (lambda: None)  # noqa: E731
    harness, bare = [], []
    for _ in range(rounds):
        harness.append(time_kernel(fn, device=device, warmup=2, min_repeats=10, max_repeats=10).median_s)
        for _ in range(2):
            torch.matmul(a, b)
        sync()
        samples = []
        for _ in range(10):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            sync()
            samples.append(time.perf_counter() - t0)
        bare.append(statistics.median(samples))
    h, r = statistics.median(harness), statistics.median(bare)
    gflop = kernel_flops("gemm", size, size, size, 1) / 1e9
    print(f"fidelity: {size}^3 {dtype} GEMM ({gflop:.1f} GFLOP) on {device}, {torch.get_num_threads()} threads: "
          f"harness {1e3 * h:.2f} ms, bare torch.matmul loop {1e3 * r:.2f} ms, ratio {h / r:.3f} "
          f"({gflop / h / 1e3:.3f} TFLOP/s through the harness)")


def collective_fit(runs: int) -> None:
    import pyarrow as pa

    from sweeps.cluster.groups import run_collective_group
    from sweeps.cluster.session import ray_session
    from tasks.fit.alpha_beta import fit_alpha_beta
    from tasks.measure.collectives import CollectiveContext
    from tasks.measure.kernels import ROI_POINT_SCHEMA, ROI_SCHEMA

    sizes = [2**k for k in range(14, 27)]
    points = pa.Table.from_pylist([dict(key=str(s), op="all_reduce", name="ladder", m=0, n=0, k=0, batch=1,
                                        dtype="fp32", device="cpu", device_model_spec="auto", world=2,
                                        message_bytes=s, placement="pack")
                                   for s in sizes], schema=ROI_POINT_SCHEMA)
    with ray_session(None, 2):
        for run in range(1, runs + 1):
            rows = run_collective_group(points, world=2, placement="pack", backend="gloo", device="cpu",
                                        context=CollectiveContext(warmup=5, repeats=30), schema=ROI_SCHEMA).to_pylist()
            x = [r["message_bytes"] for r in rows]
            t = [r["median_s"] for r in rows]
            stored = fit_alpha_beta("all_reduce", 2, x, t)
            whole = fit_alpha_beta("all_reduce", 2, x, t, judged_from_bytes=0)
            whole_err = max(abs(p - v) / v for p, v, s in zip(whole.predict(x), t, x, strict=True) if s >= 1 << 20)
            spread = max((r["p90_s"] - r["p10_s"]) / r["median_s"] for r in rows if r["message_bytes"] >= 1 << 20)
            print(f"collective fit, run {run}/{runs}: all-reduce, 2 gloo ranks, {len(x)} sizes 16 KiB-64 MiB, "
                  f"30 interleaved rounds: fit on >= 1 MiB (as stored) alpha {stored.alpha_s * 1e6:.0f} us, busbw "
                  f"{stored.busbw_Bps / 1e9:.2f} GB/s, worst error >= 1 MiB {100 * stored.max_rel_error:.1f}%; "
                  f"a fit to the whole ladder misses >= 1 MiB by {100 * whole_err:.0f}%; widest p10-p90 spread "
                  f">= 1 MiB: {100 * spread:.0f}% of the median")


def smoke_wall() -> None:
    commscale = str(Path(sys.executable).with_name("commscale"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        done = subprocess.run([commscale, "run", "sweep=roi-smoke", "--lake", f"{tmp}/lake"], env=env,
                              capture_output=True, text=True)
        wall = time.perf_counter() - start
    header = next((line for line in done.stdout.splitlines() if "points" in line), done.stderr[-300:])
    print(f"CPU ROI smoke sweep, cold (Ray start included): {wall:.1f} s wall | {header.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="GEMM size n of n^3 (1024: 2.1 GFLOP)")
    parser.add_argument("--dtype", default="fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--fit-runs", type=int, default=3, help="ladders measured for the fit figure")
    parser.add_argument("--skip", nargs="*", default=[], choices=["fidelity", "fit", "smoke"])
    args = parser.parse_args()
    if "fidelity" not in args.skip:
        fidelity(args.size, args.dtype, args.device)
    if "fit" not in args.skip and args.device == "cpu":
        collective_fit(args.fit_runs)
    if "smoke" not in args.skip and args.device == "cpu":
        smoke_wall()


if __name__ == "__main__":
    main()
