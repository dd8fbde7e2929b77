"""How ``commscale search`` shows what it found: the layout tables, the optimum line, the
"why it wins" line (or why the Pareto front is what it is). Rendering only: every figure
comes from ``sweeps.search``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:  # the search's modules load Optuna: imported where a search runs, not with the CLI
    import pandas as pd

    from sweeps.config import SearchSetup
    from sweeps.search.front import FrontGap, WhyFront
    from sweeps.search.results import OptimumGap, WhyBest
    from sweeps.search.trust import Trust

__all__ = ["record_line", "layout_table", "optimum_line", "front_line", "why_line", "why_front_line", "explain",
           "explain_front", "trust_lines"]


def record_line(setup: SearchSetup) -> str:
    """What the study costs, as its rows record it: the model, hardware and stack by name and
    fingerprint, the preset and the overrides given."""
    record = setup.record()
    overrides = record["overrides"] or "none"
    return (f"Costed: model {setup.model.name} (fingerprint {record['model_fp']}), hardware {setup.hardware.name} "
            f"({record['hardware_fp']}), stack {record['stack']} ({record['stack_fp']}); preset {record['preset']}, "
            f"overrides: {overrides}")


def layout_table(title: str, rows: pd.DataFrame, extra: Sequence[str] = ()) -> Table:
    """Layouts one a row: label, family, step, exposed share, memory, tokens/s per device."""
    from sweeps.search.results import layout_of

    table = Table(title=title, title_justify="left")
    for name in ("layout", "family", "step s", "exposed comm", "memory GB", "tokens/s/device", *extra):
        table.add_column(name, justify="left" if name in ("layout", "family") else "right", no_wrap=True)
    for _, row in rows.iterrows():
        table.add_row(layout_of(row).describe(), row["family"], f"{row['step_time_s']:.3f}",
                      f"{row['exposed_comm_share']:.1%}", f"{row['memory_per_device_bytes'] / 1e9:.1f}",
                      f"{row['tokens_per_s_per_device']:,.0f}", *(str(row[e]) for e in extra))
    return table


def _distance(value: float, optimum: float) -> str:
    """How far ``value`` lies from ``optimum``: "within X%", or, from a zero optimum that a
    fraction cannot measure, how much above it."""
    from sweeps.search.results import relative_gap

    gap = relative_gap(value, optimum)
    return f"within {gap:.2%}" if math.isfinite(gap) else f"{abs(value - optimum):.6g} from it (a zero optimum)"


def optimum_line(gap: OptimumGap) -> str:
    """The exhaustive optimum beside the search's best (and the sampler's own best); where
    the objective is not the step time and the best ties the optimum on it, how far the
    tie-break (the shorter step) left the search's best from the optimum layout."""
    if gap.sampled_best is None:
        sampled = ""
    elif gap.sampled_gap is None:
        sampled = " (the sampler's own trials: no feasible layout)"
    else:
        sampled = f" (the best of the sampler's own trials is {_distance(gap.sampled_best, gap.optimum)})"
    line = (f"Exhaustive optimum of the space: {gap.column} = {gap.optimum:.6g}; the search's best is "
            f"{_distance(gap.best, gap.optimum)}{sampled}")
    if gap.column != "step_time_s" and gap.gap == 0:
        line += (f"; ties on {gap.column} go to the shorter step: the search's best steps in {gap.best_step_time_s:.4g}"
                 f" s, {_distance(gap.best_step_time_s, gap.optimum_step_time_s)} of the optimum layout's "
                 f"{gap.optimum_step_time_s:.4g} s")
    return line


def front_line(gap: FrontGap) -> str:
    """The exhaustive Pareto front beside the search's trials."""
    return (f"Exhaustive Pareto front of the space: {gap.layouts} layouts, from {gap.least_share:.1%} of the step "
            f"exposed to {gap.most_tokens_per_s:,.0f} tokens/s/device; the search tried {gap.found} of them")


def _tie_break(why: WhyBest) -> str:
    """How a tie on the objective was broken: the shorter step, the smaller memory, or not."""
    from sweeps.search.results import relative_gap

    (step, step_second), (memory, memory_second) = why.step_time_s, why.memory_gb
    if why.decided_by == "step_time_s":
        return (f"; the tie goes to the shorter step: {step:.4g} s vs {step_second:.4g} s "
                f"({relative_gap(step, step_second):.2%} shorter)")
    if why.decided_by == "memory_per_device_bytes":
        return (f"; the steps tie too ({step:.4g} s), so the smaller memory decides: {memory:.1f} GB vs "
                f"{memory_second:.1f} GB per device")
    return "; they tie on step time and memory too: either will do"


