"""Throw a corpus of bad inputs at every ``commscale`` command and count what comes back.

    python scripts/bad_inputs.py                     # the whole corpus, in-process; a summary table
    python scripts/bad_inputs.py --only run/ --show  # the cases whose name starts so, each with its line
    python scripts/bad_inputs.py --subprocess 12     # also run 12 cases (spread over the corpus) as real processes

Each case runs ``commscale`` (click's ``CliRunner`` on ``sweeps.cli.main``, the function the
entry point calls) in a folder of its own, with ``COMMSCALE_LAKE`` and ``COMMSCALE_REPORT``
pointing into it at paths that do not exist yet (a case that needs a lake gets a small one
first). Each outcome is one of:

- ``refused``: exit status 2 and one line on stderr (``error: ...``; a refused query names
  its statement on a second line, ``sweeps.errors.QueryError``);
- ``usage``: exit status 2 with click's usage block (an unknown option, a value of the wrong
  type for an option): refused too, in click's words;
- ``accepted``: exit status 0: each must be a genuinely valid input (the corpus marks the
  few it expects, ``expect="accepted"``); any other is a bug;
- ``traceback``: an exception escaped, or another exit status;
- ``multiline``: exit status 2, but a message of several lines;
- ``runaway``: the case started Ray, submitted a job, ran past ``TIMEOUT_S`` or grew the
  process by ``MEMORY_BYTES``: a bad input must be refused before any work;
- ``wrote``: refused, but something in its folder changed (the lake created, a report).

The exit status is 1 when a case ends other than as expected. While the corpus runs, Ray's
start and job submission raise instead, and the process's address space is capped.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bad_inputs_corpus import Case, corpus  # noqa: E402

#: A bad input is refused before any work: a case running this long did work.
TIMEOUT_S = 60.0
#: ... and one growing the process by this much (bytes) planned work.
MEMORY_BYTES = 3 * 2**30
#: The corpus's process may map this much more than it had at the start (``RLIMIT_AS``): an
#: allocation in C, which the watchdog cannot interrupt, fails (``MemoryError``) instead of
#: exhausting the machine.
ADDRESS_SPACE_BYTES = 6 * 2**30
OUTCOMES = ("refused", "usage", "accepted", "traceback", "multiline", "runaway", "wrote")


class WorkStarted(BaseException):
    """Raised where a case would start Ray or submit a job: no bad input gets that far."""


@dataclass
class Outcome:
    case: Case
    kind: str
    exit_code: Optional[int]
    line: str          # the message (refused), or the exception and where it was raised
    seconds: float

    @property
    def expected(self) -> bool:
        return self.kind == (self.case.expect or "refused") or (self.kind == "usage" and not self.case.expect)


def _refuse_ray(*args, **kwargs):
    raise WorkStarted("Ray would start")


def _refuse_submit(*args, **kwargs):
    raise WorkStarted("a job would be submitted")


@contextlib.contextmanager
def _work_guarded():
    """Within: Ray's start and a job submission raise ``WorkStarted`` in this process, in
    every ``sweeps`` module that holds them (imported before or while it lasts); after, each
    holds the original again."""
    import sweeps.cluster.session as session
    import sweeps.cluster.submit as submit

    originals = {"ray_session": session.ray_session, "submit_run": submit.submit_run}
    stand_ins = {"ray_session": _refuse_ray, "submit_run": _refuse_submit}

    def swap(old: dict, new: dict) -> None:
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("sweeps"):
                for name in old:
                    if getattr(module, name, None) is old[name]:
                        setattr(module, name, new[name])

    swap(originals, stand_ins)
    try:
        yield
    finally:
        swap(stand_ins, originals)


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Runaway(BaseException):
    """Raised in the main thread by ``Watchdog`` (through ``SIGUSR1``): the case ran too long
    or grew too much. Not an ``Exception``, so nothing in the command catches it."""


class Watchdog:
    """Interrupts the main thread when a case runs too long or grows the process too much
    (``Runaway``); ``fired`` says why. A signal of its own, so a blocking read (a pipe, a
    device) ends too, and an ignored SIGINT (a job started in the background) cannot stop it."""

    def __init__(self, timeout_s: float, memory_bytes: int) -> None:
        self.timeout_s, self.memory_bytes = timeout_s, memory_bytes
        self.fired: Optional[str] = None
        self._done = threading.Event()

    def _raise(self, signum, frame) -> None:
        raise Runaway(self.fired)

    def __enter__(self) -> "Watchdog":
        start, base = time.monotonic(), _rss()
        main_thread = threading.main_thread().ident
        self._previous = signal.signal(signal.SIGUSR1, self._raise)

        def watch() -> None:
            while not self._done.wait(0.05):
                if time.monotonic() - start > self.timeout_s:
                    self.fired = f"ran over {self.timeout_s:g} s"
                elif _rss() - base > self.memory_bytes:
                    self.fired = f"grew by over {self.memory_bytes / 2**30:g} GiB"
                if self.fired:
                    signal.pthread_kill(main_thread, signal.SIGUSR1)
                    return

        self._thread = threading.Thread(target=watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()
        signal.signal(signal.SIGUSR1, self._previous)


def snapshot(root: Path) -> Dict[str, Tuple[int, int]]:
    """(size, mtime in ns) of every entry under ``root``, by relative path (no links followed)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            info = path.lstat()
            found[path.relative_to(root).as_posix()] = (0 if path.is_dir() else info.st_size, info.st_mtime_ns)
    return found


