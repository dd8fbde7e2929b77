"""The headline of a validation, defined once for ``commscale validate``, the report and
``scripts/bench_validate.py``: how far the cost model is from published figures it was not
fitted to.

- **shipped**: the records of every shipped dataset (all but ``HELD_OUT``) whose row no figure
  was fitted to (``fitted_to`` empty): the out-of-sample mean and max |error|;
- **with fitted**: the same over every shipped record, the rows a profile figure or a model
  constant was fitted to included (they sit near 0 % by construction), for comparison;
- **held out**: the records of ``HELD_OUT`` (other frameworks, precisions and generations),
  never fitted to and kept apart from the shipped rows.

Errors are signed fractions (predicted / published - 1); the figures here are of |error|,
and each sum's lean (``records.lean``): the signed mean of how much faster than measured the
model has the work run, so a systematic optimism shows beside the size of the errors.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Sequence

from tasks.validation.records import HELD_OUT, ValidationRecord, abs_error_summary, lean

__all__ = ["ErrorFigures", "Headline", "headline", "headline_of", "headline_lines"]


@dataclass(frozen=True)
class ErrorFigures:
    """``n`` figures' mean and max |error| and their lean (``records.lean``), as fractions."""

    n: int
    mean: float
    worst: float
    lean: float


@dataclass(frozen=True)
class Headline:
    """The three sums of a validation (None where no record falls in one) and how many shipped
    records were left out of the first for being fitted."""

    shipped: Optional[ErrorFigures]
    with_fitted: Optional[ErrorFigures]
    fitted: int
    held_out: Optional[ErrorFigures]


def _figures(errors: Sequence[float], units: Sequence[str]) -> Optional[ErrorFigures]:
    """``records.abs_error_summary`` and ``records.lean`` of signed ``errors`` (figures in
    ``units``) with their count; None for none."""
    return ErrorFigures(len(errors), *abs_error_summary(errors), lean(errors, units)) if errors else None


def headline(datasets: Iterable[str], errors: Iterable[float], fitted: Iterable[str],
             units: Iterable[str]) -> Headline:
    """The headline of records given column by column: each one's dataset, signed error,
    ``fitted_to`` (empty or None: not fitted) and unit."""
    rows = list(zip(datasets, errors, fitted, units, strict=True))

    def figures(chosen) -> Optional[ErrorFigures]:
        return _figures([e for _, e, _, _ in chosen], [u for _, _, _, u in chosen])

    shipped = [row for row in rows if row[0] != HELD_OUT]
    return Headline(shipped=figures([row for row in shipped if not row[2]]),
                    with_fitted=figures(shipped),
                    fitted=sum(bool(row[2]) for row in shipped),
                    held_out=figures([row for row in rows if row[0] == HELD_OUT]))


def headline_of(records: Sequence[ValidationRecord]) -> Headline:
    """``headline`` of ``ValidationRecord``s."""
    return headline([r.dataset for r in records], [r.error for r in records], [r.fitted_to for r in records],
                    [r.unit for r in records])


def _text(figures: ErrorFigures) -> str:
    way = "faster" if figures.lean >= 0 else "slower"
    return (f"mean |error| {100 * figures.mean:.1f}%, max {100 * figures.worst:.1f}%, lean "
            f"{100 * figures.lean:+.1f}% ({way} than measured) over {figures.n}")


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
