"""The report's topics from the measured and searched kinds: the accuracy of a calibration
(Fig. 13, ``accuracy`` rows), the layout search (Pareto front and best layouts, ``search``
rows) and the scaling view (throughput and latency floor against devices, ``scaling``
rows). Each figure is keyed by the digest of its kind's rows (``analysis.report_cache``).
"""

from __future__ import annotations

from typing import Callable, Iterable, List, Optional, Tuple

import numpy as np
import pandas as pd

from analysis import figures
from analysis.figures.search import has_layout, layout_label
from analysis.report_cache import FigureCache, kind_digest
from analysis.report_render import Finding, Section, Topic
from sweeps.lake.kinds import ACCURACY, SCALING, SEARCH
from tasks.model.terms.layout import LAYOUT_FIELDS
from tasks.model.search.rows import OBJECTIVES, ranking

__all__ = ["accuracy_topic", "search_topic", "scaling_topic", "best_layouts", "objective_of", "study_records"]

#: The objectives' columns in words.
_WORDS = {"step_time_s": "step time (s)", "tokens_per_s_per_device": "tokens/s/device",
          "exposed_comm_share": "exposed communication share", "exposed_comm_s": "exposed communication (s)"}
#: When a topic of these names was recorded (seconds since the epoch; 0 if unknown).
Recorded = Callable[[Iterable[str]], float]


def _names(rows: Optional[pd.DataFrame], *columns: str) -> frozenset:
    if rows is None:
        return frozenset()
    return frozenset(str(v) for c in columns if c in rows.columns for v in rows[c].dropna().unique())


def _steps(accuracy: pd.DataFrame) -> pd.DataFrame:
    """The newest fit's whole-step rows, judged ones only where the rows say."""
    from tasks.model.projection.operators import STEP

    steps = accuracy[accuracy["op_class"] == STEP]
    return steps[steps["judged"].astype(bool)] if "judged" in steps.columns else steps


def _accuracy_about(accuracy: pd.DataFrame) -> str:
    steps = _steps(accuracy)
    whole = (f" End to end, over {len(steps)} held-out configurations: median |error| "
             f"{100 * steps['rel_error'].abs().median():.1f}%, worst {100 * steps['rel_error'].abs().max():.1f}%."
             if len(steps) else "")
    return (f"Each point is one operator class of one held-out configuration ({len(accuracy)} rows), never used in "
            f"the fit: on the dashed line the projection is exact.{whole} "
            f"{int(accuracy['extrapolated'].astype(bool).sum())} rows extrapolate beyond what was measured (ringed).")


def accuracy_topic(cache: FigureCache, con, accuracy: Optional[pd.DataFrame], when: Recorded) -> Topic:
    """Fig. 13, the error per operator class, and each calibration's end-to-end error."""
    from tasks.fit.accuracy import newest_fit

    section = Section("Accuracy of the projection (Fig. 13)", "Projected against measured time per operator class.")
    has_rows = accuracy is not None and not accuracy.empty
    newest = newest_fit(accuracy) if has_rows else accuracy
    entry = cache.make("accuracy", "Fig. 13: projected vs measured per operator class", kind_digest(con, ACCURACY),
                       lambda: figures.draw_accuracy(accuracy), lambda: _accuracy_about(newest))
    section.figures.append(entry)
    if entry.skipped:
        return Topic(section)
    table = newest.assign(abs_error=newest["rel_error"].abs() * 100).groupby("op_class").agg(
        rows=("abs_error", "size"), median_abs_error_pct=("abs_error", "median"),
        max_abs_error_pct=("abs_error", "max"), extrapolated=("extrapolated", "sum")).reset_index()
    section.tables.append(("Error per operator class", table))
    lines = []
    for calibration, rows in newest.groupby("calibration") if "calibration" in newest.columns else [("", newest)]:
        steps = _steps(rows)
        if len(steps):
            error = 100 * steps["rel_error"].abs()
            lines.append(f"Calibration {calibration}: end-to-end step time within {error.median():.1f}% (median "
                         f"|error|; worst {error.max():.1f}%) over {len(steps)} held-out configurations; "
                         f"{int(rows['extrapolated'].astype(bool).sum())} of {len(rows)} rows extrapolate beyond what "
                         "was measured.")
    names = _names(accuracy, "calibration", "sweep")
    finding = Finding("Accuracy of the projection", section.anchor, tuple(lines)) if lines else None
    return Topic(section, finding, names, when(names))


