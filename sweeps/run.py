"""Run a sweep: check its manifest, skip what the lake holds, execute on Ray, commit.

A sweep is known to the lake by a manifest per (sweep name, hardware, version): the
fingerprints of its config, their short hash (the version, ``sweeps.lake.versions``) and
how many points it plans. Running a sweep again resumes its version: committed points
stay, the rest run, and the count at the end is exact. Running it with a changed config
adds a version beside the earlier ones, whose rows stay; ``restart`` removes the rows of
the version it runs and starts it anew.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeRemainingColumn
from rich.text import Text

from sweeps.jobs.job import SweepJob
from sweeps.lake import Lake
from sweeps.lake.kinds import FAILURE, FAILURE_SCHEMA_VERSION
from sweeps.lake.views import ALL_VERSIONS
from tasks.outcomes import FAILURE_SCHEMA, ChunkOutcome

__all__ = ["RunReport", "run_job"]


@dataclass
class RunReport:
    """What a run did. ``failures`` are this run's failed points (bugs, timeouts, lost).
    ``planned`` = ``cached`` (in the lake before it ran) + ``committed`` (its own rows) +
    ``concurrent`` (rows it computed that another run of the same sweep committed first) +
    failed and unfinished points."""

    job: Optional[SweepJob]  # None once the caller no longer needs its points
    lake: Lake
    planned: int
    cached: int
    committed: int
    by_status: Dict[str, int]
    failures: List[Dict[str, Any]]
    run_id: str
    where: str
    elapsed_s: float
    restarted: bool = False
    concurrent: int = 0
    details: Dict[str, Any] = field(default_factory=dict)


class _RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        return Text(f"{task.speed:,.0f} pts/s" if task.speed else "- pts/s", style="progress.data.speed")


def _check_manifest(lake: Lake, job: SweepJob, restart: bool, console: Console) -> bool:
    """Say when a changed config adds a version beside the sweep's earlier ones (their rows
    stay); with ``restart``, remove exactly this version's rows on this hardware (its kind
    and its failures), after saying how many. Returns whether it restarted."""
    versions = lake.sweep_versions().get((job.name, job.hardware), [])
    if versions and job.version not in {m["sweep_version"] for m in versions}:
        newest = versions[-1]
        old = newest.get("config", {})
        changed = [k for k in sorted(set(old) | set(job.config)) if old.get(k) != job.config.get(k)]
        if newest.get("hardware_fingerprint") != job.hardware_fingerprint:
            changed.append(f"hardware {job.hardware}'s figures")
        kept = lake.partition_rows(job.workload.kind, job.partition)
        console.print(f"sweep {job.name} on {job.hardware}: the config changed since version "
                      f"{newest['sweep_version']} ({', '.join(changed) or 'config'}); adding version {job.version} "
                      f"beside it. The {kept:,} rows of earlier versions stay (view "
                      f"{job.workload.kind}{ALL_VERSIONS}); {job.workload.kind} shows the newest.", soft_wrap=True)
    if not restart:
        return False
    rows = {kind: lake.partition_rows(kind, job.partition, job.version) for kind in (job.workload.kind, FAILURE)}
    console.print(f"--restart: removing {rows[job.workload.kind]:,} {job.workload.kind} rows (and {rows[FAILURE]:,} "
                  f"failure rows) of sweep {job.name} version {job.version} on {job.hardware} from lake {lake}; "
                  "other versions, hardware and sweeps keep theirs", soft_wrap=True)
    for kind in rows:
        lake.remove_partition(kind, job.partition, reason=f"restart of sweep {job.name} version {job.version} on "
                              f"{job.hardware}", sweep_version=job.version)
    return True


def run_job(job: SweepJob, lake: Lake, *, address: Optional[str] = None, num_cpus: Optional[int] = None,
            chunk_size: Optional[int] = None, restart: bool = False, console: Optional[Console] = None) -> RunReport:
    """Run every point of ``job`` not yet committed; commit each finished chunk.

    Checks run before any work: the lake is of this format and writable (readable suffices
    when every point is stored), its files of the kind are intact, and, where points are to
    run, the cluster has a node that can run a task of the job (``UserError`` otherwise,
    before the lake is written: Ray would wait for one for ever). Then a changed config is
    announced as a new version (``restart`` removes this version's rows first). Safe to
    interrupt at any moment: what was committed stays, and running the same job again
    finishes the rest.
    """
    console = console or Console(stderr=True)
    started = time.perf_counter()
    unstored = _unstored(lake, job, restart)
    run_id = uuid.uuid4().hex[:12]
    by_status: Dict[str, int] = {}
    failures: List[Dict[str, Any]] = []
    counts = {"committed": 0, "concurrent": 0}
    where = "nothing to run: every point is in the lake"
    with contextlib.ExitStack() as stack:
        session = None
        if unstored is None or unstored.num_rows:
            # The cluster layer (and Ray) is imported only where points run: a run whose points
            # are all stored, and every other command, starts without it.
            from sweeps.cluster.capacity import check_runnable
            from sweeps.cluster.session import ray_session

            with console.status("starting Ray..."):
                session = stack.enter_context(ray_session(address, num_cpus))
            check_runnable(job.workload.resources, session.where, embedded=session.embedded)
        pending, restarted = _settle(lake, job, restart, unstored, console)
        if session is not None and pending.num_rows:
            where = session.where

            def commit(outcome: ChunkOutcome) -> None:
                if outcome.results is not None and outcome.results.num_rows:
                    result = lake.commit(job.workload.kind, job.partition, outcome.results,
                                         schema_version=job.workload.schema_version, sweep_version=job.version)
                    counts["committed"] += result.rows_written
                    counts["concurrent"] += result.rows_skipped
                    for entry in pc.value_counts(outcome.results.column("status")).to_pylist():
                        by_status[entry["values"]] = by_status.get(entry["values"], 0) + entry["counts"]
                if outcome.failures:
                    _commit_failures(lake, job, job.workload.kind, run_id, outcome.failures)
                    failures.extend(outcome.failures)
                return len(failures)

            _execute(job, pending, chunk_size, console, commit)
    lake.release_keys()  # the kind's committed keys were for deduplicating this run's commits
    return RunReport(job, lake, job.points.num_rows, job.points.num_rows - pending.num_rows, counts["committed"],
                     by_status, failures, run_id, where, time.perf_counter() - started, restarted,
                     counts["concurrent"])


def _execute(job: SweepJob, pending: pa.Table, chunk_size: Optional[int], console: Console,
             commit: Callable[[ChunkOutcome], int]) -> None:
    """Run ``pending`` on the session's cluster behind a progress bar; ``commit`` takes
    each chunk's outcome and returns the failures so far."""
    from sweeps.cluster.dispatch import execute
    from sweeps.cluster.session import slots

    width = slots(job.workload.resources)
    size = chunk_size or max(1, min(job.workload.max_chunk, -(-pending.num_rows // (4 * width))))
    columns = (TextColumn("[bold]{task.description}[/]"), BarColumn(), MofNCompleteColumn(),
               TextColumn("failed {task.fields[failed]} · cached {task.fields[cached]}"),
               _RateColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(job.workload.kind, total=pending.num_rows, failed=0,
                                cached=job.points.num_rows - pending.num_rows)

        def on_outcome(piece: pa.Table, outcome: ChunkOutcome) -> None:
            progress.update(bar, advance=piece.num_rows, failed=commit(outcome))

        execute(pending, job.workload, chunk_size=size, max_in_flight=2 * width, on_outcome=on_outcome)


def _not_stored(lake: Lake, job: SweepJob) -> pa.Table:
    """The points of ``job`` whose keys ``lake`` does not hold (of this version; of any
    sweep where the job shares results)."""
    done = pa.array(list(lake.keys(job.workload.kind)), pa.string()) if job.share_results \
        else lake.key_array(job.workload.kind, job.partition, sweep_version=job.version)
    # A fresh sweep runs its points as planned (no copy of them is made).
    return job.points.filter(pc.invert(pc.is_in(job.points.column("key"), value_set=done))) if len(done) \
        else job.points


def _unstored(lake: Lake, job: SweepJob, restart: bool) -> Optional[pa.Table]:
    """The points of ``job`` not yet in ``lake``, found without writing it: every point
    where the lake does not exist yet; None with ``restart``, whose removal decides.

    A lake that exists is read first: a sweep it holds whole needs no write (a read-only
    lake serves it); with points to run it must be writable (proved now, changing nothing
    it holds). A damaged data file of the kind is refused now, not after the work."""
    if not lake.exists():
        lake.ensure_creatable()
        return job.points
    lake.ensure_readable()
    lake.checked_files(job.workload.kind)
    pending = None if restart else _not_stored(lake, job)
    if pending is None or pending.num_rows:
        lake.ensure_writable()
    return pending


def _settle(lake: Lake, job: SweepJob, restart: bool, unstored: Optional[pa.Table],
            console: Console) -> Tuple[pa.Table, bool]:
    """Write what the run starts from: create the lake where it does not exist, announce a
    changed config (``restart`` removes this version's rows), record the sweep's manifest
    where it is new or changed. Returns the points to run and whether it restarted."""
    kind = job.workload.kind
    created = not lake.exists()
    if created:
        lake.ensure_writable()
    restarted = _check_manifest(lake, job, restart, console)
    pending = _not_stored(lake, job) if unstored is None else unstored
    manifest = {"sweep": job.name, "hardware": job.hardware, "kind": kind, "planned": job.points.num_rows,
                "sweep_version": job.version, "sweep_fingerprint": job.sweep_fingerprint,
                "hardware_fingerprint": job.hardware_fingerprint, "config": job.config}
    # Points stored by other versions or sweeps (``share_results``): done for this version
    # too, and counted so by ``commscale status``, as of this run. Left out when none, so
    # the manifests of a lake written before it stay unchanged.
    elsewhere = job.points.num_rows - pending.num_rows - lake.partition_rows(kind, job.partition, job.version)
    if elsewhere > 0:
        manifest["stored_elsewhere"] = elsewhere
    recorded = lake.sweeps().get((job.name, job.hardware), {})
    changed = any(recorded.get(field) != value for field, value in manifest.items())  # new, changed, run again
    if changed and not (created or restart or pending.num_rows):
        lake.ensure_writable()  # a stored sweep's new manifest: the read-only check above did not write-test
    if changed:
        lake.record_sweep(manifest)
    return pending, restarted


def _commit_failures(lake: Lake, job: SweepJob, kind: str, run_id: str, failures: List[Dict[str, Any]]) -> None:
    now = time.time()
    rows = [{**f, "key": f"{f['point_key']}@{run_id}", "result_kind": kind, "run_id": run_id, "time": now}
            for f in failures]
    lake.commit(FAILURE, job.partition, pa.Table.from_pylist(rows, schema=FAILURE_SCHEMA),
                schema_version=FAILURE_SCHEMA_VERSION, sweep_version=job.version)
