"""Is a measurement to be trusted? Outlier rejection, spread, drift and excess of interleaved rounds.

The configurations of a calibration (``tasks.measure.baseline``) are measured in rounds,
each round visiting every configuration in turn, so a slow spell of a shared machine falls
on one round of many configurations and shows up as a difference between rounds, instead
of slowing every sample of one configuration unseen. ``judge`` applies a
``StabilityRule`` to one configuration's samples, round by round:

1. **Outliers.** A sample farther from the median than ``outlier_mads`` robust standard
   deviations (1.4826 x the median absolute deviation, MAD) is rejected: one descheduled
   step does not make a measurement unstable.
2. **Spread.** p90/p10 - 1 of the kept samples above ``max_spread``: the steps disagree
   with each other (another process held a core during part of them).
3. **Drift.** The slowest round's fastest sample over the fastest round's, - 1, above
   ``max_drift``: the machine changed between rounds (its load came or went). A round's
   fastest sample is its speed (contention only adds time, and one slow step does not
   move it), taken over every sample: a whole round slowed is no outlier to reject.
4. **Excess.** The plain step's p10 over the floor its caller gives, - 1, above
   ``max_excess``. For a profiled layer the floor is the sum of its operator classes'
   fastest times (plus what ran outside them): a machine that slows every step a little
   (a busy host: no spread, no drift) still leaves some fast instances of each short
   operator, so whole steps come out well above the sum of their fastest parts.

A measurement failing any test is unstable. ``remeasure`` says whether to measure it
again: at most ``rule.remeasure`` times more, and none once the configuration has used
its time cap. One still unstable after that is reported as unstable, with the reason.
``interleave_until_stable`` runs that loop over many configurations at once. All times are in seconds;
nothing here needs torch, and the clock is the caller's to choose.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

__all__ = ["STATUS_UNSTABLE", "StabilityRule", "Verdict", "inliers", "judge", "remeasure", "steadiest",
           "interleave_until_stable"]

#: The status of a measurement still unstable after its re-measurements.
STATUS_UNSTABLE = "unstable"

#: The MAD of a normal distribution times this is its standard deviation.
_MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class StabilityRule:
    """Thresholds of ``judge`` (relative, 0.5 = 50%) and how many re-measurements ``remeasure`` allows.

    The defaults sit above what a quiet 2-core virtual machine shows (spreads up to 40%,
    drifts up to 25% as its host's speed wanders, excesses up to 10%) and below what
    interference does (spreads and drifts of 50% to several times the step; excesses of
    15-45% on a busy host, which is what biases a judged error)."""

    max_spread: float = 0.50
    max_drift: float = 0.30
    max_excess: float = 0.12
    remeasure: int = 2
    outlier_mads: float = 3.5

    def __post_init__(self) -> None:
        if not (self.max_spread > 0 and self.max_drift > 0 and self.max_excess > 0 and self.outlier_mads > 0):
            raise ValueError(f"thresholds must be positive: {self}")
        if self.remeasure < 0:
            raise ValueError(f"remeasure must be >= 0: {self.remeasure}")


@dataclass(frozen=True)
class Verdict:
    """The kept samples' statistics (seconds), their spread, drift and excess, and why they
    are unstable (``reason``; None when stable)."""

    median_s: float
    p10_s: float
    p90_s: float
    spread: float      # p90/p10 - 1 of the kept samples
    drift: float       # slowest round's fastest sample / fastest round's - 1
    kept: int
    rejected: int      # outliers left out
    reason: Optional[str]
    excess: float = float("nan")  # p10 / floor - 1; nan without a floor

    @property
    def stable(self) -> bool:
        return self.reason is None

    def badness(self, rule: StabilityRule) -> float:
        """How far past the rule it is: the largest of spread, drift and excess over their
        thresholds (<= 1: stable)."""
        excess = self.excess / rule.max_excess if np.isfinite(self.excess) else 0.0
        return max(self.spread / rule.max_spread, self.drift / rule.max_drift, excess)


def inliers(samples: Sequence[float], outlier_mads: float) -> np.ndarray:
    """A mask of the samples within ``outlier_mads`` robust standard deviations of their
    median; every sample when their MAD is zero."""
    x = np.asarray(samples, dtype=np.float64)
    median = np.median(x)
    mad = np.median(np.abs(x - median))
    if mad == 0:
        return np.ones(x.shape, dtype=bool)
    return np.abs(x - median) <= outlier_mads * _MAD_TO_SIGMA * mad


def judge(rounds: Sequence[Sequence[float]], rule: StabilityRule, floor_s: Optional[float] = None) -> Verdict:
    """Judge samples timed in interleaved ``rounds`` (each a list of seconds, in time order),
    and their p10 against ``floor_s``, the least the measured thing can take, where known.

    Outliers are rejected over all rounds together, and the spread and statistics are of
    the kept samples. The drift is between the fastest samples of the rounds as measured: a
    spell that slowed a whole round is a drift even where rejection would have hidden it
    (or, slowing most rounds, kept only the slow samples).
    """
    sizes = [len(r) for r in rounds]
    if sum(sizes) == 0:
        raise ValueError("no samples to judge")
    x = np.concatenate([np.asarray(r, dtype=np.float64) for r in rounds if len(r)])
    keep = inliers(x, rule.outlier_mads)
    kept = x[keep]
    p10, p50, p90 = np.percentile(kept, [10, 50, 90])
    spread = float(p90 / p10 - 1.0) if p10 > 0 else float("inf")
    speeds = [min(r) for r in rounds if len(r)]
    drift = float(max(speeds) / min(speeds) - 1.0) if min(speeds) > 0 else float("inf")
    reasons: List[str] = []
    if spread > rule.max_spread:
        reasons.append(f"spread p90/p10 {100 * spread:.0f}% > {100 * rule.max_spread:g}%")
    if drift > rule.max_drift:
        reasons.append(f"drift between rounds {100 * drift:.0f}% > {100 * rule.max_drift:g}%")
    excess = float(p10 / floor_s - 1.0) if floor_s else float("nan")
    if excess > rule.max_excess:
        reasons.append(f"p10 {100 * excess:.0f}% above the sum of its fastest parts > {100 * rule.max_excess:g}%")
    return Verdict(float(p50), float(p10), float(p90), spread, drift, int(keep.sum()), int((~keep).sum()),
                   "; ".join(reasons) or None, excess)


def remeasure(verdict: Verdict, attempts: int, rule: StabilityRule, *, elapsed_s: float, time_cap_s: float) -> bool:
    """Measure again? Only an unstable measurement, after at most ``1 + rule.remeasure``
    ``attempts`` in all, and only while the configuration has spent less than ``time_cap_s``."""
    return not verdict.stable and attempts <= rule.remeasure and elapsed_s < time_cap_s


def steadiest(verdicts: Sequence[Verdict], rule: StabilityRule) -> int:
    """The index of the measurement to keep: the first stable one, else the least unstable."""
    for i, verdict in enumerate(verdicts):
        if verdict.stable:
            return i
    return int(np.argmin([v.badness(rule) for v in verdicts]))


def interleave_until_stable(subjects: int, visit: Callable[[int, int], Optional[List[float]]], rule: StabilityRule,
                            *, rounds: int, time_cap_s: float, pause_s: float = 0.0,
                            floor: Optional[Callable[[int], Optional[float]]] = None,
                            clock: Callable[[], float] = time.perf_counter,
                            sleep: Callable[[float], None] = time.sleep) -> List[List[Verdict]]:
    """Measure ``subjects`` configurations (numbered from 0) in interleaved rounds, judge each,
    and measure the unstable ones again.

    A measurement is ``rounds`` rounds; each round calls ``visit(i, r)`` once for every subject
    ``i`` being measured, in turn, so a slow spell of the machine falls on the same round of
    many subjects (a drift each one shows) rather than on every sample of one. ``visit``
    returns that visit's samples (seconds), or None when the subject failed (the caller keeps
    why): it is measured no more. The subjects that ``remeasure`` then allows (each one's own
    visits counted against ``time_cap_s``) are measured again together, after ``pause_s``.
    ``floor(i)``, if given, is subject ``i``'s floor for the excess test when it is judged.

    The whole takes ``time_cap_s`` per subject at most (started visits finish): past that
    budget no visit starts, a measurement short of its rounds is unstable for that reason,
    and a subject never visited has no verdict. Returns each subject's verdicts, in order;
    ``steadiest`` picks the one to keep.
    """
    verdicts: List[List[Verdict]] = [[] for _ in range(subjects)]
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
                floor_s = floor(i) if floor else None
                verdicts[i].append(_short(judge(taken, rule, floor_s), len(taken), rounds, budget_s))
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
