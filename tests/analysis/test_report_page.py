"""The report page stays readable however much the lake holds: under 2 MB (figures embedded
as their SVG files while they fit, linked to them beyond), its findings first, one folded
line each, a section's extra figures and a long table's extra rows folded, and one number
format per table column. Real figures and a real lake of several sweeps and studies."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from analysis import figures
from analysis.report import write_report
from analysis.report_render import OPEN_FIGURES, PAGE_LIMIT_BYTES, FigureEntry, Finding, Section, render_html
from analysis.report_search import best_layouts
from analysis.report_tables import TABLE_ROWS, column_formats, html_table, markdown_table
from sweeps.config import load_search
from sweeps.lake import Lake
from sweeps.search import run_search

#: A layout search small enough to run in a test (12 trials, in this process).
TINY = ["small", "space.tp=[1,2,4]", "space.pp=[1,2]", "space.micro_batch=[1]", "space.schedule=[1f1b]",
        "space.zero=[none,zero3]", "space.recompute=[none,selective]", "trials=12", "batch=4"]
_SRC = re.compile(r"<figure id=\"([^\"]+)\"><img src='([^']{0,40})")


def _sources(page: str) -> dict:
    """Each figure of ``page``: how its image comes (``data:image/svg+xml``, or ``figures/...``)."""
    return {name: "embedded" if src.startswith("data:image/svg+xml,") else "linked" if src.startswith("figures/")
            else src for name, src in _SRC.findall(page)}


@pytest.fixture
def many_figures(tmp_path, scaling_rows) -> list:
    """200 figure entries, each with a real figure's PNG and SVG files."""
    stem = tmp_path / "figures" / "scaling"
    png, svg = figures.save(figures.draw_scaling(scaling_rows), stem)
    entries = []
    for i in range(200):
        files = tuple(shutil.copy(path, path.with_name(f"f{i:03d}{path.suffix}")) for path in (png, svg))
        entries.append(FigureEntry(f"f{i:03d}", f"Figure {i}", "About it.", tuple(Path(f) for f in files)))
    return entries


def test_a_page_of_any_lake_stays_under_its_bound_open_figures_embedded_first(many_figures):
    sections = [Section(f"Section {s}", figures=many_figures[10 * s:10 * s + 10]) for s in range(20)]
    assert sum(f.files[1].stat().st_size for f in many_figures) > PAGE_LIMIT_BYTES  # more than the page may hold
    page = render_html("t", "Written now.", sections)
    assert len(page.encode("utf-8")) <= PAGE_LIMIT_BYTES
    sources = _sources(page)
    assert sorted(sources) == [f.name for f in many_figures]  # every figure is on the page
    open_ = {f.name for s in sections for f in s.figures[:OPEN_FIGURES]}
    assert {sources[n] for n in open_} == {"embedded"}  # what shows unfolded comes first
    linked = [n for n, how in sources.items() if how == "linked"]
    assert linked and set(sources.values()) == {"embedded", "linked"}
    assert f"{len(linked)} figures are linked to their files under figures/" in page
    whole = render_html("t", "Written now.", sections[:2])  # a small lake: the page stands alone
    assert set(_sources(whole).values()) == {"embedded"} and "linked" not in whole and "src='figures/" not in whole


def test_a_section_shows_its_first_figures_and_folds_the_rest(many_figures):
    page = render_html("t", "", [Section("One", figures=many_figures[:5])])
    shown, folded = page.split('<details class="more">')
    assert shown.count("<figure ") == OPEN_FIGURES and folded.count("<figure ") == 5 - OPEN_FIGURES
    assert "3 more figures: Figure 2; Figure 3; Figure 4" in folded


def _findings(count: int) -> list:
    line = ("Serialized (TP) communication, share of layer time, median (range) over 196 configurations at the "
            "smallest B: m=1 53.9% (2.2-77.1%) · m=2 70.1% (4.3-87.1%) · m=4 82.4% (8.2-93.1%) and then some more")
    return [Finding(f"Sweep s{i} on h100 (1,194 rows)", f"sweep-s{i}", (f"{line} [{i}]", line + " (2)", line + " (3)"))
            for i in range(count)]


def test_findings_open_the_page_one_folded_line_each_every_line_inside():
    findings = _findings(12)
    page = render_html("t", "Written now.", [Section(f"Sweep s{i}", anchor=f"sweep-s{i}") for i in range(12)],
                       findings)
    head = page[page.index('<h2 id="findings">'):page.index('<h2 id="contents">')]
    assert "<figure" not in page[:page.index('<h2 id="contents">')] and "<table" not in head
    folded = re.findall(r'<details class="finding"><summary>(.*?)</summary><ul>(.*?)</ul></details>', head)
    assert len(folded) == 12
    for finding, (summary, items) in zip(findings, folded, strict=True):
        assert f'href="#{finding.anchor}"' in summary and finding.title in summary
        assert finding.lines[0].replace("·", "") in summary.replace("·", "") and finding.lines[1] not in summary
        assert items.count("<li>") == 3


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


