"""``commscale report``: what the lake answers, as one HTML page (self-contained while it
stays under 2 MB, never over: ``analysis.report_render``) and a Markdown twin: first the
findings (for each sweep, search and calibration, the few numbers that answer its
question), then a table of contents, then a section per topic with its figures and
tables, provenance, and the list of figure files.

    from analysis.report import write_report
    from sweeps.lake import Lake

    result = write_report(Lake("lake"), Path("report"), first_sweep="table2")
    # report/report.html, report/report.md, report/figures/*.png|svg, report/figures.json

Topics are ordered with ``first_sweep``'s first (the sweep, study or calibration just run),
then the most recently recorded. Every figure is drawn from lake rows only
(``analysis.figures``), and only when the rows it reads or the code that draws it changed
since the former report in the same folder (``analysis.report_cache``); one whose rows are
missing is listed as skipped with the command that produces them. At most ``max_m``
multipliers m are drawn per sweep. Reads the lake, never writes it. Every file of the
report is written whole or not at all, and reports into one folder take turns
(``analysis.report_files``); a folder that cannot hold the report raises
``ReportFolderError`` naming the path.
"""

from __future__ import annotations

import datetime as dt
import json
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Iterable, List, Optional

import pandas as pd

from analysis import report_search, report_study, report_timeline, report_validation
from analysis.report_cache import FIGURES_FOLDER, FigureCache, code_version, digest_of
from analysis.report_files import ReportFolderError, check_files, folder_lock, write_text
from analysis.report_render import FigureEntry, Finding, Section, Topic, render_html, render_markdown
from analysis.report_search import accuracy_topic, scaling_topic, search_topic
from analysis.report_codesign import codesign_topic
from analysis.report_limits import limits_topic
from analysis.report_timeline import TimelinePicture, timeline_topic
from analysis.report_study import (DEFAULT_MAX_M, case_topic, grid_topic, no_case_study_topic, no_projection_topics,
                                   partitions)
from analysis.report_validation import validation_topic
from sweeps.lake import Lake
from sweeps.lake.kinds import ACCURACY, CODESIGN, LIMITS, PROJECTION, ROI, SCALING, SEARCH, VALIDATION
from sweeps.lake.views import connect, view_frame

__all__ = ["ReportResult", "ReportFolderError", "write_report", "HTML_NAME", "MARKDOWN_NAME", "DEFAULT_MAX_M",
           "TimelinePicture"]

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
    findings: List[Finding]
    elapsed_s: float
    kept: bool = False  # the former page was kept: lake, code and options unchanged; nothing was read or drawn

    @property
    def figures(self) -> List[FigureEntry]:
        return [f for s in self.sections for f in s.figures]

    @property
    def written(self) -> List[FigureEntry]:
        """Figures on the page (drawn now or reused unchanged)."""
        return [f for f in self.figures if not f.skipped]

    @property
    def drawn(self) -> List[FigureEntry]:
        """Figures drawn by this report (the others were reused unchanged)."""
        return [f for f in self.written if f.drawn]

    @property
    def skipped(self) -> List[FigureEntry]:
        return [f for f in self.figures if f.skipped]


def _projection_topics(cache: FigureCache, con, manifests: dict, max_m: int) -> List[Topic]:
    """A topic per (sweep, hardware) of ``projection``, and the case study's skip if no sweep places its links."""
    parts = partitions(con)
    if not parts:
        return no_projection_topics(cache)
    topics = []
    for part in parts:
        manifest = manifests.get((part.sweep, part.hardware), {})
        recorded = float(manifest.get("time") or 0.0)
        if part.case_study:
            topics.append(case_topic(cache, con, part, max_m=max_m, recorded=recorded))
        else:
            overlap_tp = int(manifest.get("config", {}).get("sweep.overlap_tp", 16))
            topics.append(grid_topic(cache, con, part, overlap_tp=overlap_tp, max_m=max_m, recorded=recorded))
    if not any(p.case_study for p in parts):
        topics.append(no_case_study_topic(cache))
    return topics


def _ordered(topics: List[Topic], first_sweep: Optional[str]) -> List[Topic]:
    """``first_sweep``'s topics first, then the most recently recorded, then by title."""
    return sorted(topics, key=lambda t: (first_sweep not in t.names, -t.recorded, t.section.title))


