"""The fault table's second part: a lake handed over by someone else (a shared copy, a
snapshot, a bucket), a damaged search journal, runaway work and inputs that used to end in
a traceback. ``scripts/fault_table.py`` runs these after its own cases (``--only S,R,C,W,T``
picks groups); each method returns Outcomes, one Markdown row each.

Everything here is done as a user or an attacker would do it: files written by hand,
commands run as processes, rows read back with ``commscale query``. Only the sealing of a
crafted log entry uses the lake's own (public, unkeyed) checksum.
"""

from __future__ import annotations

import hashlib
import json
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from sweeps.lake.entries import seal

SEARCH = ("search", "default", "trials=40")
SEARCH_ROWS = "SELECT sweep, key, step_time_s FROM search"


def _digests(folder: Path) -> dict:
    return {p.as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _entries(lake: Path) -> list:
    return sorted((lake / "_log").glob("*.json"))


def _traceback(done: subprocess.CompletedProcess) -> str:
    return "traceback" if "Traceback" in done.stdout + done.stderr else "no traceback"


class Hostile:
    """The cases; ``bench``, ``base`` and ``reference`` as in ``fault_table.Cases``."""

    def __init__(self, cases, outcome) -> None:
        self.cases, self.bench, self.Outcome = cases, cases.bench, outcome

    # -- security ------------------------------------------------------------------------
    def crafted_kind(self) -> list:
        out = self.Outcome("S1", "log entry with a crafted kind (SQL), sealed")
        lake = self.cases._copy("crafted")
        version = len(_entries(lake)) + 1
        kind = 'v" AS SELECT 1; COPY (SELECT 42 AS x) TO \'pwned.csv\'; CREATE VIEW "w'
        data = lake / f"kind={kind}" / "part-0.parquet"  # a real file, so that it passes the size and sha256
        data.parent.mkdir()
        pq.write_table(pa.table({"key": ["a"]}), data)
        (lake / "_log" / f"{version:020d}.json").write_bytes(seal({
            "version": version, "action": "add", "kind": kind, "partition": {}, "file": f"kind={kind}/part-0.parquet",
            "rows": 1, "bytes": data.stat().st_size, "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}))
        codes = []
        for args in (("query", "SELECT count(*) FROM projection"), ("status",),
                     ("report", "--out", str(self.bench.work / "r-crafted")), ("run", "hardware=h100")):
            done = self.bench.cli(lake, *args)
            codes.append(f"{args[0]} {done.returncode}")
            out.note = out.note or self.bench.said(done)
        pwned = list(self.bench.work.rglob("pwned.csv"))
        out.first, out.first_rc = "query, status, report, run: " + ", ".join(codes), None
        verify = self.bench.cli(lake, "lake", "verify")
        for p in pwned:
            p.unlink()
        self.cases._remedy(out, lake, ("lake", "verify", "--repair"))
        out.remedy = f"pwned.csv written: {'yes' if pwned else 'no'}; lake verify → {verify.returncode}; " + out.remedy
        self.cases._after(out, lake)
        return [out]

    def explain_analyze_copy(self) -> list:
        out = self.Outcome("S2", "query: EXPLAIN ANALYZE COPY over a committed file")
        lake = self.cases._copy("explain")
        victim = sorted((lake / "kind=projection").rglob("part-*.parquet"))[0]
        before = victim.read_bytes()
        sql = f"EXPLAIN ANALYZE COPY (SELECT 'x' AS key) TO '{victim}' (FORMAT parquet, USE_TMP_FILE false)"
        done = self.bench.cli(lake, "query", sql)
        out.first, out.first_rc, out.note = "query EXPLAIN ANALYZE COPY", done.returncode, self.bench.said(done)
        out.remedy = "committed file overwritten" if victim.read_bytes() != before else "committed file intact"
        self.cases._after(out, lake)
        return [out]

    def symlinked_partition(self) -> list:
        out = self.Outcome("S3", "a partition folder replaced by a symlink to a folder outside")
        lake = self.cases._copy("link")
        outside = self.bench.work / "outside"
        shutil.rmtree(outside, ignore_errors=True)
        outside.mkdir()
        for i in range(3):
            pq.write_table(pa.table({"key": [f"o{i}"]}), outside / f"part-{i:032x}.parquet")
        partition = sorted((lake / "kind=projection").glob("sweep=*/hardware=mi210x4"))[0]
        partition.rename(self.bench.work / "moved-partition")
        partition.symlink_to(outside, target_is_directory=True)
        before = _digests(outside)
        vacuum = self.bench.cli(lake, "lake", "vacuum", "--grace-s", "0")
        deleted = len(set(before) - set(_digests(outside)))
        verify = self.bench.cli(lake, "lake", "verify", "--repair")
        after = _digests(outside)
        touched = len(set(before) ^ set(after)) + sum(before[p] != after[p] for p in set(before) & set(after))
        out.first, out.first_rc = "lake vacuum --grace-s 0", vacuum.returncode
        out.note = f"outside files deleted by vacuum: {deleted}; touched after verify --repair: {touched}"
        out.remedy = f"lake verify --repair → {verify.returncode}"
        return [out]

    # -- rows lost or wrong ----------------------------------------------------------------
    def _search_lake(self, name: str) -> Path:
        lake = self.bench.work / f"lake-{name}"
        shutil.rmtree(lake, ignore_errors=True)
        self.bench.cli(lake, *SEARCH)
        return lake

    def _search_counts(self, lake: Path) -> tuple:
        rc, rows = self.bench.rows(lake, SEARCH_ROWS)
        keys = [r[1] for r in rows]
        return rc, len(keys), len(keys) - len(set(keys))

    def search_rows_set_aside(self) -> list:
        out = self.Outcome("R4", "a search data file damaged, set aside by verify, search run again")
        lake = self._search_lake("search-damaged")
        victim = sorted((lake / "kind=search").rglob("part-*.parquet"))[0]
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 0xFF
        victim.write_bytes(bytes(data))
        verify = self.bench.cli(lake, "lake", "verify")
        done = self.bench.cli(lake, *SEARCH)
        rc, rows, doubled = self._search_counts(lake)
        out.first, out.first_rc, out.note = "lake verify; search again", done.returncode, self.bench.said(done)
        out.remedy = f"lake verify → {verify.returncode}"
        out.served, out.lost, out.doubled = rows, 40 - (rows - doubled), doubled
        return [out]

    def newest_entry_missing(self) -> list:
        out = self.Outcome("R5", "the newest _log entry deleted")
        lake = self.cases._copy("newest")
        _entries(lake)[-1].unlink()
        self.cases._served(out, lake)
        verify = self.bench.cli(lake, "lake", "verify")
        vacuum = self.bench.cli(lake, "lake", "vacuum", "--grace-s", "0")
        out.note = f"lake verify → {verify.returncode}; vacuum --grace-s 0 → {vacuum.returncode}, " \
                   f"{vacuum.stdout.count('removed ')} files removed"
        self.cases._remedy(out, lake, ("lake", "verify", "--repair"), *self.cases._rerun())
        self.cases._after(out, lake)
        return [out]

    def sidecar_of_other_keys(self) -> list:
        out = self.Outcome("R6", "a _keys sidecar replaced by another file's of the same length")
        lake = self.cases._copy("sidecar-swap")
        adds = [json.loads(p.read_bytes()) for p in _entries(lake)]
        adds = [e for e in adds if e.get("action") == "add" and e.get("kind") == "projection" and "keys_file" in e]
        pair = next(((a, b) for a in adds for b in adds if a is not b and a["rows"] == b["rows"]
                     and a["partition"] != b["partition"]), None)
        if pair is None:
            out.note = "skipped: no two sidecars of one length"
            return [out]
        (lake / pair[0]["keys_file"]).write_bytes((lake / pair[1]["keys_file"]).read_bytes())
        done = self.bench.cli(lake, "run", f"hardware={pair[0]['partition']['hardware']}")
        out.first, out.first_rc, out.note = "run (the same sweep)", done.returncode, self.bench.said(done)
        verify = self.bench.cli(lake, "lake", "verify")
        out.remedy = f"lake verify → {verify.returncode}"
        self.cases._after(out, lake)
        out.served = len(self.bench.rows(lake)[1])
        return [out]

    def vacuum_during_commits(self, kills) -> list:
        out = self.Outcome("R7", "lake vacuum --grace-s 0 in a loop while a sweep commits")
        expected = kills.expected()
        lake = self.bench.work / "lake-vacuum-race"
        shutil.rmtree(lake, ignore_errors=True)
        proc = subprocess.Popen([self.bench.commscale, *kills.args, "--lake", str(lake)], env=self.bench.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.bench.work)
        vacuums = 0
        while proc.poll() is None:
            if (lake / "_lake.json").exists():
                self.bench.cli(lake, "lake", "vacuum", "--grace-s", "0")
                vacuums += 1
            time.sleep(0.05)
        verify = self.bench.cli(lake, "lake", "verify", "--repair")
        keys = kills._keys(lake)
        out.first, out.first_rc, out.served = f"probe + {vacuums} vacuums", proc.returncode, len(keys)
        out.remedy = f"lake verify --repair → {verify.returncode}"
        out.lost, out.doubled, out.wrong = len(expected - set(keys)), len(keys) - len(set(keys)), 0
        return [out]

    # -- crashes ----------------------------------------------------------------------------
    def two_missing_entries(self) -> list:
        out = self.Outcome("C1", "two consecutive middle _log entries deleted")
        lake = self.cases._copy("two-gaps")
        entries = _entries(lake)
        for path in entries[len(entries) // 2: len(entries) // 2 + 2]:
            path.unlink()
        done = self.bench.cli(lake, "lake", "verify", "--repair")
        out.first, out.first_rc, out.note = "lake verify --repair (once)", done.returncode, _traceback(done)
        self.cases._after(out, lake)
        return [out]

    def concurrent_reports(self) -> list:
        out = self.Outcome("C2", "four `commscale report` into one folder at once")
        folder = self.bench.work / "report-shared"
        shutil.rmtree(folder, ignore_errors=True)
        command = [self.bench.commscale, "report", "--out", str(folder), "--lake", str(self.cases.base)]
        procs = [subprocess.Popen(command, env=self.bench.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, cwd=self.bench.work) for _ in range(4)]
        results = [p.communicate() for p in procs]
        codes = [p.returncode for p in procs]
        out.first, out.first_rc = "report ×4", max(codes)
        out.note = f"exit codes {codes}; " + ("traceback" if any("Traceback" in e for _, e in results)
                                               else "no traceback")
        return [out]

    def journal_damage(self) -> list:
        outs = []
        for label, damage in (("a garbage line in the middle", "middle"), ("a torn last line", "torn")):
            out = self.Outcome("C3", f"search journal: {label}")
            lake = self._search_lake(f"journal-{damage}")
            journal = next((lake / "_studies").glob("*.journal"))
            lines = journal.read_bytes().splitlines(keepends=True)
            if damage == "middle":
                lines[len(lines) // 2] = b"\x00\xffnot json\n"
            else:
                lines[-1] = lines[-1][: len(lines[-1]) // 2]
            journal.write_bytes(b"".join(lines))
            first = self.bench.cli(lake, *SEARCH[:2], "trials=60")
            second = self.bench.cli(lake, *SEARCH[:2], "trials=80")
            out.first, out.first_rc = "search trials=60, then trials=80", first.returncode
            out.note = f"{_traceback(first)}; then → {second.returncode}, {_traceback(second)}: " \
                       f"{self.bench.said(first)}"
            outs.append(out)
        return outs

    def journal_lost(self) -> list:
        out = self.Outcome("C4", "search journal deleted, search run with another seed")
        lake = self._search_lake("journal-lost")
        for journal in (lake / "_studies").glob("*.journal"):
            journal.unlink()
        done = self.bench.cli(lake, *SEARCH, "seed=7")
        rc, rows, doubled = self._search_counts(lake)
        out.first, out.first_rc, out.note = "search seed=7", done.returncode, self.bench.said(done)
        out.served, out.doubled = rows, doubled
        out.remedy = f"{rows} rows for 40 trials"
        return [out]

    def garbage_marker(self) -> list:
        out = self.Outcome("C5", "garbage _lake.json")
        lake = self.cases._copy("marker")
        (lake / "_lake.json").write_bytes(b"\x00\xff garbage")
        self.cases._served(out, lake)
        out.note = self.bench.said(self.bench.cli(lake, "query", "SELECT 1"))
        self.cases._remedy(out, lake, ("lake", "verify", "--repair"))
        self.cases._after(out, lake)
        return [out]

    # -- runaway work ---------------------------------------------------------------------------
    def _bounded(self, label: str, args: tuple, timeout: float) -> "object":
        out = self.Outcome("W", label)
        lake = self.bench.work / "lake-runaway"
        shutil.rmtree(lake, ignore_errors=True)
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        started = time.monotonic()
        done = self.bench.cli(lake, *args, timeout=timeout)
        seconds = time.monotonic() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        out.first, out.first_rc = f"{args[0]} (limit {timeout:.0f} s)", done.returncode
        grew = f"; peak RSS {peak / 1e6:.1f} GB" if peak > before else ""
        out.note = (f"{'killed' if done.returncode == 124 else 'ended'} after {seconds:.1f} s{grew}: "
                    f"{self.bench.said(done)}")
        return out

    def runaway(self) -> list:
        many = "[" + ",".join(str(i) for i in range(1, 1001)) + "]"
        runs = self.bench.work / "million_runs.csv"
        header_and_row = self._runs_row()
        with runs.open("w") as handle:
            handle.write(header_and_row[0] + "\n")
            for i in range(1_000_000):
                handle.write(header_and_row[1].replace("korthikanti22_t5_full", f"r{i}", 1) + "\n")
        return [
            self._bounded("a 10^9-point sweep", ("run", "sweep.name=huge", f"sweep.b={many}", f"sweep.sl={many}",
                                                 "sweep.flop_vs_bw=[" + ",".join(str(1 + i / 10) for i in range(20))
                                                 + "]", "--no-report"), 15),
            self._bounded("search trials=10000000", ("search", "default", "trials=10000000"), 60),
            self._bounded("a runs file of 10^6 rows", ("validate", "--runs", str(runs), "--no-lake"), 120),
        ]

    def _runs_row(self) -> tuple:
        python = str(Path(self.bench.commscale).with_name("python"))
        where = subprocess.run([python, "-c", "import conf, os; print(os.path.dirname(conf.__file__))"],
                               capture_output=True, text=True, check=True).stdout.strip()
        lines = (Path(where) / "data" / "published_runs.csv").read_text().splitlines()
        return lines[0], lines[1]

    # -- inputs that ended in a traceback ------------------------------------------------------
    def tracebacks(self) -> list:
        work = self.bench.work
        header, row = self._runs_row()
        (work / "long_cell.csv").write_text(header + "\n" + row.replace("korthikanti22_t5_full", "x" * 140_000) + "\n")
        (work / "nested.yaml").write_text("[" * 20_000 + "]" * 20_000 + "\n")
        (work / "not_a_journal.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)
        (work / "a_file").write_text("not a folder\n")
        cases = [
            ("a runs-file cell of 140,000 characters",
             ("validate", "--runs", str(work / "long_cell.csv"), "--no-lake")),
            ("YAML nested 20,000 deep", ("run", f"model={work / 'nested.yaml'}", "--no-report")),
            ("a 5,000-character preset name", ("run", "model=" + "A" * 5000, "--no-report")),
            ("--storage on a PNG file", (*SEARCH, "--storage", str(work / "not_a_journal.png"))),
            ("query --format csv of LIST, MAP, INTERVAL", ("query", "SELECT [1, 2] AS l, MAP {'a': 1} AS m, "
                                                           "INTERVAL 1 DAY AS i", "--format", "csv")),
            ("report --out a file", ("report", "--out", str(work / "a_file"))),
        ]
        outs = []
        for label, args in cases:
            lake = self.cases._copy("inputs")
            done = self.bench.cli(lake, *args, timeout=120)
            out = self.Outcome("T", label, args[0], done.returncode,
                               note=f"{_traceback(done)}: {self.bench.said(done)}")
            outs.append(out)
        return outs
