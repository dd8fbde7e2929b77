"""The options several commands share, spelled once."""

from __future__ import annotations

import os

import click

__all__ = ["DEFAULT_LAKE", "DEFAULT_REPORT", "default_lake", "default_report", "lake_option", "address_option", "num_cpus_option", "restart_option"]

#: The lake of every command unless ``--lake`` or ``COMMSCALE_LAKE`` says otherwise.
DEFAULT_LAKE = "lake"
#: Where ``commscale run`` and ``commscale report`` write the report (``COMMSCALE_REPORT``).
DEFAULT_REPORT = "report"


def default_lake() -> str:
    return os.environ.get("COMMSCALE_LAKE") or DEFAULT_LAKE


def default_report() -> str:
    return os.environ.get("COMMSCALE_REPORT") or DEFAULT_REPORT


lake_option = click.option("--lake", "lake_root", default=default_lake, show_default=DEFAULT_LAKE,
                           help="Lake root: a path or a pyarrow filesystem URI (env COMMSCALE_LAKE).")
address_option = click.option("--address", default=None,
                              help="Ray cluster address (default: RAY_ADDRESS, else an embedded local Ray).")
num_cpus_option = click.option("--num-cpus", type=click.IntRange(min=1), default=None,
                               help="CPUs of the embedded Ray (default: all).")
restart_option = click.option("--restart", is_flag=True,
                              help="Start the sweep anew if its config changed (its rows leave the lake).")
