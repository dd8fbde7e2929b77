"""A report folder that cannot hold the report: real `commscale report` (and `run`) processes.

A file where the folder should be, a folder where one of its files should be, a read-only
folder: one line naming the path, exit status 2. A full disk (a file-size limit, and a full
tmpfs where this machine lets a test mount one): one line saying so and that the lake is
untouched, exit status 1. Never a traceback, never a temporary file left, the lake unchanged,
and a former page that could not be replaced stays whole as it was."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from analysis.query import frame
from sweeps.lake import Lake

COMMSCALE = str(Path(sys.executable).with_name("commscale"))
SMALL = ["sweep=smoke", "sweep.flop_vs_bw=[1.0]", "sweep.highlights=[]"]
FIGURE = "serialized-smoke-mi210x4-m1"


@pytest.fixture(scope="module")
def lake(tmp_path_factory, commit) -> Lake:
    lake = Lake(str(tmp_path_factory.mktemp("folder") / "lake"))
    commit(lake, SMALL)
    return lake


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMMSCALE_REPORT", "COMMSCALE_LAKE")}
    return {**env, **extra}


def _report(lake: Lake, out: Path, *args: str, limit_bytes: Optional[int] = None) -> subprocess.CompletedProcess:
    """``commscale report`` into ``out``; ``limit_bytes``: a file-size limit standing in for a full disk
    (writes beyond it fail with EFBIG; SIGXFSZ ignored so the process lives to say so)."""
    def cap() -> None:
        if limit_bytes is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run([COMMSCALE, "report", "--lake", str(lake), "--out", str(out), *args], env=_env(),
                          capture_output=True, text=True, timeout=300, preexec_fn=cap)


def _tree(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(root.rglob("*"))}


def _temporaries(root: Path) -> list:
    return [p for p in root.rglob("*") if p.name.startswith(".") or p.name.endswith(".tmp")]


def _one_error_line(done: subprocess.CompletedProcess, status: int, *words: str) -> str:
    """The one line on stderr, checked: the exit ``status``, no traceback, every one of ``words``."""
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == status, done.stderr
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and all(w in lines[0] for w in words), lines[0]
    return lines[0]


def _make_file(out: Path) -> Path:
    out.write_text("not a folder\n")
    return out


def _make_figures_a_file(out: Path) -> Path:
    out.mkdir()
    return _make_file(out / "figures")


def _make_figure_a_folder(out: Path) -> Path:
    (out / "figures" / f"{FIGURE}.png").mkdir(parents=True)
    return out / "figures" / f"{FIGURE}.png"


def _make_folder(name: str):
    def make(out: Path) -> Path:
        (out / name).mkdir(parents=True)
        return out / name
    return make


@pytest.mark.parametrize("make", [_make_file, _make_figures_a_file, _make_figure_a_folder,
                                  _make_folder("figures.json"), _make_folder("report.html"),
                                  _make_folder("report.md")],
                         ids=["folder-is-a-file", "figures-is-a-file", "figure-is-a-folder", "cache-is-a-folder",
                              "page-is-a-folder", "markdown-is-a-folder"])
def test_a_file_where_a_folder_should_be_or_a_folder_where_a_file_should_be_is_refused(lake, tmp_path, make):
    out = tmp_path / "report"
    culprit = make(out)
    lake_before, out_before = _tree(Path(str(lake))), _tree(tmp_path)
    _one_error_line(_report(lake, out), 2, str(culprit))
    assert _tree(Path(str(lake))) == lake_before and _tree(tmp_path) == out_before  # nothing written at all


def _read_only(folder: Path) -> Optional[str]:
    """Make ``folder`` read-only for this user: a read-only tmpfs mount where root may mount,
    else its mode bits; returns how, or None where neither holds (root without mount)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return "mode"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)], capture_output=True)
    return "mount" if done.returncode == 0 else None


def test_a_read_only_report_folder_is_refused_naming_it(lake, tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    how = _read_only(out)
    if how is None:
        pytest.skip("root, and no tmpfs can be mounted read-only here")
    try:
        _one_error_line(_report(lake, out), 2, str(out))
        assert list(out.iterdir()) == []
    finally:
        if how == "mount":
            subprocess.run(["umount", str(out)], check=True)
        else:
            out.chmod(0o755)


def test_a_full_disk_while_drawing_says_so_and_leaves_the_lake_untouched(lake, tmp_path):
    out = tmp_path / "report"
    lake_before = _tree(Path(str(lake)))
    line = _one_error_line(_report(lake, out, limit_bytes=4096), 1, str(out / "figures"), "lake")
    assert "disk" in line and "untouched" in line
    assert _temporaries(tmp_path) == [] and not (out / "report.html").exists()
    assert _tree(Path(str(lake))) == lake_before


def test_a_full_disk_while_writing_the_page_keeps_the_former_page_whole(lake, tmp_path):
    out = tmp_path / "report"
    assert _report(lake, out).returncode == 0
    page = (out / "report.html").read_bytes()
    assert len(page) > 20_000  # the figures it embeds make it larger than the limit below
    # Another order rewrites the page (and draws no figure): the page's own write meets the full disk.
    line = _one_error_line(_report(lake, out, "--first", "smoke", limit_bytes=20_000), 1,
                           str(out / "report.html"), "lake")
    assert "disk" in line and "untouched" in line
    assert (out / "report.html").read_bytes() == page and _temporaries(tmp_path) == []
    again = _report(lake, out, "--first", "smoke")  # room again: the report is written and says so
    assert again.returncode == 0 and "3 unchanged" in again.stdout, again.stderr


def test_a_full_tmpfs_says_so_and_leaves_no_temporary_file(lake, tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(out)],
                                           capture_output=True).returncode != 0:
        pytest.skip("a tmpfs can be mounted by root only, where mount works")
    try:
        line = _one_error_line(_report(lake, out), 1, str(out), "lake")
        assert "disk" in line and "untouched" in line
        assert _temporaries(out) == []
    finally:
        subprocess.run(["umount", str(out)], check=True)


@pytest.mark.ray
@pytest.mark.slow
def test_run_with_an_unusable_report_folder_commits_its_rows_and_says_the_report_was_not_written(tmp_path):
    folder = _make_file(tmp_path / "report")
    done = subprocess.run([COMMSCALE, "run", *SMALL, "--lake", str(tmp_path / "lake"), "--num-cpus", "2"],
                          cwd=tmp_path, env=_env(COMMSCALE_REPORT=str(folder)), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and str(folder) in errors[0] and "committed" in errors[0], done.stderr
    assert "commscale report" in errors[0]
    assert "Lake:" in done.stdout  # the run's own summary came first
    assert frame(Lake(str(tmp_path / "lake")), "SELECT count(*) AS n FROM projection")["n"].item() == 16
    assert folder.read_text() == "not a folder\n"
    shutil.rmtree(tmp_path / "lake")


def test_the_help_of_each_command_that_writes_a_report_gives_its_exit_statuses():
    from click.testing import CliRunner

    from sweeps.cli import main

    said = {name: " ".join(CliRunner().invoke(main, [name, "--help"]).output.split())
            for name in ("report", "run", "calibrate")}
    assert "Exit status 2 when the folder cannot hold the report" in said["report"]
    assert "1 when the disk is full" in said["report"]
    assert all("exit status 1 after the rows are committed" in said[name] for name in ("run", "calibrate"))