_MEASURE = """<script>window.addEventListener('load', () => {
  const pre = document.createElement('pre'); pre.id = 'measure';
  pre.textContent = JSON.stringify({contents: document.getElementById('contents').getBoundingClientRect().top});
  document.body.appendChild(pre);
});</script>"""


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
def test_twelve_findings_fit_the_first_screen_in_chromium(tmp_path):
    page = render_html("commscale: compute vs communication, from the lake", "Written now from lake lake: 27 figures.",
                       [Section(f"Sweep s{i}", anchor=f"sweep-s{i}") for i in range(12)], _findings(12))
    path = tmp_path / "page.html"
    path.write_text(page.replace("</body>", _MEASURE + "</body>"))
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1280,900",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000",
               "--dump-dom", path.as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "HOME": str(tmp_path)}).stdout
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert found, f"the measure did not run; chromium printed: {dom[:500]}"
    assert json.loads(found.group(1).replace("&quot;", '"'))["contents"] <= 900  # every finding above the fold


def test_a_long_table_shows_its_first_rows_and_folds_the_rest_markdown_keeps_every_row():
    frame = pd.DataFrame({"trial": range(40), "value": [0.5 * i for i in range(40)]})
    page = html_table("Trials", frame)
    shown, folded = page.split('<details class="more">')
    assert shown.count("<tr><td>") == TABLE_ROWS and folded.count("<tr><td>") == 40 - TABLE_ROWS
    assert "first 10 of 40 rows" in shown and "the other 30 rows" in folded
    assert markdown_table("Trials", frame).count("\n| ") == 2 + 40  # the header and its rule, then every row
    assert "<details" not in html_table("Trials", frame.head(15))  # a table a little longer is shown whole


def _numbers(page: str, column: int) -> list:
    rows = re.findall(r"<tr>(<td>.*?)</tr>", page)
    return [re.findall(r"<td>(.*?)</td>", row)[column] for row in rows]


def test_the_best_layouts_table_writes_each_column_in_one_number_format(search_rows):
    rows = search_rows.assign(tokens_per_s_per_device=[11720.5, 1412.25, 980.0, None, 1500.125, 1100.0, 1300.0],
                              exposed_comm_share=[0.0412, 0.35, 0.2, None, 0.0, 0.25, 0.28],
                              step_time_s=[0.512, 12.0, 1.25, None, 3.5, 2.0, 2.5], devices=4096)
    best = best_layouts(rows)
    page = html_table("Best layouts", best)
    columns = list(best.columns)
    tokens = _numbers(page, columns.index("tokens_per_s_per_device"))
    assert tokens[:4] == ["11,720", "1,500", "1,412", "980"]
    assert _numbers(page, columns.index("exposed_comm_share"))[:4] == ["0.0412", "0.0000", "0.3500", "0.2000"]
    for column in ("tokens_per_s_per_device", "exposed_comm_share", "step_time_s", "trials"):
        cells = _numbers(page, columns.index(column))
        assert len({len(c.split(".")[1]) if "." in c else 0 for c in cells}) == 1, (column, cells)  # one precision
        assert not any("e" in c for c in cells), (column, cells)


def test_column_formats_one_per_column():
    frame = pd.DataFrame({"n": [4096, 8, None], "tiny": [1.5e-5, 2.0, 3.0], "huge": [2e12, 1.0, 5.0],
                          "name": ["a", "b", None], "mixed": ["x", 1.5, 2], "tenths": [0.4, 29.2, 2.0],
                          "share": [0.0412, 1 / 3, 0.5]})
    cells = [[f(v) for f, v in zip(column_formats(frame), row, strict=True)] for row in frame.itertuples(index=False)]
    assert cells == [["4,096", "1.500e-05", "2.000e+12", "a", "x", "0.4", "0.0412"],
                     ["8", "2.000e+00", "1.000e+00", "b", "1.5", "29.2", "0.3333"],
                     ["", "3.000e+00", "5.000e+00", "", "2", "2.0", "0.5000"]]


@pytest.fixture(scope="module")
def several(tmp_path_factory, commit):
    """A lake of two sweeps (the smoke grid at m = 1, the case study) and three layout
    searches (two device counts, two stacks), and its report."""
    root = tmp_path_factory.mktemp("several")
    lake = Lake(str(root / "lake"))
    commit(lake, ["sweep=smoke", "sweep.flop_vs_bw=[1.0]"])
    commit(lake, ["sweep=casestudy"])
    for extra in ([], ["devices=32"], ["stack=megatron-core-2024"]):
        run_search(load_search([*TINY, *extra]), lake)
    return write_report(lake, root / "report")


def test_the_report_of_several_sweeps_and_studies_stays_small_and_self_contained(several):
    page = several.html.read_text(encoding="utf-8")
    assert len(page.encode("utf-8")) < 0.15 * PAGE_LIMIT_BYTES  # 4 figures: a fraction of the bound
    assert set(_sources(page).values()) == {"embedded"} and len(_sources(page)) == len(several.written) == 4
    assert "linked" not in page[:page.index('<h2 id="findings">')]
    (pareto,) = [f for f in several.written if f.name == "pareto"]
    svg = pareto.files[1].read_text(encoding="utf-8")
    assert svg.count('<g id="axes_') == 3  # one panel per study
    assert "<metadata>" not in svg and not re.search(r'd="[^"]*\d\.\d{3}', svg)  # compact: 1/100 pt
