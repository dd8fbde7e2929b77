"""What a sampler is told for a layout that does not fit in memory.

A layout past the device's usable memory has no step time (``step.step_columns`` makes its
metrics NaN). Told the worst value, a sampler learns only that the layout failed, not how
near it came. Where the fastest layouts sit at the edge of memory (a mixture of experts':
the fewer EP ranks, TP ranks or pipeline stages, the less communication and the more
weights per device), TPE then ranks a near miss with a layout ten times over, and most of
its trials go to the region it has learnt is safe. An exterior penalty (Nocedal & Wright,
*Numerical Optimization*, 2nd ed., §17.1) keeps what the trial showed: the step time the
layout would take had it fit (``step_time_if_fit_s``), stretched by how far it is over,

    told = step_time_if_fit_s * (memory / usable) ** MEMORY_PENALTY_EXPONENT

(memory: ``memory_per_device_bytes``; usable: ``StepContext.memory_limit_bytes``), so a
layout 5 % over memory is told 1.05 times its time, one twice over twice it. Only the told
value changes: the row's ``objective`` stays NaN and its status "infeasible", and a
study's best is picked from feasible rows alone. The penalty
applies to the ``step_time`` objective (a time the stretch is a time again); every other
objective tells an infeasible layout the worst value, as before.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MEMORY_PENALTY_EXPONENT", "PENALISED_OBJECTIVES", "sampler_values"]

#: How steeply the told time grows with the memory overshoot: a search setting, not a model
#: figure, chosen among 1, 2, 4 and 8 on the ``moe`` search's sampler benchmark (seeds 0-4 of
#: ``scripts/bench_search.py --preset moe``; 1 brought 4 of 5 within 1 % of the optimum in 5 %
#: of the space, 2 three, 4 and 8 one) and checked on seeds 5-14 (8 of 10).
MEMORY_PENALTY_EXPONENT = 1.0

#: The objectives (names of ``rows.OBJECTIVES``) whose infeasible layouts are told a
#: penalised step time rather than the worst value.
PENALISED_OBJECTIVES = ("step_time",)


def sampler_values(objective: str, values: np.ndarray, feasible: np.ndarray, step_time_if_fit_s: np.ndarray,
                   memory_bytes: np.ndarray, usable_bytes: float) -> np.ndarray:
    """What the sampler is told per layout for ``objective``'s (first) column: ``values``
    where ``feasible``; for a layout over memory under a ``PENALISED_OBJECTIVES`` objective,
    its penalised step time (seconds; see the module); NaN otherwise (told the worst value).
    All arrays of one length; ``usable_bytes`` > 0."""
    told = np.where(feasible, np.asarray(values, dtype=float), np.nan)
    if objective not in PENALISED_OBJECTIVES:
        return told
    over = ~np.asarray(feasible) & np.isfinite(step_time_if_fit_s) & (np.asarray(memory_bytes) > usable_bytes)
    stretch = (np.asarray(memory_bytes, dtype=float) / usable_bytes) ** MEMORY_PENALTY_EXPONENT
    return np.where(over, np.asarray(step_time_if_fit_s, dtype=float) * stretch, told)
