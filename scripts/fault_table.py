"""Inject each known lake fault and print what a user then gets: exit status, rows served,
rows lost, doubled and wrong.

    python scripts/fault_table.py                      # this checkout's commscale
    python scripts/fault_table.py --commscale OTHER/bin/commscale --only A,C

A base lake is built once (the default sweep on three hardware profiles) and its rows,
read back by the same ``commscale``, are the reference. Each case copies the base lake,
injects one fault, runs the command a user would run next (``first``), then the remedy
that command's message names (``remedy``), and reads the rows back. "lost" counts
reference rows no longer served after the remedy (and, where the lake set damaged bytes
aside, after a re-run recomputed them); "wrong" counts served rows whose value differs
from the reference. Kill and race cases (``commscale probe``) compare the committed keys
with those of an undisturbed run. Each case prints one Markdown table row as it ends.
The cases of ``scripts/hostile_cases.py`` follow (groups S: security, R: rows lost or
wrong, C: crashes, W: runaway work, T: tracebacks). Takes about 20 minutes on a 2-core
machine.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_cases import Hostile  # noqa: E402  (a sibling script)

HARDWARE = ("mi210x4", "h100", "b200")
ROWS_SQL = "SELECT hardware, key, serialized_fraction FROM projection"


@dataclass
class Outcome:
    """One row of the table."""

    case: str
    injected: str
    first: str = ""
    first_rc: Optional[int] = None
    served: Optional[int] = None
    wrong_served: Optional[int] = None
    remedy: str = ""
    lost: Optional[int] = None
    doubled: Optional[int] = None
    wrong: Optional[int] = None
    note: str = ""
    extra: dict = field(default_factory=dict)

    def markdown(self) -> str:
        def cell(v):
            return "" if v is None else str(v)
        return "| " + " | ".join([self.case, self.injected, self.first, cell(self.first_rc), cell(self.served),
                                  cell(self.wrong_served), self.remedy, cell(self.lost), cell(self.doubled),
                                  cell(self.wrong), self.note.replace("|", "/")]) + " |"


HEADER = ("| case | injected | first command | exit | rows served | wrong served | remedy | lost | doubled "
          "| wrong | what it said |\n|---|---|---|---|---|---|---|---|---|---|---|")


class Bench:
    """Runs one ``commscale`` in scratch folders."""

    def __init__(self, commscale: str, work: Path) -> None:
        self.commscale, self.work = commscale, work
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "COMMSCALE_"))}
        self.env["COMMSCALE_REPORT"] = str(work / "report")

    def cli(self, lake: Path, *args: str, timeout: float = 600, limit_bytes: Optional[int] = None
            ) -> subprocess.CompletedProcess:
        """``commscale ARGS --lake LAKE`` (``limit_bytes``: a file-size limit standing in for a full disk)."""
        def cap():
            if limit_bytes is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
        command = [self.commscale, *args, "--lake", str(lake)]
        try:
            return subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout,
                                  cwd=self.work, preexec_fn=cap)
        except subprocess.TimeoutExpired as exc:
            def text(out) -> str:
                return out.decode(errors="replace") if isinstance(out, bytes) else (out or "")
            return subprocess.CompletedProcess(command, 124, text(exc.stdout), text(exc.stderr))

    def said(self, done: subprocess.CompletedProcess, prefer: str = "") -> str:
        """The line a command's user reads first: its error, else a line containing ``prefer``,
        else its last line; the scratch folder shown as ``$W``, shortened."""
        lines = [ln.strip() for ln in (done.stderr + "\n" + done.stdout).splitlines()
                 if ln.strip() and "WARNING" not in ln and " INFO " not in ln]
        errors = [ln for ln in lines if ln.startswith(("error", "Error", "RuntimeError", "terminate"))
                  or "Error:" in ln]
        preferred = [ln for ln in lines if prefer and prefer in ln]
        line = (errors or preferred or lines or [""])[-1 if errors or not preferred else 0]
        return line.replace(str(self.work), "$W")[:160]

    def preset(self, group: str, name: str) -> str:
        """The text of ``conf/GROUP/NAME.yaml`` of the commscale under test."""
        python = str(Path(self.commscale).with_name("python"))
        where = subprocess.run([python, "-c", "import conf, os; print(os.path.dirname(conf.__file__))"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return (Path(where) / group / f"{name}.yaml").read_text()

    def rows(self, lake: Path, sql: str = ROWS_SQL) -> tuple[int, list[tuple]]:
        """Exit status and rows of ``commscale query SQL --format csv``."""
        done = self.cli(lake, "query", sql, "--format", "csv")
        if done.returncode != 0:
            return done.returncode, []
        return 0, [tuple(r) for r in csv.reader(io.StringIO(done.stdout))][1:]


def compare(reference: dict, rows: list[tuple], only: Optional[Callable[[tuple], bool]] = None):
    """(lost, doubled, wrong) of served rows against the reference ``{(hardware, key): value}``."""
    keep = only or (lambda key: True)
    served = [(r[0], r[1]) for r in rows if keep((r[0], r[1]))]
    values = {(r[0], r[1]): r[2] for r in rows}
    lost = sum(1 for k in reference if keep(k) and k not in values)
    doubled = len(served) - len(set(served))
    wrong = sum(1 for k, v in values.items() if keep(k) and k in reference and not _same(reference[k], v))
    return lost, doubled, wrong


def _same(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    return (math.isnan(x) and math.isnan(y)) or abs(x - y) <= 1e-9 * max(1.0, abs(x))


def data_files(lake: Path, hardware: str = "mi210x4") -> list[Path]:
    return sorted((lake / "kind=projection").rglob(f"hardware={hardware}/part-*.parquet"))


def _inside_column(path: Path, column: str) -> int:
    """A byte offset three quarters into ``column``'s chunk of the file's first row group."""
    meta = pq.ParquetFile(path).metadata.row_group(0)
    chunk = next(meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column)
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    return start + chunk.total_compressed_size * 3 // 4


def log_entries(lake: Path) -> list[Path]:
    return sorted((lake / "_log").glob("*.json"))


class Cases:
    """Each method: one injected fault, returning its Outcome."""

    def __init__(self, bench: Bench, base: Path, reference: dict) -> None:
        self.bench, self.base, self.reference = bench, base, reference

    def _copy(self, name: str) -> Path:
        lake = self.bench.work / f"lake-{name}"
        shutil.rmtree(lake, ignore_errors=True)
        shutil.copytree(self.base, lake)
        return lake

    def _served(self, out: Outcome, lake: Path) -> None:
        """The first command after the fault: a query of every row."""
        rc, rows = self.bench.rows(lake)
        out.first, out.first_rc = "query", rc
        out.served = len(rows)
        out.wrong_served = compare(self.reference, rows)[2]

    def _after(self, out: Outcome, lake: Path, only=None) -> None:
        rc, rows = self.bench.rows(lake)
        if rc != 0:
            out.lost, out.doubled, out.wrong = len(self.reference), 0, 0
            out.note += f" (query after remedy: exit {rc})"
            return
        out.lost, out.doubled, out.wrong = compare(self.reference, rows, only)

    def _remedy(self, out: Outcome, lake: Path, *commands: tuple[str, ...]) -> None:
        codes = []
        for args in commands:
            done = self.bench.cli(lake, *args)
            codes.append(f"{' '.join(args)} → {done.returncode}")
        out.remedy = "; ".join(codes)

    def _rerun(self) -> list[tuple[str, ...]]:
        return [("run", f"hardware={hw}") for hw in HARDWARE]

    def upgrade_without_lake_json(self) -> Outcome:
        out = Outcome("1", "rm _lake.json")
        lake = self._copy("nojson")
        (lake / "_lake.json").unlink()
        rc, rows = self.bench.rows(lake)
        out.first, out.first_rc, out.served = "query", rc, len(rows)
        out.note = self.bench.said(self.bench.cli(lake, "query", "SELECT count(*) FROM projection"))
        self._remedy(out, lake, ("lake", "upgrade"))
        self._after(out, lake)
        return out

    def restart_other_hardware(self) -> Outcome:
        out = Outcome("2", "changed config of table2 on mi210x4, then --restart")
        lake = self._copy("restart")
        done = self.bench.cli(lake, "run", "sweep.dp_slowdown=1.5", "--restart")
        out.first, out.first_rc = "run sweep.dp_slowdown=1.5 --restart", done.returncode
        out.note = self.bench.said(done, "remov")
        rc, rows = self.bench.rows(lake)
        out.served = len(rows)
        out.lost, out.doubled, out.wrong = compare(self.reference, rows, only=lambda k: k[0] != "mi210x4")
        out.remedy = "(rows of h100 and b200 counted)"
        return out

    def flipped_byte(self) -> Outcome:
        out = Outcome("3", "one byte flipped in a data file (serialized_fraction column)")
        lake = self._copy("flip")
        victim = data_files(lake)[0]
        data = bytearray(victim.read_bytes())
        data[_inside_column(victim, "serialized_fraction")] ^= 0xFF
        victim.write_bytes(bytes(data))
        self._served(out, lake)
        out.note = self.bench.said(self.bench.cli(lake, "query", ROWS_SQL))
        self._remedy(out, lake, ("lake", "verify", "--repair"), *self._rerun())
        self._after(out, lake)
        return out

    def middle_entry_deleted(self) -> Outcome:
        out = Outcome("4", "a middle _log entry deleted")
        lake = self._copy("gap")
        entries = log_entries(lake)
        entries[len(entries) // 2].unlink()
        self._served(out, lake)
        out.note = self.bench.said(self.bench.cli(lake, "query", ROWS_SQL))
        self._remedy(out, lake, ("lake", "verify", "--repair"), *self._rerun())
        self._after(out, lake)
        return out

    def not_finite(self, label: str, override: str) -> Outcome:
        out = Outcome("5", label)
        lake = self._copy("nan")
        done = self.bench.cli(lake, "run", "sweep.name=bad", override)
        out.first, out.first_rc, out.note = f"run {override}", done.returncode, self.bench.said(done)
        rc, rows = self.bench.rows(lake, "SELECT hardware, key, serialized_fraction FROM projection "
                                         "WHERE sweep = 'bad'")
        out.served = len(rows)
        out.remedy = "(rows of sweep 'bad' written)"
        rc, all_rows = self.bench.rows(lake)
        out.lost, out.doubled, out.wrong = compare(self.reference, all_rows)
        return out

    def hardware_yaml_nan(self) -> Outcome:
        out = Outcome("5", "hardware YAML with peak_tflops: .nan")
        lake = self._copy("nanhw")
        text = self.bench.preset("hardware", "h100")
        text = re.sub(r"(?m)^(\s*peak_tflops:\s*).*$", r"\1.nan", text, count=1)
        bad = self.bench.work / "nan_hw.yaml"
        bad.write_text(text)
        done = self.bench.cli(lake, "run", "sweep.name=bad", f"hardware={bad}")
        out.first, out.first_rc, out.note = "run hardware=nan_hw.yaml", done.returncode, self.bench.said(done)
        rc, rows = self.bench.rows(lake, "SELECT hardware, key, serialized_fraction FROM projection "
                                         "WHERE sweep = 'bad'")
        out.served, out.remedy = len(rows), "(rows of sweep 'bad' written)"
        return out

    def torn_newest(self, how: str) -> Outcome:
        out = Outcome("6", f"newest _log entry {how}")
        lake = self._copy(f"torn-{how}")
        newest = log_entries(lake)[-1]
        body = newest.read_bytes()
        newest.write_bytes(b"" if how == "empty" else body[: len(body) // 2])
        self._served(out, lake)
        out.note = self.bench.said(self.bench.cli(lake, "query", ROWS_SQL))
        self._remedy(out, lake, ("lake", "verify", "--repair"), *self._rerun())
        self._after(out, lake)
        return out

    def garbage_middle(self) -> Outcome:
        out = Outcome("6", "garbage bytes in a middle _log entry")
        lake = self._copy("garbage")
        entries = log_entries(lake)
        entries[len(entries) // 2].write_bytes(b"\x00\xff garbage \x13\x37" * 20)
        self._served(out, lake)
        out.note = self.bench.said(self.bench.cli(lake, "query", ROWS_SQL))
        self._remedy(out, lake, ("lake", "verify", "--repair"), *self._rerun())
        self._after(out, lake)
        return out

    def sidecar(self, how: str) -> Outcome:
        out = Outcome("7", f"_keys sidecar {how}")
        lake = self._copy(f"keys-{how}")
        sidecars = sorted((lake / "_keys").rglob("*")) if (lake / "_keys").exists() else []
        sidecars = [p for p in sidecars if p.is_file()]
        for p in sidecars:
            if how == "deleted":
                p.unlink()
            else:
                p.write_bytes(b"\x00garbled\xff" * 8)
        done = self.bench.cli(lake, "run", "hardware=h100", "sweep.tp=[8,16]", "sweep.name=more")
        out.first, out.first_rc, out.note = "run (another sweep)", done.returncode, self.bench.said(done)
        verify = self.bench.cli(lake, "lake", "verify")
        out.extra["verify"] = verify.returncode
        out.note += f" / lake verify → {verify.returncode}"
        self._remedy(out, lake, ("lake", "verify", "--repair"), *self._rerun())
        self._after(out, lake, only=lambda k: True)
        rc, rows = self.bench.rows(lake)
        out.served = len(rows)
        return out

    def verify_repeatedly(self, times: int = 12) -> Outcome:
        out = Outcome("8", f"lake verify {times}x on a clean lake")
        codes = [self.bench.cli(self.base, "lake", "verify").returncode for _ in range(times)]
        out.first, out.first_rc = "lake verify", max(codes, key=lambda c: c != 0)
        out.note = "exit codes " + ",".join(map(str, codes))
        out.lost, out.doubled, out.wrong = compare(self.reference, self.bench.rows(self.base)[1])
        return out

    def data_file(self, how: str) -> Outcome:
        out = Outcome("9", f"data file {how}")
        lake = self._copy(f"data-{how}")
        victim = data_files(lake)[0]
        if how == "truncated":
            victim.write_bytes(victim.read_bytes()[:200])
        else:
            victim.unlink()
        self._served(out, lake)
        out.note = self.bench.said(self.bench.cli(lake, "query", ROWS_SQL))
        self._remedy(out, lake, ("lake", "verify", "--repair"), *self._rerun())
        self._after(out, lake)
        return out

    def path_is_file(self, which: str) -> Outcome:
        out = Outcome("10", f"{which} is a file")
        lake = self._copy(f"file-{which.strip('_')}")
        target = lake / which
        if target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("not a folder\n")
        done = self.bench.cli(lake, "run", "sweep.name=more", "sweep.tp=[8,16]")
        out.first, out.first_rc, out.note = "run (another sweep)", done.returncode, self.bench.said(done)
        return out

    def full_disk(self) -> Outcome:
        """The lake on a tmpfs with room for half a data file more than it holds (needs
        root to mount; skipped otherwise)."""
        out = Outcome("10", "full disk mid-run (lake on a tmpfs that fills)")
        sizes = [p.stat().st_size for p in self.base.rglob("*") if p.is_file()]
        room = sum(-(-size // 4096) * 4096 for size in sizes) + 64 * 4096 + max(sizes) // 2  # whole pages
        mount = self.bench.work / "tmpfs"
        mount.mkdir(exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={room}", "tmpfs", str(mount)],
                                 capture_output=True, text=True)
        if mounted.returncode != 0:
            out.note = f"skipped: cannot mount a tmpfs ({mounted.stderr.strip()[:80]})"
            return out
        try:
            lake = mount / "lake"
            shutil.copytree(self.base, lake)
            done = self.bench.cli(lake, "run", "hardware=h200")
            out.first, out.first_rc, out.note = "run hardware=h200", done.returncode, self.bench.said(done)
            verify = self.bench.cli(lake, "lake", "verify")
            out.remedy = f"lake verify → {verify.returncode}"
            self._after(out, lake)
        finally:
            subprocess.run(["umount", str(mount)], capture_output=True)
        return out

    def query_writes(self) -> list[Outcome]:
        outs = []
        for label, sql in [("COPY TO a file inside the lake", "COPY (SELECT 1 AS x) TO '{lake}/leak.csv'"),
                           ("ATTACH a database", "ATTACH '{work}/other.db' AS other"),
                           ("DROP VIEW", "DROP VIEW projection"),
                           ("INSTALL an extension", "INSTALL httpfs")]:
            lake = self._copy("sql")
            done = self.bench.cli(lake, "query", sql.format(lake=lake, work=self.bench.work))
            wrote = (lake / "leak.csv").exists() or (self.bench.work / "other.db").exists()
            out = Outcome("11", f"query: {label}", "query", done.returncode, note=self.bench.said(done))
            out.remedy = "file written" if wrote else "nothing written"
            (self.bench.work / "other.db").unlink(missing_ok=True)
            outs.append(out)
        return outs


class Kills:
    """The cases that held before: a driver SIGKILLed mid-sweep (before its first commit,
    in the middle of one, and after some), two writers of one sweep at once."""

    def __init__(self, bench: Bench) -> None:
        self.bench = bench
        self.args = ["probe", "--name", "kill", "--points", "120", "--sleep-ms", "60", "--chunk-size", "2",
                     "--num-cpus", "2"]
        self._expected: Optional[set] = None

    def expected(self) -> set:
        """The keys of an undisturbed run of the probe: run once, then remembered (the
        vacuum race of ``hostile_cases`` and the held cases compare with the same run)."""
        if self._expected is None:
            lake = self.bench.work / "lake-probe-ref"
            shutil.rmtree(lake, ignore_errors=True)
            self.bench.cli(lake, *self.args)
            self._expected = set(r[0] for r in self.bench.rows(lake, "SELECT key FROM probe")[1])
        return self._expected

    def _keys(self, lake: Path) -> list:
        return [r[0] for r in self.bench.rows(lake, "SELECT key FROM probe")[1]]

    def killed(self, label: str, moment: Callable[[Path], bool], expected: set) -> Outcome:
        """SIGKILL the driver once ``moment(lake)`` holds (polled every millisecond), then
        run the same sweep again and compare its keys with an undisturbed run's."""
        out = Outcome("held", f"driver SIGKILLed {label}")
        lake = self.bench.work / f"lake-kill-{len(label)}-{time.monotonic_ns()}"
        proc = subprocess.Popen([self.bench.commscale, *self.args, "--lake", str(lake)], env=self.bench.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.bench.work,
                                start_new_session=True)
        deadline = time.monotonic() + 300
        while proc.poll() is None and not moment(lake) and time.monotonic() < deadline:
            time.sleep(0.001)
        killed = proc.poll() is None
        if killed:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        before = self._keys(lake)
        done = self.bench.cli(lake, *self.args)
        keys = self._keys(lake)
        out.first, out.first_rc, out.served = "probe (the same, resumed)", done.returncode, len(keys)
        out.note = f"{len(before)} rows committed before the kill" + ("" if killed else " (it finished first)")
        out.lost, out.doubled, out.wrong = len(expected - set(keys)), len(keys) - len(set(keys)), 0
        return out

    def two_writers(self, expected: set) -> Outcome:
        out = Outcome("held", "two writers of one sweep at once")
        lake = self.bench.work / "lake-race"
        shutil.rmtree(lake, ignore_errors=True)
        procs = [subprocess.Popen([self.bench.commscale, *self.args, "--lake", str(lake)], env=self.bench.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=self.bench.work)
                 for _ in range(2)]
        codes = [p.wait() for p in procs]
        keys = self._keys(lake)
        out.first, out.first_rc, out.served = "probe ×2", max(codes), len(keys)
        out.note = f"exit codes {codes}"
        out.lost, out.doubled, out.wrong = len(expected - set(keys)), len(keys) - len(set(keys)), 0
        return out


