"""One validation record per published row: what was measured, what commscale predicts, and
the signed error, as plain data and as the lake's ``validation`` table."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import pyarrow as pa

from tasks.model.projection.grid import COST_MODEL_VERSION
from tasks.model.step.plan import STEP_MODEL_VERSION

__all__ = ["MODEL_VERSION", "DATASETS", "HELD_OUT", "DATA_FILES", "GEMM_SWEEPS_FILE", "dataset_files",
           "error_summary", "abs_error_summary", "ValidationRecord", "VALIDATION_SCHEMA", "VALIDATION_SCHEMA_VERSION",
           "records_table", "signed_error", "TIME_UNITS", "speed_error", "lean", "RowError", "fitted_figures"]

#: What a record validates: a whole training run, one layer's forward/backward time, one
#: collective's bus bandwidth at one size, one GEMM's throughput, and a held-out training run
#: (``HELD_OUT``: other frameworks, precisions and generations, never fitted to, reported apart).
DATASETS = ("runs", "layers", "collectives", "gemm", "holdout")
#: The dataset of held-out runs: predicted as the runs are, summed up apart from the shipped ones.
HELD_OUT = "holdout"
#: The file of ``conf/data`` each dataset is read from (``--runs`` stands in for the runs');
#: the gemm dataset also reads the K sweeps of ``GEMM_SWEEPS_FILE`` (``dataset_files``).
DATA_FILES: Dict[str, str] = {"runs": "published_runs.csv", "layers": "layer_times.csv",
                              "collectives": "collective_ladders.csv", "gemm": "gemm_efficiency.csv",
                              HELD_OUT: "holdout_runs.csv"}
GEMM_SWEEPS_FILE = "gemm_k_sweeps.csv"


def dataset_files(dataset: str) -> Tuple[str, ...]:
    """Every file of ``conf/data`` that ``dataset`` reads, its ``DATA_FILES`` entry first."""
    return (DATA_FILES[dataset], GEMM_SWEEPS_FILE) if dataset == "gemm" else (DATA_FILES[dataset],)


#: 2: ``fitted_to``, the profile figures a row set (empty: none).
VALIDATION_SCHEMA_VERSION = 2


def fitted_figures(cell: Optional[str]) -> str:
    """A data row's ``fitted_to`` cell as a record holds it: the names of the figures fitted to
    the row (``PROFILE.FIELD`` of ``conf/hardware``, or a ``tasks.model`` constant), one space
    apart, in the cell's order; "" for a blank cell or a file without the column."""
    return " ".join((cell or "").split())

#: What a validation row is stamped with: the per-layer and whole-step models' versions.
MODEL_VERSION = f"{COST_MODEL_VERSION}+{STEP_MODEL_VERSION}"


def error_summary(records: Sequence["ValidationRecord"]) -> Tuple[float, float]:
    """Mean and max |error| (fractions) of ``records`` (at least one)."""
    return abs_error_summary([r.error for r in records])


def abs_error_summary(errors: Sequence[float]) -> Tuple[float, float]:
    """Mean and max |error| (fractions) of signed ``errors`` (at least one)."""
    magnitudes = [abs(e) for e in errors]
    return sum(magnitudes) / len(magnitudes), max(magnitudes)


#: Units of a time (a step, a kernel): a prediction above the published time is slower, the
#: reverse of a rate's (tokens/s, TFLOP/s, MFU, bus bandwidth).
TIME_UNITS = frozenset({"s", "ms", "us"})


def speed_error(error: float, unit: str) -> float:
    """How much faster the prediction has the work run than it was measured, from a signed
    ``error`` (``signed_error``) of a figure in ``unit``: the error itself for a rate,
    1 / (1 + error) - 1 (published / predicted - 1) for a time (``TIME_UNITS``). Positive:
    the model is optimistic."""
    return 1.0 / (1.0 + error) - 1.0 if unit in TIME_UNITS else error


def lean(errors: Sequence[float], units: Sequence[str]) -> float:
    """The signed mean of ``speed_error`` over figures (at least one): how far, on average,
    the model leans to predicting faster (positive) or slower than measured."""
    speeds = [speed_error(e, u) for e, u in zip(errors, units, strict=True)]
    return sum(speeds) / len(speeds)


def signed_error(predicted: float, published: float) -> float:
    """predicted / published - 1: positive where commscale predicts more than was measured."""
    return predicted / published - 1.0


class RowError(ValueError):
    """A row that cannot be predicted (unknown hardware, impossible layout, bad value).

    The message names the file, the row (1-based, after the header) and the field."""


@dataclass(frozen=True)
class ValidationRecord:
    """One published figure beside commscale's prediction of it.

    ``row`` is the 1-based data row of its file; ``metric`` names the figure (``iter_time``,
    ``tflops_per_gpu``, ``fwd_ms``, ``bwd_ms``, ``busbw``, ``gemm_tflops``) in ``unit``;
    ``error`` is ``signed_error(predicted, published)``; ``detail`` says, in a few words, what
    was predicted (the layout or the shape); ``fitted_to`` names the figures fitted to the row
    (``fitted_figures`` of its file's ``fitted_to`` cell; "" where none was): such a row is in
    sample, shown but left out of the headline (``tasks.validation.headline``)."""

    dataset: str
    source: str
    row: int
    model: str
    hardware: str
    metric: str
    unit: str
    published: float
    predicted: float
    error: float
    detail: str
    cost_model_version: str
    fitted_to: str = ""


VALIDATION_SCHEMA = pa.schema([
    ("dataset", pa.string()), ("source", pa.string()), ("row", pa.int64()), ("model", pa.string()),
    ("hardware", pa.string()), ("metric", pa.string()), ("unit", pa.string()), ("published", pa.float64()),
    ("predicted", pa.float64()), ("error", pa.float64()), ("detail", pa.string()),
    ("cost_model_version", pa.string()), ("fitted_to", pa.string()),
])


def records_table(records: Sequence[ValidationRecord]) -> pa.Table:
    """The records as a ``VALIDATION_SCHEMA`` table (the lake's ``validation`` kind)."""
    rows: List[dict] = [asdict(r) for r in records]
    return pa.Table.from_pylist(rows, schema=VALIDATION_SCHEMA)
