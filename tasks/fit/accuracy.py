"""Fit a calibration from measured rows, and judge it on held-out configurations.

``fit_calibration`` turns ``baseline`` rows (``tasks.measure.baseline``) of the baseline and its
variations into operator models (``tasks.fit.opmodel``), as ``opmodel`` rows. ``accuracy_rows``
projects each held-out configuration from those models and sets it beside what was
measured, per operator class and end to end (``op_class`` "step": the plain, unprofiled
step), as ``accuracy`` rows (the study's Fig. 13). A held-out configuration that was
also fitted raises ``HeldOutLeak``: its error would say nothing. One whose measurement
stayed unstable (status ``unstable``, ``tasks.measure.stability``) is projected and stored
with that status and its reason, but not judged. Unstable fit inputs are fitted all the
same: their class times are the fastest of all their profiled steps, and leaving a
variation out would narrow the range the fit covers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.fit.opmodel import fit_operators
from tasks.identity import content_hash
from tasks.measure.stability import STATUS_UNSTABLE
from tasks.model.projection.operators import MODELLED_CLASSES, STEP, UNATTRIBUTED, class_column
from tasks.model.projection.opmodel import HYPERPARAMETERS, OPMODEL_VERSION, MeasuredRange, OperatorModel, predict

__all__ = ["operator_model_key", "accuracy_key", "newest_fit", "OPMODEL_SCHEMA", "OPMODEL_SCHEMA_VERSION",
           "ACCURACY_SCHEMA", "ACCURACY_SCHEMA_VERSION",
           "HeldOutLeak", "why_not_fit", "fit_calibration", "models_from_rows", "accuracy_rows",
           "error_summary", "timed_rows", "Judged", "fit_and_judge"]

OPMODEL_SCHEMA_VERSION = 1
ACCURACY_SCHEMA_VERSION = 1

_RANGE = [(f"{k}_{end}", pa.float64()) for k in ("h", "sl", "b", "tp") for end in ("min", "max")]
OPMODEL_SCHEMA = pa.schema([
    ("key", pa.string()), ("calibration", pa.string()), ("calibration_id", pa.string()), ("op_class", pa.string()),
    ("alpha_s", pa.float64()), ("beta_s", pa.float64()), ("d_half", pa.float64()),
    ("rms_rel_error", pa.float64()), ("max_rel_error", pa.float64()), ("points", pa.int64()),
    ("device_model", pa.string()), ("dtype", pa.string()), ("torch_version", pa.string()), ("fitted_at", pa.float64()),
    ("status", pa.string()),
] + _RANGE)

ACCURACY_SCHEMA = pa.schema([
    ("key", pa.string()), ("calibration", pa.string()), ("calibration_id", pa.string()), ("device_model", pa.string()),
    ("h", pa.int64()), ("heads", pa.int64()), ("sl", pa.int64()), ("b", pa.int64()), ("tp", pa.int64()),
    ("op_class", pa.string()), ("measured_s", pa.float64()), ("projected_s", pa.float64()),
    ("band_low_s", pa.float64()), ("band_high_s", pa.float64()), ("rel_error", pa.float64()),
    ("extrapolated", pa.bool_()), ("judged", pa.bool_()), ("fitted_at", pa.float64()), ("status", pa.string()),
    ("reason", pa.string()),  # why a row is not judged for its measurement (status unstable); else null
])


def operator_model_key(calibration: str, calibration_id: str, op_class: str) -> str:
    """The lake key of one fitted operator model (kind ``opmodel``): the calibration, the id
    of the fit and the operator class."""
    return content_hash([calibration, calibration_id, op_class], length=32)


def accuracy_key(calibration_id: str, measured: Dict[str, object], op_class: str, judged_from_s: float) -> str:
    """The lake key of one judged projection (kind ``accuracy``): the fit, the measured row it
    is judged against, the operator class and the shortest step judged."""
    return content_hash([calibration_id, measured, op_class, judged_from_s], length=32)


def newest_fit(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows of each calibration's newest fit (by ``fitted_at``)."""
    if rows.empty or "fitted_at" not in rows.columns:
        return rows
    newest = rows.groupby("calibration")["fitted_at"].transform("max")
    return rows[(rows["fitted_at"] == newest) | newest.isna()]


class HeldOutLeak(ValueError):
    """A held-out configuration was also used in the fit."""


def _configs(rows: pd.DataFrame) -> Dict[str, np.ndarray]:
    return {k: rows[k].to_numpy(dtype=np.float64) for k in HYPERPARAMETERS}


