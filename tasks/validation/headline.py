"""The headline of a validation, defined once for ``commscale validate``, the report and
``scripts/bench_validate.py``: how far the cost model is from published figures it was not
fitted to.

- **shipped**: the records of every shipped dataset (all but ``HELD_OUT``) whose row no figure
  was fitted to (``fitted_to`` empty): the out-of-sample mean and max |error|;
- **with fitted**: the same over every shipped record, the rows a profile figure or a model
  constant was fitted to included (they sit near 0 % by construction), for comparison;
- **held out**: the records of ``HELD_OUT`` (other frameworks, precisions and generations),
  never fitted to and kept apart from the shipped rows.

Errors are signed fractions (predicted / published - 1); the figures here are of |error|.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence

from tasks.validation.records import HELD_OUT, ValidationRecord, abs_error_summary

__all__ = ["ErrorFigures", "Headline", "headline", "headline_of", "headline_lines"]


@dataclass(frozen=True)
class ErrorFigures:
    """``n`` figures' mean and max |error|, as fractions."""

    n: int
    mean: float
    worst: float


@dataclass(frozen=True)
class Headline:
    """The three sums of a validation (None where no record falls in one) and how many shipped
    records were left out of the first for being fitted."""

    shipped: Optional[ErrorFigures]
    with_fitted: Optional[ErrorFigures]
    fitted: int
    held_out: Optional[ErrorFigures]


def _figures(errors: Sequence[float]) -> Optional[ErrorFigures]:
    """``records.abs_error_summary`` of signed ``errors`` with their count; None for none."""
    return ErrorFigures(len(errors), *abs_error_summary(errors)) if errors else None


def headline(datasets: Iterable[str], errors: Iterable[float], fitted: Iterable[str]) -> Headline:
    """The headline of records given column by column: each one's dataset, signed error and
    ``fitted_to`` (empty or None: not fitted)."""
    rows = list(zip(datasets, errors, fitted, strict=True))
    shipped = [(e, bool(f)) for d, e, f in rows if d != HELD_OUT]
    return Headline(shipped=_figures([e for e, was_fitted in shipped if not was_fitted]),
                    with_fitted=_figures([e for e, _ in shipped]),
                    fitted=sum(was_fitted for _, was_fitted in shipped),
                    held_out=_figures([e for d, e, _ in rows if d == HELD_OUT]))


def headline_of(records: Sequence[ValidationRecord]) -> Headline:
    """``headline`` of ``ValidationRecord``s."""
    return headline([r.dataset for r in records], [r.error for r in records], [r.fitted_to for r in records])


def _text(figures: ErrorFigures) -> str:
    return f"mean |error| {100 * figures.mean:.1f}%, max {100 * figures.worst:.1f}% over {figures.n}"


def headline_lines(h: Headline) -> List[str]:
    """The headline in words, one line per sum that has records."""
    lines = []
    if h.shipped is not None:
        left_out = f" (the {h.fitted} fitted rows left out)" if h.fitted else ""
        lines.append(f"Shipped, out of sample: {_text(h.shipped)}{left_out}")
    elif h.fitted:
        lines.append(f"Shipped, out of sample: no record (all {h.fitted} shipped rows were fitted to)")
    if h.with_fitted is not None and h.fitted:
        lines.append(f"Shipped, fitted rows included: {_text(h.with_fitted)}")
    if h.held_out is not None:
        lines.append(f"Held out ({HELD_OUT}_runs.csv, never fitted to): {_text(h.held_out)}")
    return lines
