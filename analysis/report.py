"""``commscale report``: the study's figures, its summary tables and their provenance,
from whatever the lake holds, as one self-contained HTML page and a Markdown twin.

    from analysis.report import write_report
    from sweeps.lake import Lake
from sweeps.lake.kinds import ACCURACY, PROJECTION, ROI, SCALING, SEARCH
from sweeps.lake.views import connect, view_frame

    result = write_report(Lake("lake"), Path("report"))   # report/report.html, report/report.md, report/figures/

Every figure is drawn from lake rows only (``analysis.figures``); one whose rows are
missing is listed as skipped with the command that produces them. Reads the lake, never
writes it.
"""

from __future__ import annotations

import datetime as dt
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pandas as pd

from analysis import figures
from analysis.figures.common import CASE_STUDY, MissingRows
from analysis.report_render import FigureEntry, Section, render_html, render_markdown
from analysis.summary import overlap_rows, overlapped_summary, serialized_rows, serialized_summary
from sweeps.lake import Lake
from sweeps.lake.kinds import ACCURACY, PROJECTION, ROI, SCALING, SEARCH
from sweeps.lake.views import connect, view_frame

__all__ = ["ReportResult", "write_report", "HTML_NAME", "MARKDOWN_NAME"]

HTML_NAME = "report.html"
MARKDOWN_NAME = "report.md"

_ROI_PROVENANCE = ["device_model", "device_count", "driver_version", "torch_version", "cuda_version", "nccl_version",
                   "host"]
_SOFTWARE = ["commscale", "numpy", "pandas", "pyarrow", "duckdb", "matplotlib", "ray", "torch"]


@dataclass
class ReportResult:
    """Where the report went, what it holds, and how long it took (seconds)."""

    html: Path
    markdown: Path
    sections: List[Section]
    elapsed_s: float

    @property
    def figures(self) -> List[FigureEntry]:
        return [f for s in self.sections for f in s.figures]

    @property
    def written(self) -> List[FigureEntry]:
        return [f for f in self.figures if not f.skipped]

    @property
    def skipped(self) -> List[FigureEntry]:
        return [f for f in self.figures if f.skipped]