def _class_times(rows: pd.DataFrame, op_class: str) -> np.ndarray:
    column = "unattributed_s" if op_class == UNATTRIBUTED else class_column(op_class)
    return rows[column].to_numpy(dtype=np.float64)


def why_not_fit(planned: int, fit_rows: pd.DataFrame, stable_measurements: int) -> Optional[str]:
    """Why the measured ``fit_rows`` (of ``planned`` fit configurations) are not to be
    fitted, or None: fewer than 3 measured, or not one measurement of the calibration
    (``stable_measurements`` counts those of every role) stable.

    Unstable fit configurations are fitted: a class's time is the fastest of its profiled
    steps, which a machine that was quiet for part of the calibration leaves right (on a
    2-core machine beside a looping `commscale run`, 15 of 16 fit inputs unstable, the fit
    still projected the stable held-out steps within 8%). With no stable measurement at
    all there is no sign the machine was ever quiet, and the fastest steps describe its
    load, not the device.
    """
    if len(fit_rows) < 3:
        return f"{len(fit_rows)} of {planned} fit configurations measured; a fit needs at least 3"
    if stable_measurements == 0:
        return (f"no measurement stable ({len(fit_rows)} of {planned} fit configurations measured, every one "
                "unstable): the machine was too busy to calibrate")
    return None


def fit_calibration(name: str, fit_rows: pd.DataFrame, *, fitted_at: float) -> Tuple[pa.Table, str]:
    """Operator models of every class from ``fit_rows`` (ok ``baseline`` rows of the
    baseline and its variations); returns the ``opmodel`` rows and the calibration id
    (a hash of the measurements fitted, keys and measured values, and the model's version:
    the same measurements fitted by the same model give the same id, and a configuration
    measured again, with other times, gives a new one, so its fit is stored beside the old)."""
    if len(fit_rows) < 3:
        raise ValueError(f"calibration {name}: {len(fit_rows)} measured configurations; a fit needs at least 3")
    calibration_id = content_hash([OPMODEL_VERSION, fit_rows.sort_values("key").to_dict("records")])
    models = fit_operators(_configs(fit_rows), {c: _class_times(fit_rows, c) for c in MODELLED_CLASSES})
    box = MeasuredRange.of(_configs(fit_rows))
    first = fit_rows.iloc[0]
    rows = [dict(key=operator_model_key(name, calibration_id, c), calibration=name,
                 calibration_id=calibration_id, device_model=first["device_model"], dtype=first["dtype"],
                 torch_version=first["torch_version"], fitted_at=fitted_at, status="ok", **m.as_row(),
                 **{f"{k}_min": box.low[k] for k in box.low}, **{f"{k}_max": box.high[k] for k in box.high})
            for c, m in models.items()]
    return pa.Table.from_pylist(rows, schema=OPMODEL_SCHEMA), calibration_id


def models_from_rows(rows: pd.DataFrame) -> Tuple[Dict[str, OperatorModel], MeasuredRange]:
    """The operator models and measured range of one calibration's ``opmodel`` rows."""
    fields = ("op_class", "alpha_s", "beta_s", "d_half", "rms_rel_error", "max_rel_error", "points")
    models = {r["op_class"]: OperatorModel(**{f: r[f] for f in fields}) for r in rows.to_dict("records")}
    missing = set(MODELLED_CLASSES) - set(models)
    if missing:
        raise ValueError(f"the calibration's operator models lack {sorted(missing)}")
    first = rows.iloc[0]
    return models, MeasuredRange({k: float(first[f"{k}_min"]) for k in ("h", "sl", "b", "tp")},
                                 {k: float(first[f"{k}_max"]) for k in ("h", "sl", "b", "tp")})


def _shape(row) -> Tuple[int, ...]:
    return tuple(int(row[k]) for k in HYPERPARAMETERS)


