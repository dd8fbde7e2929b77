"""What a layout search found, as frames a person reads: the top distinct layouts by the
objective, the Pareto front, the exhaustive optimum of the space and the search's gap to
it, and the scaling view's winners. Plain pandas over the ``search`` and ``scaling`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import numpy as np
import pandas as pd

from sweeps.config import SearchSetup
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.lake.views import query
from tasks.model.layout import CODED_FIELDS, LAYOUT_FIELDS, Layout, decode, families
from tasks.model.search_rows import OBJECTIVES
from tasks.model.space import best_index, exhaustive

__all__ = ["layout_of", "study_rows", "pareto", "top_layouts", "exhaustive_frame", "OptimumGap", "optimum_gap",
           "fsdp_wins"]


def layout_of(row) -> Layout:
    """The ``Layout`` of a ``search`` or ``scaling`` row (names, not codes)."""
    return Layout(**{name: (bool(row[name]) if name == "sequence_parallel" else
                            row[name] if isinstance(row[name], str) else int(row[name]))
                     for name in LAYOUT_FIELDS})


def study_rows(lake: Lake, study: str) -> pd.DataFrame:
    """Every trial row of ``study``."""
    return query(lake, f"SELECT * FROM {SEARCH} WHERE study = '{study}'").to_pandas()


def pareto(rows: pd.DataFrame) -> pd.DataFrame:
    """Feasible distinct layouts no other beats on both exposed-comm share (lower) and
    tokens/s per device (higher), by share."""
    ok = rows[rows["status"] == "ok"].drop_duplicates(subset=list(LAYOUT_FIELDS))
    share, speed = ok["exposed_comm_share"].to_numpy(), ok["tokens_per_s_per_device"].to_numpy()
    dominated = [bool(np.any((share <= s) & (speed >= t) & ((share < s) | (speed > t))))
                 for s, t in zip(share, speed, strict=True)]
    return ok[~np.asarray(dominated, dtype=bool)].sort_values("exposed_comm_share")


def top_layouts(rows: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Feasible distinct layouts, best first by the (first) objective."""
    column, direction = OBJECTIVES[objective][0]
    ok = rows[rows["status"] == "ok"]
    return ok.sort_values(column, ascending=direction == "minimize").drop_duplicates(subset=list(LAYOUT_FIELDS))


def exhaustive_frame(setup: SearchSetup) -> pd.DataFrame:
    """Every feasible layout of the space, costed, best first by the objective (names,
    not codes, and each layout's family)."""
    layouts, costs = exhaustive(setup.spec.space, setup.step_context)
    frame = pd.DataFrame({**layouts, **{k: v for k, v in costs.items() if k != "dp"}})
    frame = frame[frame["status_code"] == 0].copy()
    frame["family"] = families(frame["tp"], frame["pp"], frame["dp"], frame["zero"])
    for name in CODED_FIELDS:
        frame[name] = decode(name, frame[name])
    column, direction = OBJECTIVES[setup.spec.objective][0]
    return frame.sort_values(column, ascending=direction == "minimize")


@dataclass(frozen=True)
class OptimumGap:
    """The exhaustive optimum of a space by one column, and how far a search's best is."""

    column: str
    optimum: float
    best: float

    @property
    def gap(self) -> float:
        return abs(self.best - self.optimum) / abs(self.optimum)


def optimum_gap(setup: SearchSetup, best: pd.DataFrame, limit: int = 100_000) -> Optional[OptimumGap]:
    """The search's best (first row of ``best``) against the exhaustive optimum, for a
    single objective over a space of at most ``limit`` layouts; else None."""
    objectives = OBJECTIVES[setup.spec.objective]
    if len(objectives) > 1 or setup.spec.space.size > limit or best.empty:
        return None
    column, direction = objectives[0]
    _, costs = exhaustive(setup.spec.space, setup.step_context)
    optimum = costs[column][best_index(costs, column, maximize=direction == "maximize")]
    return OptimumGap(column, float(optimum), float(best[column].iloc[0]))


def fsdp_wins(rows: pd.DataFrame) -> List[str]:
    """Per model of feasible ``scaling`` rows: up to how many devices plain FSDP wins, and
    the winning family at each device count."""
    lines = []
    for model, group in rows[rows["status"] == "ok"].groupby("model"):
        fsdp = group[group["winner_family"] == "fsdp"]["devices"]
        lines.append(f"{model}: plain FSDP wins " + (f"up to {fsdp.max()} devices" if len(fsdp) else "at no device count")
                     + "; " + ", ".join(f"{f} at {d}" for d, f in zip(group["devices"], group["winner_family"],
                                                                      strict=True)))
    return lines
