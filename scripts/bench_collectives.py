"""Predicted against published collective bus bandwidths: every row of
conf/data/collective_ladders.csv whose system has a hardware profile.

    python scripts/bench_collectives.py
    python scripts/bench_collectives.py --tolerance 0.10

For each row it prints the profile, the op, ranks and nodes, the message size, the
algorithm the row names (mapped to ``tasks.model.collectives.nccl.ALGORITHMS``: a ring row
forces the ring, every other row takes NCCL's own choice), the published busbw, the
model's (``predicted_busbw``) and the signed error; then a summary line: the worst
all-reduce error from 1 MiB up against the tolerance (15 % unless told), over the ladders
of fewer than ``AT_SCALE_RANKS`` ranks; and one for the at-scale ladders, without a target.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweeps.config.compose import load_preset  # noqa: E402
from tasks.model.collectives.nccl import predicted_busbw  # noqa: E402
from tasks.validation.microbench_check import (  # noqa: E402
    AT_SCALE_RANKS,
    JUDGED_FROM_BYTES,
    LADDER_SYSTEM_PROFILES as SYSTEM_PROFILES,
    ladder_algorithm,
    size_label,
)

LADDERS = ROOT / "conf" / "data" / "collective_ladders.csv"
def ladder_table() -> pd.DataFrame:
    """The ladder rows with a profile, with ``predicted_GBps`` and ``error`` (signed, relative)."""
    rows = pd.read_csv(LADDERS)
    rows = rows[rows["system"].isin(SYSTEM_PROFILES)].copy()
    profiles = {name: load_preset("hardware", name) for name in set(SYSTEM_PROFILES.values())}
    rows["profile"] = rows["system"].map(SYSTEM_PROFILES)
    rows["predicted_GBps"] = [
        float(predicted_busbw(r.op, r.gpus, r.bytes, profiles[r.profile], nodes=r.nodes,
                              algorithm=ladder_algorithm(r.algorithm))) / 1e9
        for r in rows.itertuples()]
    rows["error"] = rows["predicted_GBps"] / rows["busbw_GBps"] - 1.0
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tolerance", type=float, default=0.15)
    args = parser.parse_args()
    rows = ladder_table()
    print(f"{'profile':<10} {'op':<15} {'ranks':>5} {'nodes':>5} {'size':>8} {'algorithm':<26} "
          f"{'published':>9} {'predicted':>9} {'error':>7}")
    for r in rows.itertuples():
        print(f"{r.profile:<10} {r.op:<15} {r.gpus:>5} {r.nodes:>5} {size_label(r.bytes):>8} {r.algorithm[:26]:<26} "
              f"{r.busbw_GBps:>9.1f} {r.predicted_GBps:>9.1f} {r.error:>+7.1%}")
    judged = rows[(rows["op"] == "all_reduce") & (rows["bytes"] >= JUDGED_FROM_BYTES)]
    at_scale = judged[judged["gpus"] >= AT_SCALE_RANKS]
    judged = judged[judged["gpus"] < AT_SCALE_RANKS]
    worst = judged["error"].abs().max()
    small = rows[rows["gpus"] < AT_SCALE_RANKS]
    verdict = "met" if worst <= args.tolerance else "NOT met"
    print(f"summary: {len(small)} rows below {AT_SCALE_RANKS} ranks; all-reduce from 1 MiB up: {len(judged)} rows, "
          f"worst |error| {worst:.1%} (target <= {args.tolerance:.0%}: {verdict}); every such row: worst |error| "
          f"{small['error'].abs().max():.1%}, mean signed {small['error'].mean():+.1%}")
    if len(at_scale):
        print(f"at scale ({AT_SCALE_RANKS} ranks or more, no target): {len(at_scale)} all-reduce rows from 1 MiB up, "
              f"median {at_scale['error'].median():+.1%}, {at_scale['error'].min():+.1%} .. "
              f"{at_scale['error'].max():+.1%}")


if __name__ == "__main__":
    main()
