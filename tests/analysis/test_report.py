"""`commscale report`: every figure it wrote is on the page and on disk, every figure it
could not draw is listed with the command that produces its rows, and the page renders
in a real headless Chromium with every image loaded and none blank."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.query import frame, kind_frame
from analysis.report import write_report
from sweeps.lake.kinds import SCHEMAS
from sweeps.lake import Lake
from tasks.model.projection.grid import COST_MODEL_VERSION

COMMSCALE = str(Path(sys.executable).with_name("commscale"))


@pytest.fixture(scope="module")
def report(study_lake, tmp_path_factory):
    return write_report(study_lake, tmp_path_factory.mktemp("report"))


def test_every_known_kind_has_a_view_and_python_reads_frames(study_lake):
    for kind in SCHEMAS:
        assert list(frame(study_lake, f'SELECT count(*) AS n FROM "{kind}"').columns) == ["n"]
    assert frame(study_lake, "SELECT count(*) AS n FROM roi")["n"].item() == 0  # empty, yet there
    counts = frame(study_lake, "SELECT sweep, count(*) AS n FROM projection GROUP BY sweep ORDER BY sweep")
    assert counts.to_dict("list") == {"sweep": ["casestudy", "smoke"], "n": [9, 34]}
    assert kind_frame(study_lake, "no_such_kind") is None
    assert list(kind_frame(study_lake, "projection", ["h", "tp", "not_a_column"]).columns) == ["h", "tp"]


def test_the_report_lists_every_figure_it_wrote(report):
    written = {f.name for f in report.written}
    assert written == {"serialized-smoke-mi210x4-m1", "overlapped-smoke-mi210x4-m1", "serialized-smoke-mi210x4-m4",
                       "overlapped-smoke-mi210x4-m4", "casestudy-casestudy-mi210x4"}
    html = report.html.read_text()
    markdown = report.markdown.read_text()
    assert html.count("<img src='data:image/svg+xml,") == len(written)
    for entry in report.written:
        png, svg = entry.files
        assert png.stat().st_size > 5000 and svg.read_text().lstrip().startswith("<?xml")
        assert f'id="{entry.name}"' in html and entry.about and entry.about in html.replace("&#x27;", "'")
        assert f"](figures/{png.name})" in markdown
    assert "src='figures/" not in html and "http" not in re.sub(r'xmlns(:\w+)?="http[^"]*"', "", html)  # stands alone


def test_figures_without_rows_are_skipped_with_their_command(report):
    skipped = {f.name: f.skipped for f in report.skipped}
    assert set(skipped) == {"accuracy", "pareto", "scaling", "latency-floor", "validation", "limits", "codesign"}
    assert "`commscale calibrate`" in skipped["accuracy"] and "`commscale search`" in skipped["pareto"]
    assert all("`commscale search scaling --scaling`" in skipped[n] for n in ("scaling", "latency-floor"))
    assert "`commscale validate`" in skipped["validation"] and "`commscale limits`" in skipped["limits"]
    assert "`commscale codesign`" in skipped["codesign"]
    markdown = report.markdown.read_text()
    assert markdown.count("*Skipped:") == 7 and "`commscale calibrate`" in markdown


def test_provenance_names_sweeps_calibrations_and_software(report):
    html = report.html.read_text()
    provenance = html[html.index('<h2 id="provenance">Provenance</h2>'):]
    for needle in ("smoke", "casestudy", "spec:mi210x4", COST_MODEL_VERSION, "matplotlib", "duckdb", "recorded (UTC)"):
        assert needle in provenance


def test_a_lake_without_projection_rows_skips_every_study_figure(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    lake.ensure_writable()
    result = write_report(lake, tmp_path / "out")
    assert result.written == [] and result.html.exists()
    commands = {f.skipped.split("`")[1] for f in result.skipped}
    assert commands == {"commscale run", "commscale run sweep=casestudy", "commscale calibrate", "commscale search",
                        "commscale search scaling --scaling", "commscale validate", "commscale limits",
                        "commscale codesign"}


def test_a_new_report_removes_figures_it_no_longer_draws(tmp_path, commit):
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, ["sweep=smoke", "sweep.flop_vs_bw=[1.0]", "sweep.highlights=[]"])
    stale = tmp_path / "out" / "figures" / "serialized-gone-m1.png"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"old")
    result = write_report(lake, tmp_path / "out")
    assert not stale.exists()
    assert sorted(p.name for p in (tmp_path / "out" / "figures").iterdir()) == sorted(
        p.name for f in result.written for p in f.files)


_CHECK = """<script>
window.addEventListener('load', () => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });  // folded figures too
  const result = [...document.querySelectorAll('figure')].map(fig => {
    const img = fig.querySelector('img');
    if (!img) return {id: fig.id, img: false};
    const canvas = document.createElement('canvas');
    canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
    let colors = 0, ink = 0;
    if (img.naturalWidth > 0) {
      const g = canvas.getContext('2d'); g.drawImage(img, 0, 0);
      const d = g.getImageData(0, 0, canvas.width, canvas.height).data, seen = new Set();
      for (let i = 0; i < d.length; i += 4) {
        if (d[i] + d[i + 1] + d[i + 2] < 600) ink++;
        seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      }
      colors = seen.size; ink = ink / (d.length / 4);
    }
    const box = img.getBoundingClientRect();
    return {id: fig.id, img: true, complete: img.complete, width: img.naturalWidth, height: img.naturalHeight,
            shown: box.width, colors: colors, ink: ink};
  });
  const pre = document.createElement('pre'); pre.id = 'check'; pre.textContent = JSON.stringify(result);
  document.body.appendChild(pre);
});
</script>"""


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.browser
@pytest.mark.skipif(_chromium() is None, reason="no chromium on PATH (Debian: apt-get install chromium)")
def test_the_page_renders_in_chromium_with_every_image_loaded_and_none_blank(report, tmp_path):
    page = tmp_path / "checked.html"
    page.write_text(report.html.read_text().replace("</body>", _CHECK + "</body>"))
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=10000",
               "--dump-dom", page.as_uri()]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env).stdout
    found = re.search(r'<pre id="check">(.*?)</pre>', dom, re.S)
    assert found, f"the check did not run; chromium printed: {dom[:500]}"
    figures = json.loads(found.group(1).replace("&quot;", '"'))
    assert sorted(f["id"] for f in figures) == sorted(f.name for f in report.written)
    for fig in figures:
        assert fig["img"] and fig["complete"] and fig["width"] > 300 and fig["height"] > 200, fig
        assert fig["shown"] > 0, fig
        assert fig["colors"] > 20 and 0.01 < fig["ink"] < 0.9, fig  # drawn on, not blank or solid


@pytest.mark.ray
@pytest.mark.slow
def test_run_ends_with_the_report_and_report_writes_it_where_asked(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMMSCALE_REPORT")}
    run = subprocess.run([COMMSCALE, "run", "sweep=smoke", "--lake", str(tmp_path / "lake"), "--num-cpus", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"Report: {tmp_path / 'report' / 'report.html'} (5 figures: 5 drawn, 0 unchanged; 8 skipped" in run.stdout
    out = subprocess.run([COMMSCALE, "report", "--lake", str(tmp_path / "lake"), "--out", str(tmp_path / "elsewhere")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("  wrote ") == 5 and "`commscale run sweep=casestudy`" in out.stdout
    assert (tmp_path / "elsewhere" / "report.html").exists() and (tmp_path / "elsewhere" / "report.md").exists()
