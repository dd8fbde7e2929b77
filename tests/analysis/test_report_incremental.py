"""The report redraws only what changed, caps the multipliers it draws, and opens with its
findings: an unchanged lake draws nothing (and leaves every file as it was), a new sweep
draws its own figures only, a figure whose files went missing is drawn again, the sweep
named first comes first, and each sweep draws at most ``max_m`` multipliers, saying which
it left out and how to draw them. Real lakes, written by the lake's own commit path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from analysis.report import write_report
from analysis.report_cache import MANIFEST_NAME
from analysis.report_study import choose_m
from sweeps.cli.report import report as report_command, write_and_announce
from sweeps.lake import Lake

SMALL = ["sweep=smoke", "sweep.flop_vs_bw=[1.0]", "sweep.highlights=[]"]


def _mtimes(folder: Path) -> dict:
    return {p.name: p.stat().st_mtime_ns for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def small_lake(tmp_path, commit) -> Lake:
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, SMALL)
    return lake


def test_an_unchanged_lake_draws_nothing_and_touches_no_file(small_lake, tmp_path):
    out = tmp_path / "out"
    first = write_report(small_lake, out)
    assert {f.name for f in first.drawn} == {"serialized-smoke-mi210x4-m1", "overlapped-smoke-mi210x4-m1"}
    before = _mtimes(out)
    again = write_report(small_lake, out)
    assert again.kept and again.drawn == [] and len(again.written) == 2
    assert _mtimes(out) == before  # page, Markdown, figures and manifest: not one byte rewritten
    assert [f.title for f in again.findings] == [f.title for f in first.findings]


def test_another_order_rewrites_the_page_but_draws_no_figure(tmp_path, commit):
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, SMALL)
    commit(lake, ["sweep=casestudy"])
    out = tmp_path / "out"
    write_report(lake, out)
    figures_before = _mtimes(out / "figures")
    result = write_report(lake, out, first_sweep="smoke")  # the page changes, no figure's rows do
    assert not result.kept and result.drawn == [] and len(result.written) == 3
    assert _mtimes(out / "figures") == figures_before
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    assert sorted(n for n, r in manifest["figures"].items() if not r.get("skipped")) == sorted(
        f.name for f in result.written)


def test_a_new_sweep_draws_only_its_own_figures(small_lake, tmp_path, commit):
    out = tmp_path / "out"
    write_report(small_lake, out)
    before = _mtimes(out / "figures")
    commit(small_lake, SMALL[:-1] + ["sweep.name=other", "hardware=h100"])
    result = write_report(small_lake, out)
    assert {f.name for f in result.drawn} == {"serialized-other-h100-m1", "overlapped-other-h100-m1"}
    after = _mtimes(out / "figures")
    assert {k: v for k, v in after.items() if k in before} == before  # the old sweep's files untouched
    assert result.findings[0].title.startswith("Sweep other on h100")  # the newest sweep first


def test_a_figure_whose_files_went_missing_is_drawn_again(small_lake, tmp_path):
    out = tmp_path / "out"
    write_report(small_lake, out)
    (out / "figures" / "overlapped-smoke-mi210x4-m1.svg").unlink()
    result = write_report(small_lake, out)
    assert [f.name for f in result.drawn] == ["overlapped-smoke-mi210x4-m1"]
    assert (out / "figures" / "overlapped-smoke-mi210x4-m1.svg").exists()


def _heading_positions(text: str, headings) -> list:
    return [text.index(h) for h in headings]


def test_the_page_opens_with_findings_then_contents_then_sections(study_lake, tmp_path):
    result = write_report(study_lake, tmp_path / "out")
    html, markdown = result.html.read_text(), result.markdown.read_text()
    first_section = result.sections[0]
    html_order = _heading_positions(html, ['<h2 id="findings">', '<h2 id="contents">',
                                           f'<h2 id="{first_section.anchor}">', '<h2 id="figure-files">'])
    assert html_order == sorted(html_order)
    md_order = _heading_positions(markdown, ["## Findings", "## Contents", f"## {first_section.title}",
                                             "## Figure files"])
    assert md_order == sorted(md_order)
    findings = html[html.index('<h2 id="findings">'):html.index('<h2 id="contents">')]
    assert "m=1" in findings and "m=4" in findings and "of the (H, SL·B) cases" in findings  # numbers, at each m
    assert "DP inter-node +1.3x interference" in findings  # the case study's exposed share per scenario
    for section in result.sections:  # the contents link every section
        assert f'<a href="#{section.anchor}">' in html and f"](#{section.anchor})" in markdown
    assert result.sections[-1].title == "Figure files" and result.sections[-2].title == "Provenance"


@pytest.mark.parametrize("first", ["smoke", "casestudy"])
def test_the_sweep_named_first_comes_first(study_lake, tmp_path, first):
    result = write_report(study_lake, tmp_path / "out", first_sweep=first)
    assert f" {first} on mi210x4" in result.sections[0].title
    assert f" {first} on mi210x4" in result.findings[0].title
    html = result.html.read_text()
    contents = html[html.index('<h2 id="contents">'):]
    assert contents.index(f" {first} on mi210x4") < contents.index(
        " casestudy on mi210x4" if first == "smoke" else " smoke on mi210x4")


def test_without_a_first_sweep_the_most_recent_comes_first(study_lake, tmp_path):
    result = write_report(study_lake, tmp_path / "out")
    assert "casestudy" in result.sections[0].title  # committed after smoke


def test_choose_m_keeps_today_the_ends_and_spreads_the_rest():
    assert choose_m([1, 2, 4], 4) == ([1, 2, 4], [])
    assert choose_m([4, 2, 1], 0) == ([1, 2, 4], [])
    kept, left = choose_m([float(m) for m in range(1, 201)], 4)
    assert kept[0] == 1 and kept[-1] == 200 and len(kept) == 4 and len(left) == 196
    assert choose_m([0.5, 1.0, 2.0, 8.0], 2) == ([1.0, 8.0], [0.5, 2.0])  # m = 1 always, then an end
    assert choose_m([2.0, 3.0, 5.0], 1) == ([2.0], [3.0, 5.0])


def test_a_sweep_draws_at_most_max_m_multipliers_and_names_the_rest(tmp_path, commit):
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, ["sweep=smoke", "sweep.flop_vs_bw=[1.0,2.0,3.0,4.0,5.0]", "sweep.highlights=[]"])
    result = write_report(lake, tmp_path / "out", max_m=2)
    assert {f.name for f in result.written} == {f"{kind}-smoke-mi210x4-m{m}" for kind in ("serialized", "overlapped")
                                                for m in (1, 5)}
    (section,) = [s for s in result.sections if "smoke" in s.title]
    assert "Not drawn: m = 2, 3, 4 (3 of 5 multipliers; `commscale report --max-m 0` draws every one)" in section.intro
    assert [c for c in section.tables[0][1].columns if c.startswith("m=")] == ["m=1", "m=5"]
    assert any("Not drawn: m = 2, 3, 4" in line for line in result.findings[0].lines)
    every = write_report(lake, tmp_path / "out", max_m=0)
    assert len(every.written) == 10 and {f.name for f in every.drawn} == {
        f"{kind}-smoke-mi210x4-m{m}" for kind in ("serialized", "overlapped") for m in (2, 3, 4)}


def test_the_case_study_table_is_sorted_by_m_then_network_scenario(study_lake, tmp_path):
    result = write_report(study_lake, tmp_path / "out")
    (case,) = [s for s in result.sections if s.title.startswith("Case study casestudy")]
    table = case.tables[0][1]
    assert list(table["flop_vs_bw"]) == [1.0] * 3 + [2.0] * 3 + [4.0] * 3
    assert list(table["scenario"][:3]) == ["DP intra-node", "DP inter-node", "DP inter-node +1.3x interference"]


def test_no_report_writes_nothing_and_says_how_to_write_it(small_lake, tmp_path):
    console = Console(record=True, width=200)
    assert write_and_announce(console, small_lake, str(tmp_path / "out"), first_sweep="smoke", skip=True) is None
    assert not (tmp_path / "out").exists()
    said = console.export_text()
    assert "--no-report" in said and "`commscale report`" in said


def test_report_command_names_drawn_and_kept_figures_and_refuses_a_negative_cap(small_lake, tmp_path):
    runner = CliRunner()
    args = ["--lake", str(small_lake), "--out", str(tmp_path / "out")]
    first = runner.invoke(report_command, args)
    assert first.exit_code == 0 and first.output.count("  wrote ") == 3  # two figures of the sweep, the timeline
    again = runner.invoke(report_command, args)
    assert again.exit_code == 0 and again.output.count("  kept ") == 3
    assert re.search(r"\(3 figures: 0 drawn, 3 unchanged; \d+ skipped", again.output)
    bad = runner.invoke(report_command, args + ["--max-m", "-1"])
    assert bad.exit_code == 2 and "--max-m" in bad.output


def test_a_grid_with_placed_links_is_drawn_as_a_grid_not_as_a_case_study(tmp_path, commit):
    """A case-study figure draws a bar per configuration and scenario: a whole grid with
    placed links (`run sweep.links=placed`) once drew 1,588 of them, in 24 s."""
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, [*SMALL, "sweep.links=placed"])
    commit(lake, ["sweep=casestudy", "sweep.flop_vs_bw=[1.0]"])
    drawn = {f.name for f in write_report(lake, tmp_path / "out").drawn}
    assert drawn == {"serialized-smoke-mi210x4-m1", "overlapped-smoke-mi210x4-m1", "casestudy-casestudy-mi210x4"}
