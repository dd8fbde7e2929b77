"""Judging a calibration: an unstable held-out measurement is reported with its reason, not judged."""

import numpy as np
import pandas as pd

from tasks.fit.accuracy import accuracy_rows, error_summary, fit_calibration, models_from_rows, why_not_fit
from tasks.measure.stability import STATUS_UNSTABLE
from tasks.model.projection.operators import MODELLED_CLASSES, STEP, UNATTRIBUTED, class_column
from tasks.model.projection.opmodel import work

BASE = dict(h=512, heads=8, sl=256, b=1, tp=1)


def _times(config):
    """Seconds per class of a configuration under a known law: 10 us + 0.1 ns per unit of work."""
    return {c: 1e-5 + 1e-10 * float(work(c, *(np.float64(config[k]) for k in ("h", "heads", "sl", "b", "tp")))[0])
            for c in MODELLED_CLASSES}


def _row(config, role, varied="none", status="ok", reason=None, slowdown=1.0):
    times = _times(config)
    columns = {(UNATTRIBUTED + "_s" if c == UNATTRIBUTED else class_column(c)): t for c, t in times.items()}
    key = f"{role}-{varied}-" + "-".join(str(config[k]) for k in ("h", "heads", "sl", "b", "tp"))
    return dict(config, key=key, role=role, varied=varied, status=status, reason=reason, device_model="CPU test",
                dtype="fp32", torch_version="0", plain_step_s=slowdown * sum(times.values()), **columns)


def _fit_rows():
    rows = [_row(BASE, "baseline")]
    for name, values in dict(sl=[64, 128, 512, 1024], b=[2, 4, 8], h=[128, 256, 1024], tp=[2, 4, 8]).items():
        for value in values:
            rows.append(_row(dict(BASE, **{name: value}, **({"heads": value // 64} if name == "h" else {})),
                             "variation", name))
    return pd.DataFrame(rows)


def test_an_unstable_held_out_configuration_is_stored_with_its_reason_and_left_out_of_the_judgement():
    fit_rows = _fit_rows()
    opmodels, calibration_id = fit_calibration("t", fit_rows, fitted_at=1.0)
    models, box = models_from_rows(opmodels.to_pandas())
    reason = "unstable after 3 measurements: spread p90/p10 140% > 25%"
    held = pd.DataFrame([_row(dict(h=768, heads=12, sl=384, b=2, tp=2), "held_out"),
                         _row(dict(h=384, heads=6, sl=192, b=4, tp=1), "held_out", status=STATUS_UNSTABLE,
                              reason=reason, slowdown=5.0)])
    rows = accuracy_rows("t", calibration_id, models, box, fit_rows, held, judged_from_s=0.0).to_pandas()

    unstable = rows[rows["h"] == 384]
    assert len(unstable) == len(MODELLED_CLASSES) + 1  # every class and the step: all reported
    assert (unstable["status"] == STATUS_UNSTABLE).all() and not unstable["judged"].any()
    assert (unstable["reason"] == reason).all()
    assert unstable.loc[unstable["op_class"] == STEP, "rel_error"].iloc[0] < -0.7  # what judging it would have cost
    stable = rows[rows["h"] == 768]
    assert (stable["status"] == "ok").all() and stable["judged"].all() and stable["reason"].isna().all()

    summary = error_summary(rows).iloc[0]
    assert summary["configs"] == 1 and summary["worst_abs_error"] < 0.05


def test_a_calibration_is_fitted_unless_barely_measured_or_never_stable():
    rows = _fit_rows()  # 14 configurations
    assert why_not_fit(len(rows), rows, len(rows)) is None
    rows.loc[rows.index[:13], "status"] = STATUS_UNSTABLE
    # 13 of 14 unstable: fitted all the same (the fastest profiled steps), one stable measurement
    assert why_not_fit(len(rows), rows, 1) is None
    # ... or a stable held-out one: the machine was quiet for part of the calibration
    rows.loc[rows.index[13], "status"] = STATUS_UNSTABLE
    assert why_not_fit(len(rows), rows, 1) is None
    assert why_not_fit(len(rows), rows, 0) == ("no measurement stable (14 of 14 fit configurations measured, "
                                               "every one unstable): the machine was too busy to calibrate")
    assert why_not_fit(14, _fit_rows().iloc[:2], 2) == "2 of 14 fit configurations measured; a fit needs at least 3"
    assert why_not_fit(14, _fit_rows().iloc[:3], 3) is None  # the time cap left 11 unmeasured


def test_measurements_taken_again_or_judged_otherwise_get_new_keys():
    """The keys are what the lake stores once: keyed by what was measured rather than by its
    values, a configuration measured again (after --restart) would keep serving the old fit
    and judgement."""
    fit_rows = _fit_rows()
    opmodels, calibration_id = fit_calibration("t", fit_rows, fitted_at=1.0)
    assert fit_calibration("t", fit_rows.copy(), fitted_at=2.0)[1] == calibration_id   # the same measurements
    slower = fit_rows.copy()
    slower.loc[0, "plain_step_s"] *= 1.5
    refit, new_id = fit_calibration("t", slower, fitted_at=3.0)
    assert new_id != calibration_id
    assert not set(refit.column("key").to_pylist()) & set(opmodels.column("key").to_pylist())

    models, box = models_from_rows(opmodels.to_pandas())
    held = pd.DataFrame([_row(dict(h=768, heads=12, sl=384, b=2, tp=2), "held_out")])

    def keys(held_rows, judged_from_s=0.0):
        table = accuracy_rows("t", calibration_id, models, box, fit_rows, held_rows, judged_from_s=judged_from_s)
        return set(table.column("key").to_pylist())

    first = keys(held)
    assert keys(held.copy()) == first
    assert not keys(held, judged_from_s=1.0) & first
    again = held.copy()
    again.loc[0, "plain_step_s"] *= 1.2
    assert not keys(again) & first
