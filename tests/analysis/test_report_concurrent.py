"""Reports written into one folder at once: real `commscale report` processes on one lake.

Every one exits 0 and the folder then holds one whole, consistent report: every file the
page and its Markdown twin name is there and whole (PNG to its last chunk, SVG parses as
XML, and so does each SVG the page embeds), the manifest names exactly the figure files
present, and no temporary file is left."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import unquote

from analysis.report_cache import MANIFEST_NAME
from sweeps.lake import Lake

COMMSCALE = str(Path(sys.executable).with_name("commscale"))
SMALL = ["sweep=smoke", "sweep.flop_vs_bw=[1.0]", "sweep.highlights=[]"]
WRITERS = 4
_PNG_START, _PNG_END = b"\x89PNG\r\n\x1a\n", b"IEND\xaeB`\x82"


def _whole_png(data: bytes) -> bool:
    return data.startswith(_PNG_START) and data.endswith(_PNG_END)


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMMSCALE_REPORT", "COMMSCALE_LAKE")}


def assert_one_whole_report(out: Path) -> None:
    """``out`` holds a report whose every named file is there and whole, and nothing else."""
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.rstrip().endswith("</body></html>")
    embedded = re.findall(r"src='data:image/svg\+xml,([^']+)'", html)
    assert embedded
    for data in embedded:
        ET.fromstring(unquote(data))  # an SVG cut short does not parse
    markdown = (out / "report.md").read_text(encoding="utf-8")
    named = set(re.findall(r'href="figures/([^"]+)"', html)) | set(re.findall(r"\]\(figures/([^)]+)\)", markdown))
    assert len(named) == 2 * len(embedded)  # each figure: its PNG (linked from the Markdown) and its SVG
    for name in named:
        path = out / "figures" / name
        if name.endswith(".png"):
            assert _whole_png(path.read_bytes()), name
        else:
            ET.parse(path)  # an SVG cut short does not parse
    manifest = json.loads((out / MANIFEST_NAME).read_text(encoding="utf-8"))
    listed = {f"{name}{suffix}" for name, record in manifest["figures"].items() if not record.get("skipped")
              for suffix in (".png", ".svg")}
    assert listed == named == {p.name for p in (out / "figures").iterdir()}
    assert [p for p in out.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")] == []


def test_reports_written_at_once_into_one_folder_leave_one_whole_report(tmp_path, commit):
    lake = Lake(str(tmp_path / "lake"))
    commit(lake, SMALL)
    out = tmp_path / "report"
    command = [COMMSCALE, "report", "--lake", str(lake), "--out", str(out)]
    writers = [subprocess.Popen(command, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for _ in range(WRITERS)]
    done = [(w.wait(timeout=600), *w.communicate()) for w in writers]
    assert [status for status, _, _ in done] == [0] * WRITERS, [err for _, _, err in done]
    assert all("Traceback" not in err for _, _, err in done)
    assert_one_whole_report(out)


def test_the_next_report_removes_the_temporaries_of_a_writer_killed_mid_write(tmp_path, commit):
    from analysis.report import write_report

    lake = Lake(str(tmp_path / "lake"))
    commit(lake, SMALL)
    out = tmp_path / "report"
    (out / "figures").mkdir(parents=True)
    left = [out / ".report.html.4242-0123abcd.tmp",
            out / "figures" / ".overlapped-smoke-mi210x4-m1.png.17-deadbeef.tmp"]
    for path in left:
        path.write_bytes(b"half a file")
    (out / ".not-ours").write_text("kept")
    write_report(lake, out)
    assert not any(path.exists() for path in left) and (out / ".not-ours").read_text() == "kept"
    (out / ".not-ours").unlink()
    assert_one_whole_report(out)
