"""Exhaustive enumeration of a mixture-of-experts layout space of over 10^7 layouts, on the
embedded Ray (loopback, token authentication), and the step model's rate per core.

    python scripts/bench_moe_enumeration.py              # 2 CPUs, the space below
    python scripts/bench_moe_enumeration.py --cpus 4

DeepSeek-V3 on 1,024 H100 (the ``moe`` search preset's model, cluster, batch and stack) over
EP x ETP x dispatcher x TP (with SP) x PP x schedule x CP (with its exchange) x micro-batch x
ZeRO x recomputation, DP what the devices leave. The space is cut into one slice per (TP, PP)
(``tasks.model.search.space.space_slices``); each slice is evaluated whole (every layout
judged by the structural constraints, those that break none costed by the step model) and
reduced to its optimum in a Ray task (``slice_optimum``). Prints the space's size, the
wall-clock time, the layouts per second over all CPUs and per CPU, how many the step model
costed, the optimum and one slice's rate on this process alone (one core). Targets: the
whole space within 10 minutes; at least 5 x 10^5 layouts per second per core.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import time  # noqa: E402

import ray  # noqa: E402

from sweeps.cluster.session import ray_session  # noqa: E402
from sweeps.config import load_search  # noqa: E402
from tasks.model.search.space import slice_optimum, space_slices  # noqa: E402
from tasks.model.terms.layout import CODED_FIELDS, Layout, decode  # noqa: E402

TARGET_S = 600.0
TARGET_PER_CORE = 5e5


def moe_space(base):
    """The benchmark's space: the ``moe`` preset's widened on every axis."""
    return dataclasses.replace(base, tp=[1, 2, 4, 8, 16], pp=[1, 2, 4, 8, 16, 32], micro_batch=[1, 2, 4, 8, 16],
                               schedule=["1f1b", "interleaved"], virtual_stages=[2, 3, 4, 6],
                               zero=["none", "zero1", "zero3", "fsdp", "hsdp"], sequence_parallel=[False, True],
                               recompute=["none", "selective", "full"], cp=[1, 2, 4, 8],
                               cp_comm=["p2p", "all_gather", "a2a"], ep=[1, 2, 4, 8, 16, 32, 64, 128],
                               etp=[1, 2, 4, 8], dispatcher=["alltoall", "flex"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    setup = load_search(["moe"])
    space, ctx = moe_space(setup.spec.space), setup.step_context
    slices = space_slices(space)
    print(f"space: {space.size:,} layouts in {len(slices)} slices; {setup.model.name} on {ctx.devices} x "
          f"{setup.hardware.name}, global batch {ctx.global_batch}, stack {setup.spec.stack}")
    one = max(slices, key=lambda s: s.size)
    started = time.perf_counter()
    alone = slice_optimum(one, ctx)
    one_core = alone.layouts / (time.perf_counter() - started)
    with ray_session(num_cpus=args.cpus) as session:
        task = ray.remote(num_cpus=1)(slice_optimum)
        context = ray.put(ctx)
        started = time.perf_counter()
        results = ray.get([task.remote(s, context) for s in slices])
        elapsed = time.perf_counter() - started
    total = sum(r.layouts for r in results)
    best = min(results, key=lambda r: r.best_step_s)
    columns = {k: (decode(k, [v])[0] if k in CODED_FIELDS else v) for k, v in best.best.items()}
    layout = Layout(**{k: (bool(v) if k == "sequence_parallel" else v) for k, v in columns.items()
                       if k in Layout.__dataclass_fields__})
    rate = total / elapsed
    print(f"{session.where}: {total:,} layouts evaluated in {elapsed:.1f} s ({sum(r.feasible for r in results):,} "
          f"feasible): {rate:,.0f} layouts/s, {rate / session.cpus:,.0f} per CPU "
          f"(targets: <= {TARGET_S:.0f} s {'met' if elapsed <= TARGET_S else 'missed'}; >= {TARGET_PER_CORE:,.0f} "
          f"per core {'met' if rate / session.cpus >= TARGET_PER_CORE else 'missed'})")
    costed = sum(r.costed for r in results)
    print(f"costed by the step model: {costed:,} layouts ({costed / total:.1%}); the others break a structural "
          "constraint, judged without it")
    print(f"one slice ({alone.layouts:,} layouts, {alone.costed:,} costed) in this process alone: "
          f"{one_core:,.0f} layouts/s on one core")
    print(f"optimum: {layout.describe()} at {best.best_step_s:.3f} s per step")


if __name__ == "__main__":
    main()