def _provenance(lake: Lake, con, accuracy: Optional[pd.DataFrame], manifests: dict,
                software: pd.DataFrame) -> Section:
    section = Section("Provenance", f"Lake {lake}; every figure and table above is read from its committed rows.")
    section.intro += " Sweeps newest first."
    newest_first = sorted(manifests.items(), key=lambda item: (-float(item[1].get("time") or 0.0), item[0]))
    sweeps = pd.DataFrame([{"sweep": s, "hardware": h, "kind": m.get("kind"), "planned": m.get("planned"),
                            "recorded (UTC)": _date(m.get("time"))} for (s, h), m in newest_first])
    if not sweeps.empty:
        section.tables.append(("Sweeps", sweeps))
    calibrations = []
    projected = con.execute(f"""SELECT calibration, cost_model_version, hardware, hardware_fingerprint,
                                count(*) AS "projection rows" FROM "{PROJECTION}" GROUP BY ALL ORDER BY ALL""").df()
    if not projected.empty:
        calibrations.append(projected)
    if accuracy is not None and not accuracy.empty and {"calibration", "device_model"} <= set(accuracy.columns):
        per_device = accuracy.groupby(["calibration", "device_model"]).size()
        calibrations.append(per_device.rename("accuracy rows").reset_index())
    for table in calibrations:
        section.tables.append(("Calibrations", table))
    roi = view_frame(con, ROI, _ROI_PROVENANCE)
    if roi is not None and not roi.empty:
        present = [c for c in _ROI_PROVENANCE if c in roi.columns]
        section.tables.append(("Devices measured", roi[present].drop_duplicates().fillna("").astype(str)))
    section.tables.append(("Software of this report", software))
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


def _topics(lake: Lake, cache: FigureCache, manifests: dict, max_m: int, software: pd.DataFrame) -> tuple:
    """Every topic of the lake and the provenance section."""

    def when(names: Iterable[str]) -> float:
        names = set(names)
        return max((float(m.get("time") or 0.0) for (s, _), m in manifests.items() if s in names), default=0.0)

    con = connect(lake)
    try:
        accuracy, search, scaling = (view_frame(con, kind) for kind in (ACCURACY, SEARCH, SCALING))
        topics = _projection_topics(cache, con, manifests, max_m)
        topics += [accuracy_topic(cache, con, accuracy, when), search_topic(cache, con, search, when),
                   scaling_topic(cache, con, scaling, when), validation_topic(cache, con, view_frame(con, VALIDATION)),
                   limits_topic(cache, con, view_frame(con, LIMITS), when),
                   codesign_topic(cache, con, view_frame(con, CODESIGN), when)]
        provenance = _provenance(lake, con, accuracy, manifests, software)
    finally:
        con.close()
    return topics, provenance


def _figure_files(entries: List[FigureEntry]) -> Section:
    index = pd.DataFrame([{"figure": f.title, "file": f"figures/{f.files[0].name}" if f.files else "",
                           "status": f"skipped: {f.skipped}" if f.skipped else f"drawn {f.drawn_at}"}
                          for f in entries])
    return Section("Figure files", "Every figure of this report: its SVG is embedded above (or linked, where the "
                   "page would grow past its bound), its PNG and SVG files are beside the page; a figure is drawn "
                   "again only when its rows or the code that draws it change.",
                   tables=[("Every figure of this report", index)])


def _page_key(lake: Lake, manifests: dict, software: pd.DataFrame, first_sweep: Optional[str], max_m: int) -> str:
    """What the whole page depends on: the lake's committed files and sweep manifests, the
    code of ``analysis`` and the software, and the options."""
    files = {kind: lake.files(kind) for kind in lake.kinds()}
    recorded = json.dumps(sorted([list(k), m] for k, m in manifests.items()), sort_keys=True, default=str)
    code = code_version(sorted(str(p) for p in Path(__file__).parent.glob("*.py")))
    return digest_of(code, software.to_dict("records"), str(lake), files, recorded, first_sweep, max_m)