def _after_seconds(seconds: float) -> Callable[[Path], bool]:
    start = time.monotonic()
    return lambda lake: time.monotonic() - start >= seconds


def _commits(lake: Path) -> int:
    return len(list((lake / "_log").glob("*.json"))) if (lake / "_log").is_dir() else 0


def _after_commits(count: int) -> Callable[[Path], bool]:
    return lambda lake: _commits(lake) >= count


def _mid_commit(lake: Path) -> bool:
    """A data file is being written or published but not yet in the log."""
    return _commits(lake) >= 3 and any(lake.glob("kind=*/**/.*.tmp"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commscale", default=str(Path(sys.executable).with_name("commscale")))
    parser.add_argument("--only", default="", help="comma-separated case numbers (1-11, held) and groups of "
                                                    "scripts/hostile_cases.py (S, R, C, W, T)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    only = set(filter(None, args.only.split(",")))
    work = Path(tempfile.mkdtemp(prefix="faults-"))
    bench = Bench(args.commscale, work)
    base = work / "lake-base"
    started = time.monotonic()
    for hw in HARDWARE:
        done = bench.cli(base, "run", f"hardware={hw}")
        if done.returncode != 0:
            sys.exit(f"base lake: run hardware={hw} failed:\n{done.stderr[-2000:]}")
    reference = {(r[0], r[1]): r[2] for r in bench.rows(base)[1]}
    print(f"commscale: {args.commscale}\nbase lake: {len(reference)} rows on {', '.join(HARDWARE)} "
          f"({time.monotonic() - started:.0f} s)\n\n{HEADER}", flush=True)
    cases = Cases(bench, base, reference)
    plan: list[tuple[str, Callable[[], object]]] = [
        ("1", cases.upgrade_without_lake_json),
        ("2", cases.restart_other_hardware),
        ("3", cases.flipped_byte),
        ("4", cases.middle_entry_deleted),
        ("5", lambda: cases.not_finite("sweep.dp_slowdown=nan", "sweep.dp_slowdown=nan")),
        ("5", lambda: cases.not_finite("sweep.flop_vs_bw=[nan]", "sweep.flop_vs_bw=[nan]")),
        ("5", lambda: cases.not_finite("sweep.flop_vs_bw=[inf]", "sweep.flop_vs_bw=[inf]")),
        ("5", lambda: cases.not_finite("H = 10^12", "sweep.h=[1000000000000]")),
        ("5", cases.hardware_yaml_nan),
        ("6", lambda: cases.torn_newest("torn")),
        ("6", lambda: cases.torn_newest("empty")),
        ("6", cases.garbage_middle),
        ("7", lambda: cases.sidecar("deleted")),
        ("7", lambda: cases.sidecar("garbled")),
        ("8", cases.verify_repeatedly),
        ("9", lambda: cases.data_file("truncated")),
        ("9", lambda: cases.data_file("missing")),
        ("10", lambda: cases.path_is_file("_log")),
        ("10", lambda: cases.path_is_file("_keys")),
        ("10", lambda: cases.path_is_file("kind=projection/sweep=more")),
        ("10", cases.full_disk),
        ("11", cases.query_writes),
    ]
    kills = Kills(bench)
    hostile = Hostile(cases, Outcome)
    plan += [
        ("S", hostile.crafted_kind), ("S", hostile.explain_analyze_copy), ("S", hostile.symlinked_partition),
        ("R", hostile.search_rows_set_aside), ("R", hostile.newest_entry_missing),
        ("R", hostile.sidecar_of_other_keys), ("R", lambda: hostile.vacuum_during_commits(kills)),
        ("C", hostile.two_missing_entries), ("C", hostile.concurrent_reports), ("C", hostile.journal_damage),
        ("C", hostile.journal_lost), ("C", hostile.garbage_marker), ("W", hostile.runaway), ("T", hostile.tracebacks),
    ]
    for number, case in plan:
        if only and number not in only:
            continue
        result = case()
        for row in result if isinstance(result, list) else [result]:
            print(row.markdown(), flush=True)
    if not only or "held" in only:
        expected = kills.expected()
        moments = [("1 s after start", lambda: _after_seconds(1)), ("3 s after start", lambda: _after_seconds(3)),
                   ("at its first commit", lambda: _after_commits(2)), ("after 10 commits", lambda: _after_commits(10)),
                   ("after 40 commits", lambda: _after_commits(40)), ("mid-commit", lambda: _mid_commit),
                   ("mid-commit, again", lambda: _mid_commit)]
        for label, moment in moments:
            print(kills.killed(label, moment(), expected).markdown(), flush=True)
        print(kills.two_writers(expected).markdown(), flush=True)
    print(f"\n{time.monotonic() - started:.0f} s in all; scratch folder {work}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