def objective_of(trials: pd.DataFrame) -> Tuple[str, str]:
    """The (column, direction) of the study's first objective: its rows' ``objective_name``
    where they record one, else the column of ``OBJECTIVES`` whose values its rows'
    ``objective`` holds (tokens per second per device if none does)."""
    return OBJECTIVES[_objective_name(trials)][0]


def _objective_name(trials: pd.DataFrame) -> str:
    """The key of ``OBJECTIVES`` a study's rows were ranked by (see ``objective_of``)."""
    named = trials["objective_name"].dropna() if "objective_name" in trials.columns else ()
    if len(named) and named.iloc[0] in OBJECTIVES:
        return str(named.iloc[0])
    ok = trials.dropna(subset=["objective"]) if "objective" in trials.columns else trials.iloc[0:0]
    for name, ((column, _), *_) in OBJECTIVES.items():
        if len(ok) and column in ok.columns and np.allclose(ok[column], ok["objective"], equal_nan=True):
            return name
    return "tokens_per_s_per_device"


def _ranked(trials: pd.DataFrame) -> pd.DataFrame:
    """A study's trials best first by its objective, ties broken by step time, then memory
    (``tasks.model.search.rows.ranking``, as the search ranks them)."""
    return trials.iloc[ranking(trials, _objective_name(trials))]


def best_layouts(search: pd.DataFrame, per_study: int = 5) -> pd.DataFrame:
    """The best ``per_study`` distinct feasible layouts of each study by its objective (a
    layout tried by several trials is one row; ``trials`` counts them)."""
    ok = search[search["status"] == "ok"]
    layout = [c for c in LAYOUT_FIELDS if c in ok.columns]
    frames = []
    for study, trials in ok.groupby("study"):
        column, _ = objective_of(trials)
        tried = trials.groupby(layout, dropna=False)["trial"].transform("size") if "trial" in trials.columns \
            else pd.Series(1, index=trials.index)
        ranked = _ranked(trials.assign(trials=tried))
        frames.append(ranked.drop_duplicates(subset=layout).head(per_study).assign(by=column, value=ranked[column]))
    if not frames:
        return pd.DataFrame()
    best = pd.concat(frames)
    best.insert(1, "layout", [layout_label(r) for r in best.itertuples()] if has_layout(best.columns) else "")
    columns = ["study", "layout", "family", "by", "value", "tokens_per_s_per_device", "exposed_comm_share",
               "step_time_s", "trials"]
    return best[[c for c in columns if c in best.columns]].reset_index(drop=True)


def study_records(search: pd.DataFrame) -> pd.DataFrame:
    """What decided each study, one row per study: its model on its devices and hardware,
    then ``analysis.status.record_frame`` (its stack, overrides and fingerprints); empty for
    rows that record none (``tasks.model.search.rows.RECORD_FIELDS``)."""
    from analysis.status import record_frame

    if "stack" not in search.columns:
        return pd.DataFrame()
    firsts = search.groupby("study", sort=True).first().reset_index()
    return pd.concat([firsts[["study", "model", "devices", "hardware"]], record_frame(firsts).drop(columns="study")],
                     axis=1)


def _study_line(study: str, trials: pd.DataFrame, rows: pd.DataFrame) -> str:
    """The study's best layout, what it achieves, and why it is the best: its objective
    against the distinct layouts tried and the runner-up's; the stack it was costed on and
    the overrides that made it, where its rows record them."""
    column, direction = objective_of(trials)
    ranked = best_layouts(trials.assign(study=study), per_study=2)
    best = _ranked(trials).iloc[0]
    what = (f" ({best['model']} on {best['devices']} x {best['hardware']}, global batch {best['global_batch']}"
            if {"model", "devices", "hardware", "global_batch"} <= set(trials.columns) else "")
    if what and "stack" in trials.columns:
        overrides = best["overrides"] if isinstance(best["overrides"], str) else ""
        what += f", stack {best['stack']}" + (f", overrides {overrides}" if overrides else "")
    what += ")" if what else ""
    distinct = trials.drop_duplicates(subset=[c for c in LAYOUT_FIELDS if c in trials.columns]).shape[0]
    line = (f"Study {study}{what}: best layout {ranked['layout'].iloc[0]} at {best['tokens_per_s_per_device']:,.0f} "
            f"tokens/s/device, exposed communication {100 * best['exposed_comm_share']:.1f}% of the step. Why: the "
            f"{'lowest' if direction == 'minimize' else 'highest'} {_WORDS.get(column, column)} of the {distinct} "
            f"distinct feasible layouts tried, {best[column]:.4g} ({int((rows['status'] != 'ok').sum())} infeasible "
            "trials)")
    if len(ranked) > 1:
        line += f"; the runner-up {ranked['layout'].iloc[1]} has {ranked['value'].iloc[1]:.4g}"
    return line + "."