def _outline(key: str, sections: List[Section], findings: List[Finding]) -> dict:
    return {"key": key, "findings": [{"title": f.title, "anchor": f.anchor, "lines": list(f.lines)} for f in findings],
            "sections": [{"title": s.title, "anchor": s.anchor, "figures": [f.name for f in s.figures]}
                         for s in sections]}


def _kept(kept: dict) -> tuple:
    sections = [Section(s["title"], figures=s["figures"], anchor=s["anchor"]) for s in kept["sections"]]
    return sections, [Finding(f["title"], f["anchor"], tuple(f["lines"])) for f in kept["findings"]]


def write_report(lake: Lake, out_dir: Path, *, first_sweep: Optional[str] = None,
                 max_m: int = DEFAULT_MAX_M, timeline: Optional[TimelinePicture] = None) -> ReportResult:
    """Write ``out_dir``/report.html (its figures embedded up to its bound of
    ``report_render.PAGE_LIMIT_BYTES``), ``out_dir``/report.md, the figures
    (PNG and SVG) under ``out_dir``/figures and their manifest ``out_dir``/figures.json;
    returns what was written. Only figures whose rows (or drawing code) changed since the
    former report in ``out_dir`` are drawn; figures that report drew and this one does not
    are removed; when neither the lake's committed files nor the code nor the options
    changed, the former page is kept as it is (``ReportResult.kept``). ``first_sweep``: a
    sweep, study or calibration name whose topics come first; ``max_m``: at most this many
    multipliers m drawn per sweep (0: every one); ``timeline``: a step's timeline to draw
    after the topics of the lake (none if None).

    Each file is written whole or not at all, and writers of one folder take turns
    (``analysis.report_files``): reports written into one folder at once leave one whole
    report, the last one's. A folder that cannot hold the report (a file where it should be,
    a folder where one of its files should be, read-only) is refused before the lake is
    read, a full disk when a write fails: ``ReportFolderError`` naming the path, no
    temporary file left, the former page as it was."""
    started = time.perf_counter()
    lake.ensure_readable()
    out_dir = Path(out_dir)
    with folder_lock(out_dir, tidy=[FIGURES_FOLDER]):
        check_files(out_dir, [HTML_NAME, MARKDOWN_NAME])
        return _write_page(lake, out_dir, first_sweep, max_m, started, timeline)


def _write_page(lake: Lake, out_dir: Path, first_sweep: Optional[str], max_m: int, started: float,
                timeline: Optional[TimelinePicture] = None) -> ReportResult:
    """``write_report``'s work, in its locked folder; ``started``: ``time.perf_counter()`` at its start."""
    html_path, md_path = out_dir / HTML_NAME, out_dir / MARKDOWN_NAME
    manifests, software = lake.sweeps(), _software()
    drawing = [report_study.__file__, report_search.__file__, report_validation.__file__, report_timeline.__file__]
    cache = FigureCache(out_dir, version=code_version(drawing))
    key = _page_key(lake, manifests, software, first_sweep, max_m) + (f":{timeline.key}" if timeline else "")
    kept = cache.kept_page(key, [html_path, md_path])
    if kept is not None:
        return ReportResult(html_path, md_path, *_kept(kept), time.perf_counter() - started, kept=True)
    topics, provenance = _topics(lake, cache, manifests, max_m, software)
    topics = _ordered(topics, first_sweep) + ([timeline_topic(cache, timeline)] if timeline else [])
    sections = [t.section for t in topics] + [provenance]
    findings = [t.finding for t in topics if t.finding is not None]
    entries = [f for s in sections for f in s.figures]
    sections.append(_figure_files(entries))
    written = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    title = "commscale: compute vs communication, from the lake"
    intro = (f"Written {written} from lake {lake}: {sum(not f.skipped for f in entries)} figures, "
             f"{sum(bool(f.skipped) for f in entries)} skipped for want of rows.")
    write_text(html_path, render_html(title, intro, sections, findings))
    write_text(md_path, render_markdown(title, intro, sections, findings))
    cache.close(_outline(key, sections, findings))  # after the page: a page cut short is never taken as current
    return ReportResult(html_path, md_path, sections, findings, time.perf_counter() - started)