def accuracy_rows(name: str, calibration_id: str, models: Dict[str, OperatorModel], box: MeasuredRange,
                  fit_rows: pd.DataFrame, held_rows: pd.DataFrame, *, judged_from_s: float,
                  fitted_at: float = float("nan")) -> pa.Table:
    """Projected against measured, per class and end to end, for every held-out row.

    Raises ``HeldOutLeak`` if a held-out configuration is among ``fit_rows``. A row is
    ``judged`` when its measured step lasts at least ``judged_from_s`` (short steps are
    dominated by launch floors and noise, and are reported but not judged) and its
    measurement is stable (an ``unstable`` one keeps that status and its reason). A row's key
    covers the calibration id, the held-out measurement (its key and measured values), the
    class and ``judged_from_s``: the same judgement is stored once, a changed one beside it.
    """
    fitted = {_shape(r) for r in fit_rows.to_dict("records")}
    leaked = [s for s in (_shape(r) for r in held_rows.to_dict("records")) if s in fitted]
    if leaked:
        raise HeldOutLeak(f"held-out configurations {leaked} (h, heads, sl, b, tp) were also used in the fit of {name}")
    out: List[dict] = []
    configs = _configs(held_rows)
    outside = box.outside(configs) if len(held_rows) else np.zeros(0, dtype=bool)
    step, step_band = predict(models, MODELLED_CLASSES, configs)
    columns = [(c, [c], _class_times(held_rows, c)) for c in MODELLED_CLASSES]
    columns.append((STEP, list(MODELLED_CLASSES), held_rows["plain_step_s"].to_numpy(dtype=np.float64)))
    stable = (held_rows["status"] != STATUS_UNSTABLE).to_numpy()
    judged = (held_rows["plain_step_s"].to_numpy(dtype=np.float64) >= judged_from_s) & stable
    for op_class, classes, measured in columns:
        projected, band = (step, step_band) if op_class == STEP else predict(models, classes, configs)
        for i, row in enumerate(held_rows.to_dict("records")):
            error = (projected[i] - measured[i]) / measured[i] if measured[i] > 0 else float("nan")
            key = accuracy_key(calibration_id, row, op_class, judged_from_s)
            out.append(dict(key=key, calibration=name,
                            calibration_id=calibration_id, device_model=row["device_model"],
                            **{k: int(row[k]) for k in HYPERPARAMETERS}, op_class=op_class,
                            measured_s=float(measured[i]), projected_s=float(projected[i]),
                            band_low_s=float(projected[i] - band[i]), band_high_s=float(projected[i] + band[i]),
                            rel_error=float(error), extrapolated=bool(outside[i]), judged=bool(judged[i]),
                            fitted_at=fitted_at, status="ok" if stable[i] else STATUS_UNSTABLE,
                            reason=None if stable[i] else row["reason"]))
    return pa.Table.from_pylist(out, schema=ACCURACY_SCHEMA)


def error_summary(accuracy: pd.DataFrame, op_classes: Sequence[str] = (STEP,)) -> pd.DataFrame:
    """Median and worst absolute relative error of judged rows, per class."""
    judged = accuracy[accuracy["judged"] & accuracy["op_class"].isin(list(op_classes))]
    grouped = judged.assign(abs_error=judged["rel_error"].abs()).groupby("op_class")["abs_error"]
    return pd.DataFrame({"configs": grouped.size(), "median_abs_error": grouped.median(),
                         "worst_abs_error": grouped.max()})


def timed_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """The ``baseline`` rows that were measured, stable or not: an unstable one the time cap
    left unmeasured has no times, and an infeasible or out-of-memory one none either."""
    return rows[rows["status"].isin(["ok", STATUS_UNSTABLE]) & rows["plain_step_s"].notna()]


@dataclass(frozen=True)
class Judged:
    """A calibration fitted from its measurements and judged on its held-out ones; or, with
    ``calibration_id`` None, why it was not fitted (``not_fitted``)."""

    calibration_id: Optional[str]
    opmodels: Optional[pa.Table]
    accuracy: Optional[pa.Table]
    fit_s: float
    not_fitted: Optional[str] = None


def fit_and_judge(name: str, rows: pd.DataFrame, *, planned: int, judged_from_s: float) -> Judged:
    """Fit calibration ``name`` from the measured ``baseline`` rows of its baseline and
    variations (``planned`` of them were asked for) and judge it on its held-out rows."""
    ok = timed_rows(rows)
    fit_rows, held = ok[ok["role"] != "held_out"], ok[ok["role"] == "held_out"]
    not_fitted = why_not_fit(planned, fit_rows, int((ok["status"] == "ok").sum()))
    if not_fitted:
        return Judged(None, None, None, 0.0, not_fitted)
    started, fitted_at = time.perf_counter(), time.time()
    opmodels, calibration_id = fit_calibration(name, fit_rows, fitted_at=fitted_at)
    models, box = models_from_rows(opmodels.to_pandas())
    accuracy = accuracy_rows(name, calibration_id, models, box, fit_rows, held, judged_from_s=judged_from_s,
                             fitted_at=fitted_at)
    return Judged(calibration_id, opmodels, accuracy, time.perf_counter() - started)
