"""``commscale run``: plan, skip what the lake holds, project on Ray, commit, read back."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Optional, Tuple

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from analysis.query import connect
from sweeps.config import RunConfig
from sweeps.dispatch import project_on_ray, ray_session
from sweeps.lake import Lake
from sweeps.plan import Highlight, plan_points

__all__ = ["RunReport", "run_sweep", "PROJECTION_KIND"]

PROJECTION_KIND = "projection"


@dataclass
class RunReport:
    """What a run did and the rows it stands on (read back from the lake)."""

    config: RunConfig
    lake: Lake
    partition: dict
    planned: int
    cached: int
    projected: int
    files_written: int
    where: str
    elapsed_s: float
    rows: pd.DataFrame
    highlights: Tuple[Highlight, ...]


def _chunk_size(pending: int, workers: int, requested: Optional[int]) -> int:
    """Rows per task: as asked, else about two tasks per CPU (at least 64 rows each)."""
    if requested:
        return requested
    return max(64, -(-pending // max(1, 2 * workers)))


def run_sweep(config: RunConfig, lake: Lake, *, address: Optional[str] = None,
              num_cpus: Optional[int] = None, chunk_size: Optional[int] = None,
              console: Optional[Console] = None) -> RunReport:
    """Project every point of the sweep not yet in the lake and commit the results.

    The lake is checked for writing before anything runs; each finished chunk is
    committed as one file, so an interrupted run keeps what finished. Points whose key
    the partition already holds are not projected again.
    """
    console = console or Console(stderr=True)
    started = time.perf_counter()
    lake.ensure_writable()
    plan = plan_points(config)
    partition = {"sweep": config.sweep.name, "hardware": config.hardware.name}
    done_keys = lake.keys(PROJECTION_KIND, partition)
    pending = plan.points.filter(pc.invert(pc.is_in(plan.points.column("key"), pa.array(sorted(done_keys), pa.string()))))
    files, where = 0, "nothing to run: every point is in the lake"
    if pending.num_rows:
        with contextlib.ExitStack() as stack:
            with console.status("starting Ray..."):
                session = stack.enter_context(ray_session(address, num_cpus))
            where = session.where
            size = _chunk_size(pending.num_rows, session.cpus, chunk_size)
            columns = (TextColumn("[bold]projecting[/]"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("points"), TimeElapsedColumn())
            with Progress(*columns, console=console) as progress:
                bar = progress.add_task("project", total=pending.num_rows)

                def commit(result: pa.Table) -> None:
                    nonlocal files
                    lake.commit(PROJECTION_KIND, partition, result)
                    files += 1
                    progress.advance(bar, result.num_rows)

                project_on_ray(pending, config.hardware, size, commit)
    rows = read_rows(lake, plan.points.select(["key"]))
    return RunReport(config, lake, partition, plan.points.num_rows, plan.points.num_rows - pending.num_rows,
                     pending.num_rows, files, where, time.perf_counter() - started, rows, plan.highlights)


def read_rows(lake: Lake, keys: pa.Table) -> pd.DataFrame:
    """The projection rows of the given keys, read back from the lake through DuckDB."""
    con = connect(lake)
    try:
        con.register("wanted", keys)
        return con.sql(f"SELECT p.* FROM {PROJECTION_KIND} p JOIN wanted USING (key)").df()
    finally:
        con.close()
