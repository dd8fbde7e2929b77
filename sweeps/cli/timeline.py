"""``commscale timeline``: one projected training step as a Chrome/Perfetto trace.

    commscale timeline                                  # the default search's layout
    commscale timeline small layout.pp=4 layout.schedule=interleaved layout.virtual_stages=2
    commscale timeline model=llama3-8b devices=64 -o step.json

The layout is the search preset's best stored layout, or its space's exhaustive optimum when
the lake holds no study of it (``sweeps.search.timeline``); ``layout.FIELD=VALUE`` replaces a
field. Open the file at https://ui.perfetto.dev ("Open trace file") or in chrome://tracing.
Bad input (an unknown preset, field or layout field, a layout that breaks a structural
constraint, an output path that cannot be a file) ends with exit status 2 before any work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import click

from sweeps.cli.options import lake_option
from sweeps.cli.render import console
from sweeps.errors import UserError
from sweeps.lake import Lake

__all__ = ["timeline", "DEFAULT_TRACE"]

#: The trace's file unless ``-o`` names another.
DEFAULT_TRACE = "timeline.json"


def _check_out(path: Path) -> None:
    """Refuse an output path that cannot be written as a file, before any work."""
    if path.is_dir():
        raise UserError(f"-o {path}: is a folder; name the trace's file")
    parent = path.parent
    blocking = next((p for p in [parent, *parent.parents] if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise UserError(f"-o {path}: {blocking} is a file, not a folder")
    existing = next(p for p in [parent, *parent.parents] if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(f"-o {path}: {existing} is not writable")


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@lake_option
@click.option("-o", "--out", "out_file", default=DEFAULT_TRACE, show_default=True,
              help="The trace file to write (Trace Event JSON).")
def timeline(*, overrides: Sequence[str], lake_root: str, out_file: str) -> None:
    """Write one projected step as a trace Perfetto opens, e.g. `timeline default layout.tp=4`:
    one process per pipeline stage, a track each for compute, TP, CP, EP (a mixture of experts'
    dispatch and combine), PP and DP communication."""
    from analysis.report_files import write_text
    from sweeps.search.timeline import build_timeline

    out = Path(out_file).expanduser()
    _check_out(out)
    drawn = build_timeline(overrides, Lake(lake_root))
    setup, figures = drawn.setup, drawn.figures
    out.parent.mkdir(parents=True, exist_ok=True)
    write_text(out, json.dumps(drawn.trace(), separators=(",", ":")))
    show = console()
    show.print(f"[bold]timeline {setup.study_name}[/]: {setup.model.name} on {setup.spec.devices} x "
               f"{setup.hardware.name}, global batch {setup.spec.global_batch}, stack {setup.spec.stack}",
               soft_wrap=True)
    show.print(f"layout {drawn.layout.describe()}: {drawn.source}", soft_wrap=True, highlight=False, markup=False)
    memory = figures["memory_per_device_bytes"] / 1e9
    fits = "fits" if drawn.fits_memory else "does NOT fit"
    show.print(f"step {drawn.step_time_s:.4g} s (the trace ends at {drawn.end_s:.4g} s): compute "
               f"{figures['compute_s']:.4g} s, exposed communication {figures['exposed_comm_s']:.4g} s, bubble "
               f"{100 * figures['bubble_fraction']:.1f} %; {memory:.1f} GB per device ({fits} in "
               f"{setup.step_context.memory_limit_bytes / 1e9:.1f} GB usable)", soft_wrap=True, highlight=False)
    stages = ", ".join(drawn.stage_names.values())
    show.print(f"wrote {out} ({out.stat().st_size / 1e3:,.0f} kB, {len(drawn.events):,} events on {stages}): open it "
               "at https://ui.perfetto.dev (Open trace file) or in chrome://tracing", soft_wrap=True, highlight=False)