def _where(exc_info) -> str:
    """``Type: message`` of an exception, and the innermost frame of this repository it passed."""
    exc = exc_info[1]
    frames = [f for f in traceback.extract_tb(exc_info[2]) if f.filename.startswith(str(ROOT))]
    where = f" at {Path(frames[-1].filename).relative_to(ROOT)}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}{where}"


def _classify(result, changed: bool) -> Tuple[str, str]:
    err = (result.stderr or "").strip()
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        return "traceback", _where(result.exc_info)
    if "Traceback (most recent call last)" in result.output:
        return "traceback", err.splitlines()[-1] if err else "traceback printed"
    if result.exit_code == 0:
        return "accepted", (result.stdout or "").strip().splitlines()[0][:160] if result.stdout.strip() else ""
    if result.exit_code == 2:
        lines = err.splitlines()
        # A refused query names its statement on a second line (``sweeps.errors.QueryError``).
        one = len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  statement:"))
        if one and lines[0].startswith("error: "):
            return ("wrote" if changed else "refused"), lines[0]
        if lines and lines[-1].startswith("Error: "):
            return ("wrote" if changed else "usage"), lines[-1]
        return "multiline", f"exit 2 with {len(lines)} lines on stderr: {err[:160]!r}"
    return "traceback", f"exit {result.exit_code}: {err[-160:]!r}"


def prepare(case: Case, folder: Path) -> Dict[str, Optional[str]]:
    """Write the case's files into ``folder`` (and its lake); returns its environment."""
    folder.mkdir(parents=True, exist_ok=True)
    if case.lake:
        import pyarrow as pa

        from sweeps.lake import Lake

        Lake(str(folder / "lake")).commit("toy", {"sweep": "s", "hardware": "h"}, pa.table({"key": ["a"]}))
    for name, content in case.files:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.mkdir(exist_ok=True)
        elif content == "fifo":
            os.mkfifo(path)
        else:
            path.write_bytes(content() if callable(content) else content)
    return {"COMMSCALE_LAKE": str(folder / "lake"), "COMMSCALE_REPORT": str(folder / "report"), "RAY_ADDRESS": None,
            "RAY_API_SERVER_ADDRESS": None, "COLUMNS": "120", **dict(case.env)}


def run_case(case: Case, base: Path, runner) -> Outcome:
    """One case, in a folder of its own under ``base`` (removed afterwards)."""
    from sweeps.cli import main

    folder = base / f"case{abs(hash(case.name)) % 10**8}"
    env = prepare(case, folder)
    before = snapshot(folder)
    cwd = os.getcwd()
    started = time.monotonic()
    os.chdir(folder)
    try:
        try:
            with Watchdog(TIMEOUT_S, MEMORY_BYTES) as dog:
                result = runner.invoke(main, list(case.args), env=env, catch_exceptions=True)
        except (WorkStarted, Runaway) as exc:
            return Outcome(case, "runaway", None, str(exc), time.monotonic() - started)
        if dog.fired or isinstance(result.exception, (WorkStarted, MemoryError)):
            why = dog.fired or str(result.exception) or "ran out of the corpus's address space"
            return Outcome(case, "runaway", result.exit_code, why, time.monotonic() - started)
        kind, line = _classify(result, snapshot(folder) != before)
        return Outcome(case, kind, result.exit_code, line, time.monotonic() - started)
    finally:
        os.chdir(cwd)
        shutil.rmtree(folder, ignore_errors=True)