def why_line(why: WhyBest) -> str:
    """One line on why the best layout beats the runner-up: the objective (or, tied on it,
    the step time, then memory), the fields they differ in, the step terms the best saves on,
    and a faster neighbour that memory rules out."""
    (best, second), (exposed, exposed_second) = why.values, why.exposed_comm_s
    if why.decided_by == why.column:
        margin = abs(best - second) / abs(second) if second else 0.0
        line = (f"Why {why.best} wins: {why.column} {best:.6g} vs {second:.6g} for the runner-up {why.runner_up} "
                f"({margin:.2%} better)")
    else:
        line = f"Why {why.best} wins: {why.column} {best:.6g}, as for the runner-up {why.runner_up}{_tie_break(why)}"
    differs = ", ".join(f"{name} {mine} vs {theirs}" for name, mine, theirs in why.differs)
    if why.savings:
        decides = f"{why.savings[0][0]} decides ({why.savings[0][1]:.3f} s less)" + "".join(
            f", then {name} ({saved:.3f} s less)" for name, saved in why.savings[1:2])
    else:
        decides = "no term of the step is shorter"
    line += f"; exposed comm {exposed:.3f} s vs {exposed_second:.3f} s; they differ in {differs}; {decides}"
    if why.memory_bound is not None:
        change, label, value, needs = why.memory_bound
        line += (f"; memory decides against {change} ({label}: {why.column} {value:.6g}, but {needs:.1f} GB per "
                 f"device, {why.usable_gb:.1f} GB usable)")
    return line


def why_front_line(why: WhyFront) -> str:
    """One line on why the Pareto front holds what it holds: its two ends."""
    if why.size == 1:
        return (f"Why {why.fastest} is the whole front: of the {why.tried} distinct feasible layouts tried it both "
                f"exposes least ({why.leanest_share:.1%} of the step) and is fastest ({why.fastest_speed:,.0f} "
                "tokens/s/device)")
    return (f"Why these {why.size} layouts: {why.fastest} is fastest ({why.fastest_speed:,.0f} tokens/s/device, "
            f"{why.fastest_share:.1%} exposed) and {why.leanest} exposes least ({why.leanest_share:.1%}, "
            f"{why.leanest_speed:,.0f} tokens/s/device); each between trades exposed communication for throughput, "
            f"and each of the other {why.tried - why.size} distinct feasible layouts tried is beaten on both by one "
            "of them")


def _legend(out: Console) -> None:
    """The legend of the layout labels."""
    from tasks.model.terms.layout import LAYOUT_LEGEND

    out.print(f"Legend: {LAYOUT_LEGEND}", soft_wrap=True, highlight=False)


def explain(out: Console, why: Optional[WhyBest], top: pd.DataFrame) -> None:
    """The legend of the layout labels, and one line on why the best layout of ``top``
    (distinct feasible layouts, best first) wins, or that it is the only one."""
    from sweeps.search.results import layout_of

    _legend(out)
    if why is not None:
        out.print(why_line(why), soft_wrap=True, highlight=False)
    elif len(top) == 1:
        out.print(f"Why {layout_of(top.iloc[0]).describe()} wins: it is the only feasible layout tried",
                  soft_wrap=True, highlight=False)


def explain_front(out: Console, front: pd.DataFrame, rows: pd.DataFrame) -> None:
    """The legend of the layout labels, and one line on why the Pareto ``front`` of ``rows``
    holds what it holds."""
    from sweeps.search.front import why_front

    _legend(out)
    why = why_front(front, rows)
    if why is not None:
        out.print(why_front_line(why), soft_wrap=True, highlight=False)


def trust_lines(verdict: Optional[Trust], memory: Optional[Tuple[float, float]]) -> List[str]:
    """How far to trust the ranking: whether the top layouts lie within the model's measured
    error on comparable published runs (then they are a tie), and whether the winner needs
    nearly all of a device's usable memory."""
    from sweeps.search.trust import MEMORY_MARGIN

    lines = []
    if verdict is not None:
        error = verdict.error
        basis = (f"the model's {error.mean:.1%} mean error on {error.runs} published runs of {error.scope} "
                 f"({error.hardware})")
        if verdict.tied > 1:
            more = "at least " if verdict.next_gap is not None and verdict.next_gap <= error.mean else ""
            lines.append(f"Trust: {more}the top {verdict.tied} lie within {verdict.spread:.1%} in step time, "
                         f"inside {basis}: treat them as a tie")
        else:
            lines.append(f"Trust: the runner-up's step time is {verdict.next_gap:.1%} from the winner's, beyond "
                         f"{basis}: the ranking stands")
    if memory is not None:
        needs, usable = memory
        lines.append(f"Memory: the winner needs {needs:.1f} GB of the {usable:.1f} GB usable per device: within "
                     f"{1 - MEMORY_MARGIN:.0%} of usable memory, where the memory model's own error could decide "
                     "whether it fits")
    return lines
