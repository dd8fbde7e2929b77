"""What a layout search found, as frames a person reads: the top distinct layouts by the
objective, the Pareto front, the exhaustive optimum of the space and the search's gap to
it, why the best layout beats the runner-up, and the scaling view's winners. Plain pandas
over the ``search`` and ``scaling`` rows.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np
import pandas as pd

from sweeps.config import SearchSetup
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.lake.views import query
from tasks.model.terms.layout import CODED_FIELDS, LAYOUT_FIELDS, Layout, decode, families, layout_from_row
from tasks.model.search.rows import OBJECTIVES, TIE_BREAKERS, best_row, ranking
from tasks.model.search.space import exhaustive

__all__ = ["layout_of", "study_rows", "pareto", "top_layouts", "exhaustive_frame", "OptimumGap", "optimum_gap",
           "relative_gap", "STEP_TERMS", "step_terms", "WhyBest", "why_best", "fsdp_wins"]


def layout_of(row) -> Layout:
    """The ``Layout`` of a ``search`` or ``scaling`` row (names, not codes; ``layout_from_row``)."""
    return layout_from_row(lambda name: row[name] if name in row else None)


def study_rows(lake: Lake, study: str) -> pd.DataFrame:
    """Every trial row of ``study``, in trial order (a layout tried twice has a row per trial)."""
    return query(lake, f"SELECT * FROM {SEARCH} WHERE study = '{study}' ORDER BY trial").to_pandas()


def pareto(rows: pd.DataFrame) -> pd.DataFrame:
    """Feasible distinct layouts no other beats on both exposed-comm share (lower) and
    tokens/s per device (higher), by share (ties: the shorter step, then the smaller memory)."""
    ok = rows[rows["status"] == "ok"].drop_duplicates(subset=list(LAYOUT_FIELDS))
    share, speed = ok["exposed_comm_share"].to_numpy(), ok["tokens_per_s_per_device"].to_numpy()
    dominated = [bool(np.any((share <= s) & (speed >= t) & ((share < s) | (speed > t))))
                 for s, t in zip(share, speed, strict=True)]
    front = ok[~np.asarray(dominated, dtype=bool)]
    return front.iloc[ranking(front, "exposed_comm_share")]


def top_layouts(rows: pd.DataFrame, objective: str) -> pd.DataFrame:
    """Feasible distinct layouts, best first by the (first) objective, ties broken by step
    time, then memory (``ranking``), each at the first trial that tried it, whatever the
    order of ``rows``."""
    ok = rows[rows["status"] == "ok"].sort_values("trial", kind="stable")
    return ok.iloc[ranking(ok, objective)].drop_duplicates(subset=list(LAYOUT_FIELDS))


def exhaustive_frame(setup: SearchSetup) -> pd.DataFrame:
    """Every feasible layout of the space, costed, best first by the objective (ties broken
    by ``ranking``; names, not codes, and each layout's family)."""
    layouts, costs = exhaustive(setup.spec.space, setup.step_context)
    frame = pd.DataFrame({**layouts, **{k: v for k, v in costs.items() if k != "dp"}})
    frame = frame[frame["status_code"] == 0].copy()
    frame["family"] = families(frame["tp"], frame["pp"], frame["dp"], frame["zero"], frame["cp"])
    for name in CODED_FIELDS:
        frame[name] = decode(name, frame[name])
    return frame.iloc[ranking(frame, setup.spec.objective)]


def relative_gap(value: float, optimum: float) -> float:
    """How far ``value`` lies from ``optimum``, as a fraction of it; from a zero optimum,
    0 when ``value`` is zero too, else infinite (no fraction of nothing measures it)."""
    if optimum == 0:
        return 0.0 if value == 0 else math.inf
    return abs(value - optimum) / abs(optimum)


@dataclass(frozen=True)
class OptimumGap:
    """The exhaustive optimum of a space by one column, how far a search's best is, and
    how far the best of the sampler's own trials is (past the warm start; None without one).
    The optimum and the search's best are layouts, ties on the column broken by ``ranking``;
    their step times (s) say how far the tie-break left the search from the optimum."""

    column: str
    optimum: float
    best: float
    sampled_best: Optional[float] = None
    optimum_step_time_s: float = math.nan
    best_step_time_s: float = math.nan

    @property
    def gap(self) -> float:
        return relative_gap(self.best, self.optimum)

    @property
    def sampled_gap(self) -> Optional[float]:
        if self.sampled_best is None or math.isnan(self.sampled_best):
            return None
        return relative_gap(self.sampled_best, self.optimum)

    @property
    def step_time_gap(self) -> float:
        """The search's best layout's step time against the optimum layout's (a fraction)."""
        return relative_gap(self.best_step_time_s, self.optimum_step_time_s)


def optimum_gap(setup: SearchSetup, rows: pd.DataFrame, limit: int = 100_000,
                warm_start: int = 0) -> Optional[OptimumGap]:
    """The best of a study's trial ``rows`` against the exhaustive optimum, for a single
    objective over a space of at most ``limit`` layouts; else None. With a warm start, also
    the best of the trials numbered ``warm_start`` and up: the layouts the sampler chose,
    one the warm start had tried first included."""
    objective = setup.spec.objective
    ok = rows[rows["status"] == "ok"]
    if len(OBJECTIVES[objective]) > 1 or setup.spec.space.size > limit or ok.empty:
        return None
    column, direction = OBJECTIVES[objective][0]
    extreme = "max" if direction == "maximize" else "min"
    _, costs = exhaustive(setup.spec.space, setup.step_context)
    optimum = best_row(costs, objective)
    best = top_layouts(ok, objective).iloc[0]
    sampled = ok[ok["trial"] >= warm_start][column] if warm_start else None
    sampled_best = None if sampled is None else float(sampled.agg(extreme)) if len(sampled) else math.nan
    return OptimumGap(column, float(costs[column][optimum]), float(best[column]), sampled_best,
                      float(costs["step_time_s"][optimum]), float(best["step_time_s"]))


#: The parts a step's time splits into (seconds, summing to ``step_time_s``), by name.
STEP_TERMS: Tuple[str, ...] = ("compute", "PP bubble", "TP comm", "PP send/recv", "DP/ZeRO comm", "optimizer")


def step_terms(row) -> dict:
    """A ``search`` row's step time split into ``STEP_TERMS``: the pipeline's idle ticks
    (``bubble_fraction`` of the ticks' compute and exposed TP and PP time) as the bubble,
    the DP and ZeRO traffic left exposed (exposed communication less TP and PP), and the
    optimizer step."""
    busy = 1.0 - row["bubble_fraction"]
    compute, tp, pp = row["compute_s"], row["tp_exposed_s"], row["pp_exposed_s"]
    return {"compute": busy * compute, "PP bubble": row["bubble_fraction"] * (compute + tp + pp),
            "TP comm": busy * tp, "PP send/recv": busy * pp, "DP/ZeRO comm": row["exposed_comm_s"] - tp - pp,
            "optimizer": row["optimizer_s"]}


@dataclass(frozen=True)
class WhyBest:
    """Why the best layout beats the runner-up: both layouts, their objective and exposed
    communication, the fields they differ in (name, best's, runner-up's), the step terms
    the best saves on, largest first (name, seconds saved), and the memory verdict: the
    best's neighbour (one choice changed) that would beat it but does not fit (the choice,
    its label, objective, GB needed)."""

    column: str
    best: str
    runner_up: str
    values: Tuple[float, float]
    exposed_comm_s: Tuple[float, float]
    differs: Tuple[Tuple[str, str, str], ...]
    savings: Tuple[Tuple[str, float], ...]
    memory_bound: Optional[Tuple[str, str, float, float]] = None
    usable_gb: float = 0.0
    #: Both layouts' step times (s) and memory per device (GB): what breaks a tie.
    step_time_s: Tuple[float, float] = (math.nan, math.nan)
    memory_gb: Tuple[float, float] = (math.nan, math.nan)

    @property
    def decided_by(self) -> str:
        """What sets the best apart: the objective's column, or where the two tie on it, the
        first of ``TIE_BREAKERS`` they differ in ("nothing" if they tie on all)."""
        pairs = (self.values, self.step_time_s, self.memory_gb)
        return next((name for name, (a, b) in zip((self.column, *TIE_BREAKERS), pairs, strict=True) if a != b),
                    "nothing")


def why_best(top: pd.DataFrame, setup: SearchSetup, limit: int = 1_000_000) -> Optional[WhyBest]:
    """Why the first row of ``top`` (distinct feasible layouts, best first) beats the second;
    None with fewer than two, or for the Pareto case. The memory verdict needs the whole
    space costed (at most ``limit`` layouts)."""
    objectives = OBJECTIVES[setup.spec.objective]
    if len(objectives) > 1 or len(top) < 2:
        return None
    column = objectives[0][0]
    first, second = top.iloc[0], top.iloc[1]
    a, b = layout_of(first), layout_of(second)
    differs = tuple((name, str(getattr(a, name)), str(getattr(b, name))) for name in LAYOUT_FIELDS
                    if getattr(a, name) != getattr(b, name))
    terms_a, terms_b = step_terms(first), step_terms(second)
    savings = tuple(sorted(((name, float(terms_b[name] - terms_a[name])) for name in STEP_TERMS
                            if terms_b[name] - terms_a[name] > 0), key=lambda item: -item[1]))
    ctx = setup.step_context

    def pair(name: str, scale: float = 1.0) -> Tuple[float, float]:
        return float(first[name]) / scale, float(second[name]) / scale
    return WhyBest(column, a.describe(), b.describe(), pair(column), pair("exposed_comm_s"), differs, savings,
                   _memory_bound(setup, first, limit), ctx.memory_limit_bytes / 1e9, pair("step_time_s"),
                   pair("memory_per_device_bytes", 1e9))


#: The choices of a layout, one each: a neighbour of a layout differs from it in one of them.
_CHOICES: Tuple[Tuple[str, ...], ...] = (("tp",), ("pp",), ("micro_batch",), ("schedule", "virtual_stages"),
                                         ("zero",), ("sequence_parallel",), ("recompute",))


def _memory_bound(setup: SearchSetup, best, limit: int) -> Optional[Tuple[str, str, float, float]]:
    """The best of the layouts one choice away from ``best`` (a row) that would beat it were
    memory no bound (a better objective, or as good and a shorter step), if one does not fit:
    (the choice changed, its label, objective, GB per device); else None."""
    if setup.spec.space.size > limit:
        return None
    objective = setup.spec.objective
    column, direction = OBJECTIVES[objective][0]
    unbounded = dataclasses.replace(setup.step_context, memory_fraction=math.inf)
    layouts, costs = exhaustive(setup.spec.space, unbounded)
    mine = layout_of(best).columns()
    changed = sum(np.any([layouts[f] != mine[f][0] for f in fields], axis=0).astype(int) for fields in _CHOICES)
    sign = -1.0 if direction == "maximize" else 1.0
    value, at_best = sign * costs[column], sign * float(best[column])
    faster = (value < at_best) | ((value == at_best) & (costs["step_time_s"] < float(best["step_time_s"])))
    beats = (changed == 1) & (costs["status_code"] == 0) & faster
    beats &= costs["memory_per_device_bytes"] > setup.step_context.memory_limit_bytes
    if not beats.any():
        return None
    candidates = np.flatnonzero(beats)
    i = int(candidates[ranking({name: costs[name][candidates] for name in (column, *TIE_BREAKERS)}, objective)[0]])
    row = {name: values[i] for name, values in layouts.items()}
    row.update({name: decode(name, [row[name]])[0] for name in CODED_FIELDS})
    other, own = layout_of(row), layout_of(best)
    change = " ".join(f"{name} {getattr(other, name)}" for name in LAYOUT_FIELDS
                      if name != "dp" and getattr(other, name) != getattr(own, name))
    return change, other.describe(), float(costs[column][i]), float(costs["memory_per_device_bytes"][i]) / 1e9


def fsdp_wins(rows: pd.DataFrame) -> List[str]:
    """Per model of feasible ``scaling`` rows: up to how many devices plain FSDP wins, and
    the winning family at each device count."""
    lines = []
    for model, group in rows[rows["status"] == "ok"].groupby("model"):
        fsdp = group[group["winner_family"] == "fsdp"]["devices"]
        wins = f"up to {fsdp.max()} devices" if len(fsdp) else "at no device count"
        at = ", ".join(f"{f} at {d}" for d, f in zip(group["devices"], group["winner_family"], strict=True))
        lines.append(f"{model}: plain FSDP wins {wins}; {at}")
    return lines