def search_topic(cache: FigureCache, con, search: Optional[pd.DataFrame], when: Recorded) -> Topic:
    """The Pareto front of each model's studies, the best distinct layouts, and per study
    the best layout and why."""
    section = Section("Layout search", "Trials of the layout search: exposed communication against throughput per "
                      "device, one panel per model, and the best distinct layouts of each study.")
    section.figures.append(cache.make(
        "pareto", "Layout search: Pareto front", kind_digest(con, SEARCH), lambda: figures.draw_pareto(search),
        lambda: ("Each point is a feasible trial; each line joins the trials of a study that no other trial beats on "
                 "both throughput per device and exposed communication share; labels name some of the front's "
                 "layouts.")))
    if search is None or search.empty or "tokens_per_s_per_device" not in search.columns:
        return Topic(section)
    records = study_records(search)
    if len(records):
        section.tables.append(("What decided each study: its model, devices, hardware, stack and overrides, and the "
                               "fingerprints of the model, hardware and stack it costed (model/hardware/stack)",
                               records))
    best = best_layouts(search)
    if len(best):
        section.tables.append(("Best distinct layouts of each study, by its objective (trials: how many trials "
                               "tried the layout)", best.drop(columns=["value"])))
    lines = [_study_line(study, trials[trials["status"] == "ok"], trials)
             for study, trials in search.groupby("study") if (trials["status"] == "ok").any()]
    names = _names(search, "study", "sweep")
    return Topic(section, Finding("Layout search", section.anchor, tuple(lines)) if lines else None, names,
                 when(names))


def scaling_topic(cache: FigureCache, con, scaling: Optional[pd.DataFrame], when: Recorded) -> Topic:
    """Per-device throughput and the latency floor against device count."""
    section = Section("Scaling and the latency floor", "The best layout's throughput per device as the run spreads "
                      "over more devices, and the share of step time that latency terms take.")
    key = kind_digest(con, SCALING)
    section.figures.append(cache.make(
        "scaling", "Per-device throughput vs device count", key, lambda: figures.draw_scaling(scaling),
        lambda: ("The best layout's tokens per second per device at each device count, labelled with its layout "
                 "family; a falling line is the diminishing return of spreading a run over more devices.")))
    section.figures.append(cache.make(
        "latency-floor", "Latency floor: latency share of step time vs device count", key,
        lambda: figures.draw_latency_floor(scaling),
        lambda: ("For a fixed model and global batch, the share of a step spent in latency terms (each kernel's "
                 "launch, the longer of the device's floor and the host's eager path; per-step collective "
                 "latency); it grows as the run spreads and bounds how far it can.")))
    if any(f.skipped for f in section.figures):
        return Topic(section, names=_names(scaling, "sweep"))
    lines = _scaling_lines(scaling)
    names = _names(scaling, "sweep")
    return Topic(section, Finding("Scaling", section.anchor, tuple(lines)) if lines else None, names, when(names))


def _scaling_lines(scaling: pd.DataFrame) -> List[str]:
    from tasks.model.terms.metrics import latency_share

    ok = scaling[scaling["status"] == "ok"] if "status" in scaling.columns else scaling
    lines = []
    for (model, hardware, batch), series in ok.dropna(subset=["tokens_per_s_per_device"]).groupby(
            ["model", "hardware", "global_batch"]):
        series = series.sort_values("devices")
        first, last = series.iloc[0], series.iloc[-1]
        share = 100 * latency_share(series["latency_s"], series["step_time_s"])
        lines.append(f"{model} on {hardware}, global batch {batch:,}: {first['tokens_per_s_per_device']:,.0f} "
                     f"tokens/s/device at {first['devices']} devices, {last['tokens_per_s_per_device']:,.0f} at "
                     f"{last['devices']} ({last['tokens_per_s_per_device'] / first['tokens_per_s_per_device']:.0%}); "
                     f"latency terms {share.iloc[0]:.1f}% → {share.iloc[-1]:.1f}% of the step.")
    return lines