def run_subprocess(case: Case, base: Path) -> Tuple[int, str]:
    """The case as a real ``python -m sweeps.cli`` process: (exit status, stderr)."""
    folder = base / "subprocess"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    env.update({k: v for k, v in prepare(case, folder).items() if v is not None})
    env["PYTHONPATH"] = str(ROOT)
    try:
        done = subprocess.run([sys.executable, "-m", "sweeps.cli", *case.args], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        return done.returncode, done.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_corpus(cases: Iterable[Case], *, on_outcome: Callable[[Outcome], None] = lambda o: None) -> List[Outcome]:
    """Every case in-process, in order; Ray and job submission stand guarded throughout."""
    from click.testing import CliRunner

    import sweeps.cli  # noqa: F401  (imported before the guard replaces what it imported)

    runner = CliRunner()
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="commscale-bad-") as tmp, _address_space_limit(), _work_guarded():
        for case in cases:
            outcome = run_case(case, Path(tmp), runner)
            on_outcome(outcome)
            outcomes.append(outcome)
    return outcomes


@contextlib.contextmanager
def _address_space_limit():
    """``RLIMIT_AS`` at this process's size plus ``ADDRESS_SPACE_BYTES``, restored after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = size + ADDRESS_SPACE_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def summary(outcomes: List[Outcome]) -> str:
    """A Markdown table: per command, how many cases ended each way, and the total."""
    counts: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for o in outcomes:
        counts[o.case.command][o.kind] += 1
        counts["all"][o.kind] += 1
    lines = ["| command | cases | " + " | ".join(OUTCOMES) + " |", "|---" * (len(OUTCOMES) + 2) + "|"]
    for command in sorted(counts, key=lambda c: (c == "all", c)):
        row = counts[command]
        lines.append(f"| {command} | {sum(row.values())} | " + " | ".join(str(row[k]) for k in OUTCOMES) + " |")
    return "\n".join(lines)


def _report(outcomes: List[Outcome], show: bool) -> None:
    for o in outcomes:
        if show or not o.expected or o.kind == "accepted":
            flag = "" if o.expected else "  <-- unexpected"
            print(f"{o.kind:9} {o.case.name}: {o.line[:200]}{flag}")
    print()
    print(summary(outcomes))
    slow = sorted(outcomes, key=lambda o: -o.seconds)[:3]
    print(f"\n{len(outcomes)} cases in {sum(o.seconds for o in outcomes):.1f} s; slowest: "
          + ", ".join(f"{o.case.name} ({o.seconds:.1f} s)" for o in slow))


def _subprocess_sample(cases: List[Case], count: int) -> int:
    """Run ``count`` cases spread over the corpus as real processes; returns how many did not
    end with status 2 and one line (or status 0 where expected)."""
    bad = 0
    with tempfile.TemporaryDirectory(prefix="commscale-bad-sub-") as tmp:
        for case in cases[:: max(1, len(cases) // count)][:count]:
            code, err = run_subprocess(case, Path(tmp))
            lines = err.strip().splitlines()
            good = (code == 0 and case.expect == "accepted") or (
                code == 2 and "Traceback" not in err and lines and lines[-1].lower().startswith("error: "))
            bad += not good
            print(f"subprocess {'ok ' if good else 'BAD'} exit {code} {case.name}: {(lines or [''])[-1][:160]}")
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="Run the cases whose name starts with this.")
    parser.add_argument("--show", action="store_true", help="Print every case's outcome, not only the unexpected.")
    parser.add_argument("--subprocess", type=int, default=0, metavar="N", help="Also run N cases as processes.")
    parser.add_argument("--progress", action="store_true", help="Print each case as it ends, on stderr.")
    args = parser.parse_args()
    cases = [c for c in corpus() if c.name.startswith(args.only)]
    names = collections.Counter(c.name for c in cases)
    repeated = [n for n, k in names.items() if k > 1]
    if repeated:
        raise SystemExit(f"case names repeat: {repeated}")
    progress = (lambda o: print(f"{o.kind:9} {o.seconds:5.1f}s {o.case.name}", file=sys.stderr, flush=True)) \
        if args.progress else (lambda o: None)
    outcomes = run_corpus(cases, on_outcome=progress)
    _report(outcomes, args.show)
    bad = sum(not o.expected for o in outcomes)
    if args.subprocess:
        bad += _subprocess_sample(cases, args.subprocess)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
