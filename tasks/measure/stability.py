"""Is a measurement to be trusted? The fastest step, reproduced between rounds and matching its parts.

**The statistic.** Contention on a shared machine only ever adds time to a step (another
process holding the core, the caches it evicted, a page fault it caused): a step's time
is the device's own plus non-negative delays. The fastest of several repeats is then the
estimate least biased by load, an upper bound of the device's own time that a quiet
repeat reaches (J. Chen and J. Revels, "Robust benchmarking in noisy environments",
arXiv:1608.04295, 2016, whose minimum estimator Julia's BenchmarkTools uses; Python's
``timeit`` documentation says the same of the minimum of ``Timer.repeat``). A mean, a
median or a p10 moves with the load; the minimum moves only where no repeat ran free of
it. That holds where every repeat does the same work (a layer step of fixed shapes), not
where the work itself varies (a JIT compiling, a garbage collector running).

**Rounds.** The configurations of a calibration (``tasks.measure.baseline``) are measured
in rounds, each round visiting every configuration in turn, so that each configuration's
steps come from several spells of the machine, minutes apart. ``judge`` applies a
``StabilityRule`` to one configuration's samples, round by round, and sets its tests on
the statistic, not on the spread of the steps around it (which measures the load):

1. **Reproduced.** Each round's fastest step is an estimate of its own. The second
   fastest of them over the fastest, - 1 (the ``drift``), above ``max_drift``: no second
   spell of the machine found the fastest step again, so it may be a lucky one, or a load
   came to stay after the first round (every later round slower). A round that a load
   covered whole does not count against it while two others agree.
2. **Excess.** The fastest step over the floor its caller gives, - 1, above
   ``max_excess``. For a profiled layer the floor is the sum of its operator classes'
   fastest times (plus what ran outside them), estimates taken from other steps: a
   machine that slows every step alike (every round agreeing) still leaves short
   operators some free time slices, and whole steps come out above the sum of their
   fastest parts.

A measurement failing either test is unstable. The kept steps' p10, median and p90 (after
rejecting outliers, samples farther from the median than ``outlier_mads`` robust standard
deviations, 1.4826 x the median absolute deviation), and their spread p90/p10 - 1, are
reported as a description of the load, not judged. ``remeasure`` says whether to measure
again: at most ``rule.remeasure`` times more, and none once the configuration has used its
time cap. A re-measurement's rounds join the earlier ones (every step ever timed is an
upper bound of the device's time, so none is thrown away), and all are judged together;
one still unstable is reported as unstable, with the reason. ``interleave_until_stable``
runs that loop over many configurations at once. All times are in seconds; nothing here
needs torch, and the clock is the caller's to choose.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

__all__ = ["STATUS_UNSTABLE", "StabilityRule", "Verdict", "inliers", "judge", "remeasure", "interleave_until_stable"]

#: The status of a measurement still unstable after its re-measurements.
STATUS_UNSTABLE = "unstable"

#: The MAD of a normal distribution times this is its standard deviation.
_MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class StabilityRule:
    """Thresholds of ``judge`` (relative, 0.1 = 10%), how many re-measurements ``remeasure``
    allows, and the outlier bound of the reported (not judged) statistics.

    The defaults sit above what a quiet 2-core virtual machine shows for the fastest step of
    a one-thread CPU calibration timed by its thread's CPU clock, and below what a load that
    stays does (README, "Operator-level models", has the figures)."""

    max_drift: float = 0.10
    max_excess: float = 0.12
    remeasure: int = 2
    outlier_mads: float = 3.5

    def __post_init__(self) -> None:
        if not (self.max_drift > 0 and self.max_excess > 0 and self.outlier_mads > 0):
            raise ValueError(f"thresholds must be positive: {self}")
        if self.remeasure < 0:
            raise ValueError(f"remeasure must be >= 0: {self.remeasure}")


@dataclass(frozen=True)
class Verdict:
    """The statistic (``fastest_s``, seconds), its two tests (``drift``, ``excess``), why it is
    unstable (``reason``; None when stable), and the kept samples' quantiles and spread (the
    load, reported only)."""

    fastest_s: float   # the fastest sample of every round: the statistic
    drift: float       # second fastest round's fastest sample / fastest round's - 1
    excess: float      # fastest / floor - 1; nan without a floor
    reason: Optional[str]
    median_s: float
    p10_s: float
    p90_s: float
    spread: float      # p90/p10 - 1 of the kept samples
    kept: int
    rejected: int      # outliers left out of the quantiles

    @property
    def stable(self) -> bool:
        return self.reason is None


def inliers(samples: Sequence[float], outlier_mads: float) -> np.ndarray:
    """A mask of the samples within ``outlier_mads`` robust standard deviations of their
    median; every sample when their MAD is zero."""
    x = np.asarray(samples, dtype=np.float64)
    median = np.median(x)
    mad = np.median(np.abs(x - median))
    if mad == 0:
        return np.ones(x.shape, dtype=bool)
    return np.abs(x - median) <= outlier_mads * _MAD_TO_SIGMA * mad


def _reproduction(rounds: Sequence[Sequence[float]]) -> float:
    """The second fastest round's fastest sample over the fastest round's, - 1; 0 with one round."""
    speeds = sorted(min(r) for r in rounds if len(r))
    if len(speeds) < 2:
        return 0.0
    return float(speeds[1] / speeds[0] - 1.0) if speeds[0] > 0 else float("inf")


def judge(rounds: Sequence[Sequence[float]], rule: StabilityRule, floor_s: Optional[float] = None) -> Verdict:
    """Judge samples timed in interleaved ``rounds`` (each a list of seconds, in time order):
    their fastest, whether another round reproduces it, and how far it lies above
    ``floor_s``, the least the measured thing can take, where known (module docstring).
    """
    if sum(len(r) for r in rounds) == 0:
        raise ValueError("no samples to judge")
    x = np.concatenate([np.asarray(r, dtype=np.float64) for r in rounds if len(r)])
    fastest = float(x.min())
    drift = _reproduction(rounds)
    excess = float(fastest / floor_s - 1.0) if floor_s else float("nan")
    reasons: List[str] = []
    if drift > rule.max_drift:
        reasons.append(f"fastest step not reproduced: the next round's fastest {100 * drift:.0f}% slower "
                       f"> {100 * rule.max_drift:g}%")
    if excess > rule.max_excess:
        reasons.append(f"fastest step {100 * excess:.0f}% above the sum of its fastest parts "
                       f"> {100 * rule.max_excess:g}%")
    keep = inliers(x, rule.outlier_mads)
    p10, p50, p90 = np.percentile(x[keep], [10, 50, 90])
    spread = float(p90 / p10 - 1.0) if p10 > 0 else float("inf")
    return Verdict(fastest, drift, excess, "; ".join(reasons) or None, float(p50), float(p10), float(p90), spread,
                   int(keep.sum()), int((~keep).sum()))


def remeasure(verdict: Verdict, attempts: int, rule: StabilityRule, *, elapsed_s: float, time_cap_s: float) -> bool:
    """Measure again? Only an unstable measurement, after at most ``1 + rule.remeasure``
    ``attempts`` in all, and only while the configuration has spent less than ``time_cap_s``."""
    return not verdict.stable and attempts <= rule.remeasure and elapsed_s < time_cap_s


def interleave_until_stable(subjects: int, visit: Callable[[int, int], Optional[List[float]]], rule: StabilityRule,
                            *, rounds: int, time_cap_s: float, pause_s: float = 0.0,
                            floor: Optional[Callable[[int], Optional[float]]] = None,
                            clock: Callable[[], float] = time.perf_counter,
                            sleep: Callable[[float], None] = time.sleep) -> List[List[Verdict]]:
    """Measure ``subjects`` configurations (numbered from 0) in interleaved rounds, judge each,
    and measure the unstable ones again.

    A measurement is ``rounds`` rounds; each round calls ``visit(i, r)`` once for every subject
    ``i`` being measured, in turn, so a slow spell of the machine falls on the same round of
    many subjects (one round each one's others outvote) rather than on every sample of one. ``visit``
    returns that visit's samples (seconds), or None when the subject failed (the caller keeps
    why): it is measured no more. The subjects that ``remeasure`` then allows (each one's own
    visits counted against ``time_cap_s``) are measured again together, after ``pause_s``; each
    verdict judges every round of the subject so far. ``floor(i)``, if given, is subject
    ``i``'s floor for the excess test when it is judged.

    The whole takes ``time_cap_s`` per subject at most (started visits finish): past that
    budget no visit starts, a measurement short of its rounds is unstable for that reason,
    and a subject never visited has no verdict. Returns each subject's verdicts, in order: the
    last, which judged every round, is the one to keep.
    """
    verdicts: List[List[Verdict]] = [[] for _ in range(subjects)]
    history: List[List[List[float]]] = [[] for _ in range(subjects)]  # every round judged so far
    spent = [0.0] * subjects
    began, budget_s = clock(), time_cap_s * subjects
    measuring = list(range(subjects))
    while measuring:
        samples: Dict[int, List[List[float]]] = {i: [] for i in measuring}
        for r, i in ((r, i) for r in range(rounds) for i in measuring):
            if i not in samples or clock() - began > budget_s:
                continue
            started = clock()
            got = visit(i, r)
            spent[i] += clock() - started
            if got is None:
                del samples[i]
            else:
                samples[i].append(got)
        for i, taken in samples.items():
            if taken:
                history[i] += taken
                floor_s = floor(i) if floor else None
                verdicts[i].append(_short(judge(history[i], rule, floor_s), len(taken), rounds, budget_s))
        measuring = [i for i in samples if verdicts[i] and clock() - began <= budget_s
                     and remeasure(verdicts[i][-1], len(verdicts[i]), rule, elapsed_s=spent[i], time_cap_s=time_cap_s)]
        if measuring:
            sleep(pause_s)
    return verdicts


def _short(verdict: Verdict, taken: int, rounds: int, budget_s: float) -> Verdict:
    """``verdict`` of a measurement of ``taken`` of its ``rounds`` rounds: unstable if short."""
    if taken == rounds:
        return verdict
    why = f"{taken} of {rounds} rounds measured before the time cap of the whole ({budget_s:g} s) ran out"
    return replace(verdict, reason=why + (f"; {verdict.reason}" if verdict.reason else ""))