class _Figures:
    """Draws figures into ``directory``; a draw that finds no rows becomes a skipped entry."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def make(self, name: str, title: str, draw: Callable[[], object], about: Callable[[], str]) -> FigureEntry:
        try:
            fig = draw()
        except MissingRows as exc:
            return FigureEntry(name, title, skipped=str(exc))
        return FigureEntry(name, title, about(), tuple(figures.save(fig, self.directory / name)))

    @staticmethod
    def skip(name: str, title: str, source: str, what: str) -> FigureEntry:
        return FigureEntry(name, title, skipped=str(MissingRows(source, what)))


def _percent_table(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.map(lambda v: f"{100 * v:.1f}%").reset_index(names="configuration")


def _overlap_table(con, sweep: str, hardware: str, overlap_tp: int) -> pd.DataFrame:
    summary = overlapped_summary(con, sweep, hardware, overlap_tp)
    summary["cell"] = [f"{r.min_percent:.0f}-{r.max_percent:.0f}% ({int(r.exposed)}/{int(r.hidden_sizes)})"
                       for r in summary.itertuples()]
    table = summary.pivot(index="slb", columns="flop_vs_bw", values="cell")
    table.columns = [f"m={m:g}" for m in table.columns]
    return table.reset_index(names="SL·B")


def _grid_section(make: _Figures, con, sweep: str, hardware: str, overlap_tp: int) -> Section:
    section = Section(f"Sweep {sweep} on {hardware}: the study's grid (Figs. 10 and 11)",
                      "Serialized (TP) communication against TP and overlapped (DP) communication against SL·B, "
                      "for each flop-vs-bw multiplier m (compute m times faster relative to network bandwidth).")
    serial, overlap = serialized_rows(con, sweep, hardware), overlap_rows(con, sweep, hardware, overlap_tp)
    for m in sorted(serial["flop_vs_bw"].unique()):
        at_m, over_m = serial[serial["flop_vs_bw"] == m], overlap[overlap["flop_vs_bw"] == m]
        tag = f"{sweep}-{hardware}-m{m:g}"
        fig_s = figures.study.figure_number(m, "a")
        section.figures.append(make.make(
            f"serialized-{tag}", f"{fig_s}: serialized fraction vs TP, {sweep} on {hardware}, m = {m:g}",
            lambda m=m: figures.draw_serialized(serial, m=m),
            lambda at_m=at_m: ("Each line is one (H, SL) of the grid at its smallest B: the share of a layer's forward "
                               "and backward time spent in TP all-reduces, which nothing hides. Over the grid it spans "
                               f"{100 * at_m['serialized_fraction'].min():.1f}-"
                               f"{100 * at_m['serialized_fraction'].max():.1f}%; stars mark models at the TP Eq. 10 "
                               "requires of them.")))
        fig_o = figures.study.figure_number(m, "b")
        section.figures.append(make.make(
            f"overlapped-{tag}", f"{fig_o}: overlapped communication vs SL·B, {sweep} on {hardware}, m = {m:g}",
            lambda m=m: figures.draw_overlapped(overlap, m=m), lambda over_m=over_m: _overlap_about(over_m)))
    section.tables.append((f"Serialized share of layer time, {sweep} on {hardware}",
                           _percent_table(serialized_summary(con, sweep, hardware))))
    section.tables.append((f"Overlapped DP all-reduce as % of backward GEMM time, range over H "
                           f"(k/n: k of n hidden sizes exposed), {sweep} on {hardware}",
                           _overlap_table(con, sweep, hardware, overlap_tp)))
    return section


def _overlap_about(at: pd.DataFrame) -> str:
    exposed = int((at["overlap_percent"] > 100).sum())
    return (f"Each line is one H at TP = {int(at['tp'].iloc[0])}: the DP weight-gradient all-reduce as a percent of "
            f"the backward GEMMs it overlaps. Above the dashed 100% line the excess is exposed: {exposed} of "
            f"{len(at)} configurations here.")


def _case_section(make: _Figures, groups: Dict[tuple, pd.DataFrame]) -> Section:
    section = Section("Case study (Fig. 12)", "One large layer with TP inside a node and DP across nodes: compute, "
                      "serialized and exposed overlapped communication, as the DP links move off the node and "
                      "interference slows them.")
    if not groups:
        section.figures.append(_Figures.skip("casestudy", "Fig. 12: case study", CASE_STUDY, "case-study rows"))
    for (sweep, hardware), rows in groups.items():
        ok = rows[rows["status"] == "ok"]
        section.figures.append(make.make(
            f"casestudy-{sweep}-{hardware}", f"Fig. 12: case study, {sweep} on {hardware}",
            lambda rows=rows: figures.draw_case_study(rows),
            lambda ok=ok: (f"Time per layer for each scenario; the communication share (on each bar) ranges from "
                           f"{100 * ok['comm_share'].min():.0f}% to {100 * ok['comm_share'].max():.0f}%. The hatched "
                           "outline is the whole DP all-reduce, hidden or not.")))
        table = ok.assign(scenario=[figures.casestudy.scenario_label(t, s).replace("\n", " ")
                                    for t, s in zip(ok["dp_tier"], ok["dp_slowdown"], strict=True)])
        table = table.assign(**{c + "_ms": 1e3 * table[c] for c in ("t_compute_s", "t_tp_comm_s", "exposed_comm_s")},
                             comm_share=(100 * table["comm_share"]).round(1))
        section.tables.append((f"Case study rows, {sweep} on {hardware} (ms per layer; comm share in %)",
                               table[["h", "sl", "b", "tp", "dp", "flop_vs_bw", "scenario", "t_compute_s_ms",
                                      "t_tp_comm_s_ms", "exposed_comm_s_ms", "comm_share"]]))
    return section


def _study_sections(make: _Figures, con, manifests: dict) -> List[Section]:
    partitions = con.execute(f"""SELECT sweep, hardware, bool_or(links = 'placed') AS placed FROM "{PROJECTION}"
                                 GROUP BY sweep, hardware ORDER BY sweep, hardware""").fetchall()
    if not partitions:
        return [Section("The study's grid (Figs. 10 and 11)", figures=[
            _Figures.skip("serialized", "Fig. 10a: serialized fraction vs TP", PROJECTION, "projection rows"),
            _Figures.skip("overlapped", "Fig. 10b: overlapped communication vs SL·B", PROJECTION, "projection rows"),
        ]), _case_section(make, {})]
    sections, cases = [], {}
    for sweep, hardware, placed in partitions:
        if placed:
            cases[(sweep, hardware)] = con.execute(f'SELECT * FROM "{PROJECTION}" WHERE sweep = ? AND hardware = ?',
                                                   [sweep, hardware]).df()
            continue
        overlap_tp = int(manifests.get((sweep, hardware), {}).get("config", {}).get("sweep.overlap_tp", 16))
        sections.append(_grid_section(make, con, sweep, hardware, overlap_tp))
    return sections + [_case_section(make, cases)]


def _accuracy_section(make: _Figures, accuracy: Optional[pd.DataFrame]) -> Section:
    section = Section("Accuracy of the projection (Fig. 13)", "Projected against measured time per operator class.")
    entry = make.make("accuracy", "Fig. 13: projected vs measured per operator class",
                      lambda: figures.draw_accuracy(accuracy), lambda: _accuracy_about(accuracy))
    section.figures.append(entry)
    if not entry.skipped:
        from tasks.fit.accuracy import newest_fit

        accuracy = newest_fit(accuracy)
        table = accuracy.assign(abs_error=accuracy["rel_error"].abs() * 100).groupby("op_class").agg(
            rows=("abs_error", "size"), median_abs_error_pct=("abs_error", "median"),
            max_abs_error_pct=("abs_error", "max"), extrapolated=("extrapolated", "sum")).reset_index()
        section.tables.append(("Error per operator class", table))
    return section


def _accuracy_about(accuracy: pd.DataFrame) -> str:
    from tasks.fit.accuracy import newest_fit
    from tasks.model.operators import STEP

    accuracy = newest_fit(accuracy)
    steps = accuracy[accuracy["op_class"] == STEP]
    if "judged" in steps.columns:
        steps = steps[steps["judged"].astype(bool)]
    whole = (f" End to end, over {len(steps)} held-out configurations: median |error| "
             f"{100 * steps['rel_error'].abs().median():.1f}%, worst {100 * steps['rel_error'].abs().max():.1f}%."
             if len(steps) else "")
    return (f"Each point is one operator class of one held-out configuration ({len(accuracy)} rows), never used in "
            f"the fit: on the dashed line the projection is exact.{whole} "
            f"{int(accuracy['extrapolated'].astype(bool).sum())} rows extrapolate beyond what was measured (ringed).")


def _search_section(make: _Figures, search: Optional[pd.DataFrame], scaling: Optional[pd.DataFrame]) -> Section:
    section = Section("Layout search and the latency floor",
                      "Trials of the layout search, the best layout's throughput per device as the run spreads, and "
                      "the share of step time that latency terms take.")
    section.figures.append(make.make(
        "pareto", "Layout search: Pareto front", lambda: figures.draw_pareto(search),
        lambda: ("Each point is a feasible trial; each line joins the trials of a study that no other trial beats on "
                 "both throughput per device and exposed communication share.")))
    section.figures.append(make.make(
        "scaling", "Per-device throughput vs device count", lambda: figures.draw_scaling(scaling),
        lambda: ("The best layout's tokens per second per device at each device count, labelled with its layout "
                 "family; a falling line is the diminishing return of spreading a run over more devices.")))
    section.figures.append(make.make(
        "latency-floor", "Latency floor: latency share of step time vs device count",
        lambda: figures.draw_latency_floor(scaling),
        lambda: ("For a fixed model and global batch, the share of a step spent in latency terms (kernel launch "
                 "floors, per-step collective latency); it grows as the run spreads and bounds how far it can.")))
    if search is not None and not search.empty and "tokens_per_s_per_device" in search.columns:
        ok = search[search["status"] == "ok"].sort_values("tokens_per_s_per_device", ascending=False)
        columns = [c for c in ("study", "trial", "tp", "pp", "dp", "micro_batch", "schedule", "zero", "recompute",
                               "tokens_per_s_per_device", "exposed_comm_share") if c in ok.columns]
        section.tables.append(("Best trials by throughput per device", ok[columns].head(8)))
    return section


def _provenance(lake: Lake, con, accuracy: Optional[pd.DataFrame], manifests: dict) -> Section:
    section = Section("Provenance", f"Lake {lake}; every figure and table above is read from its committed rows.")
    sweeps = pd.DataFrame([{"sweep": s, "hardware": h, "kind": m.get("kind"), "planned": m.get("planned"),
                            "recorded (UTC)": _date(m.get("time"))} for (s, h), m in sorted(manifests.items())])
    if not sweeps.empty:
        section.tables.append(("Sweeps", sweeps))
    calibrations = []
    projected = con.execute(f"""SELECT calibration, cost_model_version, hardware, hardware_fingerprint,
                                count(*) AS "projection rows" FROM "{PROJECTION}" GROUP BY ALL ORDER BY ALL""").df()
    if not projected.empty:
        calibrations.append(projected)
    if accuracy is not None and not accuracy.empty and {"calibration", "device_model"} <= set(accuracy.columns):
        calibrations.append(accuracy.groupby(["calibration", "device_model"]).size().rename("accuracy rows").reset_index())
    for table in calibrations:
        section.tables.append(("Calibrations", table))
    roi = view_frame(con, ROI, _ROI_PROVENANCE)
    if roi is not None and not roi.empty:
        present = [c for c in _ROI_PROVENANCE if c in roi.columns]
        section.tables.append(("Devices measured", roi[present].drop_duplicates().fillna("").astype(str)))
    section.tables.append(("Software of this report", _software()))
    return section


def _date(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def _software() -> pd.DataFrame:
    rows = [{"package": "python", "version": platform.python_version()}]
    for name in _SOFTWARE:
        try:
            rows.append({"package": name, "version": metadata.version(name)})
        except metadata.PackageNotFoundError:
            continue
    return pd.DataFrame(rows)


def write_report(lake: Lake, out_dir: Path) -> ReportResult:
    """Write ``out_dir``/report.html (self-contained), ``out_dir``/report.md and the
    figures (PNG and SVG) under ``out_dir``/figures; returns what was written. Figures
    of a former report in ``out_dir`` that this one does not draw are removed."""
    started = time.perf_counter()
    lake.ensure_readable()
    out_dir = Path(out_dir)
    figure_dir = out_dir / "figures"
    figure_dir.mkdir(parents=True, exist_ok=True)
    manifests = lake.sweeps()
    con = connect(lake)
    try:
        accuracy, search, scaling = (view_frame(con, kind) for kind in (ACCURACY, SEARCH, SCALING))
        make = _Figures(figure_dir)
        sections = _study_sections(make, con, manifests)
        sections += [_accuracy_section(make, accuracy), _search_section(make, search, scaling)]
        sections.append(_provenance(lake, con, accuracy, manifests))
    finally:
        con.close()
    drawn = {p.name for s in sections for f in s.figures for p in f.files}
    for stale in figure_dir.iterdir():
        if stale.suffix in (".png", ".svg") and stale.name not in drawn:
            stale.unlink()
    entries = [f for s in sections for f in s.figures]
    index = pd.DataFrame([{"figure": f.title, "file": f"figures/{f.files[0].name}" if f.files else "",
                           "status": "written" if not f.skipped else f"skipped: {f.skipped}"} for f in entries])
    sections.insert(0, Section("Figures", tables=[("Every figure of this report", index)]))
    written = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = "commscale: compute vs communication, from the lake"
    intro = (f"Written {written} from lake {lake}: {sum(not f.skipped for f in entries)} figures drawn, "
             f"{sum(bool(f.skipped) for f in entries)} skipped for want of rows.")
    html_path, md_path = out_dir / HTML_NAME, out_dir / MARKDOWN_NAME
    _write_atomic(html_path, render_html(title, intro, sections))
    _write_atomic(md_path, render_markdown(title, intro, sections))
    return ReportResult(html_path, md_path, sections, time.perf_counter() - started)


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(path)
