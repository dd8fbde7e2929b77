"""Measure one GPU without Ray: launch costs, a sustained GEMM, and a whole calibration.

    python scripts/device_check.py --out DIR                       # on a machine with a GPU
    python scripts/device_check.py --out DIR --device cpu --dtype fp32 --parts sustained --gemm-n 512 --gemm-seconds 2

For a machine that has torch, pandas and pyarrow (and omegaconf) but no Ray. Three parts, each
written to ``DIR`` as it ends, so a part that fails leaves the others:

1. **Launch** (``tasks.measure.launch``): the host's and the device's cost per tiny kernel
   (a 16-cubed GEMM, a 16-element add), eager and replayed from a CUDA graph; and one eager
   training step of the calibration layer, and of the same layer in plain ``torch.nn``, at
   three shapes: kernels, wall time and the device's busy time.
2. **Sustained GEMM** (``tasks.measure.sustained``): back-to-back ``--gemm-n``-cubed products
   in ``--dtype`` on random data, then on zeros, with the board's power, SM clock and
   temperature.
3. **Calibration** (``commscale calibrate``'s measurements, fit and judgement, in this
   process): the preset's baseline, variations and held-out configurations measured by
   ``tasks.measure.baseline.measure_points``, fitted and judged by
   ``tasks.fit.accuracy.fit_and_judge``.

Files: ``device_check.json`` (provenance, launch, sustained summaries, the calibration's
summary), ``gemm_windows.csv`` (every timed window and board sample), and the calibration's
``baseline.parquet``, ``opmodel.parquet`` and ``accuracy.parquet``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

#: The parts, in the order they run by default.
PARTS = ("launch", "sustained", "calibration")
#: Layer shapes of the launch part: host-bound, and one in the range the calibration fits.
LAUNCH_SHAPES = [dict(h=256, heads=4, sl=128, b=1, tp=1), dict(h=1024, heads=16, sl=512, b=1, tp=1),
                 dict(h=4096, heads=32, sl=2048, b=1, tp=1)]


def _write(out: Path, report: dict) -> None:
    (out / "device_check.json").write_text(json.dumps(report, indent=1, default=str))


def _provenance(device: str) -> dict:
    import torch

    from tasks.measure.provenance import device_provenance

    found = dict(device_provenance(device), torch=torch.__version__, python=sys.version.split()[0])
    try:
        query = "name,driver_version,power.limit,power.max_limit,clocks.max.sm,clocks.max.mem,memory.total"
        found["nvidia_smi"] = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv"],
                                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        found["nvidia_smi"] = f"not run: {exc}"
    return found


def _launch(device: str, dtype: str, shapes: list) -> dict:
    from tasks.measure.launch import TINY_KERNELS, layer_launch, plain_layer_launch, tiny_kernel_launch
    from tasks.measure.transformer_layer import LayerShape

    tiny = [tiny_kernel_launch(k, device=device, dtype=dtype).as_dict() for k in TINY_KERNELS]
    layers = [dict(layer_launch(LayerShape(**s), device=device, dtype=dtype).as_dict(), layer="labelled")
              for s in shapes]
    layers += [dict(plain_layer_launch(LayerShape(**s), device=device, dtype=dtype).as_dict(), layer="plain")
               for s in shapes]
    for row in tiny + layers:
        print("launch:", row, flush=True)
    return dict(tiny=tiny, layers=layers)


def _sustained(device: str, dtype: str, n: int, seconds: float, out: Path) -> list:
    from tasks.measure.sustained import FILLS, sustained_gemm

    summaries, lines = [], ["fill,kind,t_s,tflops,watts,sm_mhz,celsius"]
    for fill in FILLS:
        run = sustained_gemm(n, fill=fill, dtype=dtype, device=device,
                             seconds=seconds if fill == "random" else seconds / 2)
        summaries.append(run.summary())
        print("sustained:", summaries[-1], flush=True)
        lines += [f"{fill},gemm,{w.t_s:.3f},{w.tflops:.1f},,," for w in run.windows]
        lines += [f"{fill},board,{s.t_s:.3f},,{s.watts:.1f},{s.sm_mhz:.0f},{s.celsius:.0f}" for s in run.board]
    (out / "gemm_windows.csv").write_text("\n".join(lines) + "\n")
    return summaries


def _calibration(name: str, out: Path) -> dict:
    import pyarrow.parquet as pq

    from sweeps.cli.calibrate import render_accuracy
    from sweeps.config import load_run_config
    from sweeps.jobs.calibration import calibration_job
    from tasks.fit.accuracy import error_summary, fit_and_judge
    from tasks.measure.baseline import measure_points

    spec = load_run_config([f"calibration={name}"]).calibration
    job = calibration_job(spec)
    started = time.perf_counter()
    rows = measure_points(job.points, job.workload.context)
    measure_s = time.perf_counter() - started
    pq.write_table(rows, out / "baseline.parquet")
    frame = rows.to_pandas()
    planned = int((frame["role"] != "held_out").sum())
    judged = fit_and_judge(spec.name, frame, planned=planned, judged_from_s=spec.judged_from_ms / 1e3)
    summary = dict(calibration=spec.name, measure_s=round(measure_s, 1), measured=len(frame),
                   statuses=frame["status"].value_counts().to_dict(), not_fitted=judged.not_fitted)
    if judged.not_fitted is None:
        pq.write_table(judged.opmodels, out / "opmodel.parquet")
        pq.write_table(judged.accuracy, out / "accuracy.parquet")
        accuracy = judged.accuracy.to_pandas()
        from rich.console import Console

        render_accuracy(Console(width=160), accuracy, f"calibration {spec.name}")
        summary.update(calibration_id=judged.calibration_id,
                       end_to_end=error_summary(accuracy).to_dict("records"))
    print("calibration:", summary, flush=True)
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--calibration", default="h200")
    parser.add_argument("--gemm-n", type=int, default=8192)
    parser.add_argument("--gemm-seconds", type=float, default=40.0)
    parser.add_argument("--parts", default=",".join(PARTS))
    args = parser.parse_args()
    unknown = [p for p in args.parts.split(",") if p not in PARTS]
    if unknown:
        parser.error(f"--parts={args.parts!r}: {unknown[0]!r} is not one of {', '.join(PARTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = dict(started=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), argv=sys.argv[1:],
                        provenance=_provenance(args.device))
    print("provenance:", report["provenance"], flush=True)
    parts = {"launch": lambda: _launch(args.device, args.dtype, LAUNCH_SHAPES),
             "sustained": lambda: _sustained(args.device, args.dtype, args.gemm_n, args.gemm_seconds, args.out),
             "calibration": lambda: _calibration(args.calibration, args.out)}
    failed = False
    for name in args.parts.split(","):
        started = time.perf_counter()
        try:
            report[name] = parts[name]()
        except Exception:  # noqa: BLE001 - one part's failure is reported; the others still run
            failed = True
            report[name] = {"failed": traceback.format_exc()}
            print(f"{name} failed:\n{report[name]['failed']}", flush=True)
        report[f"{name}_wall_s"] = round(time.perf_counter() - started, 1)
        _write(args.out, report)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
