"""The options several commands share, spelled once."""

from __future__ import annotations

import os
from pathlib import Path

import click

__all__ = ["DEFAULT_LAKE", "DEFAULT_REPORT", "default_lake", "default_report", "lake_option", "address_option",
           "num_cpus_option", "RESTART_HELP", "restart_option", "no_report_option", "allow_large_option",
           "check_address", "check_output_file", "finite_number"]

#: The lake of every command unless ``--lake`` or ``COMMSCALE_LAKE`` says otherwise.
DEFAULT_LAKE = "lake"
#: Where ``commscale run`` and ``commscale report`` write the report (``COMMSCALE_REPORT``).
DEFAULT_REPORT = "report"


def default_lake() -> str:
    return os.environ.get("COMMSCALE_LAKE") or DEFAULT_LAKE


def default_report() -> str:
    return os.environ.get("COMMSCALE_REPORT") or DEFAULT_REPORT


#: The longest name of one folder or file a local file system takes, in bytes (ext4, xfs, tmpfs).
NAME_BYTES_MAX = 255


def _check_lake(ctx: click.Context, param: click.Parameter, value):
    """A ``--lake`` no file system can hold is refused before the command does any work:
    empty (it would make the current folder the lake), with a NUL character, or a local path
    with a name over ``NAME_BYTES_MAX`` bytes."""
    from sweeps.errors import UserError

    if value == "":
        raise UserError("--lake '': names no folder; give the lake's path (default: lake, or COMMSCALE_LAKE)")
    shown = value if len(value) <= 60 else f"{value[:57]}..."
    if "\0" in value:
        raise UserError(f"--lake {shown!r}: holds a NUL character, which no path can")
    if "://" not in value:
        longest = max((len(part.encode()) for part in value.split("/")), default=0)
        if longest > NAME_BYTES_MAX:
            raise UserError(f"--lake {shown!r}: holds a name of {longest:,} bytes; a file system takes at most "
                            f"{NAME_BYTES_MAX}")
    return value


lake_option = click.option("--lake", "lake_root", default=default_lake, show_default=DEFAULT_LAKE, callback=_check_lake,
                           help="Lake root: a path or a pyarrow filesystem URI (env COMMSCALE_LAKE).")


def check_address(ctx: click.Context, param: click.Parameter, value):
    """``--address`` means one thing in every command: the Ray cluster to use, HOST:PORT of
    its head's GCS (or ``ray://HOST:PORT``), else ``RAY_ADDRESS``. A cluster address where
    no Ray cluster answers is refused now, in seconds, before the command touches the lake;
    an empty one is refused as naming none (leaving it out starts an embedded Ray), and a
    web URL as the Jobs API's address, which ``submit --dashboard`` takes."""
    from sweeps.errors import UserError

    if value == "":
        raise UserError("--address '': names no cluster; give HOST:PORT, or leave it out for an embedded Ray")
    given = value or os.environ.get("RAY_ADDRESS")
    if given and given.split("://")[0].lower() in ("http", "https"):
        where = "--address" if value else "RAY_ADDRESS"
        raise UserError(f"{where} {given!r}: is a web URL (a dashboard's, the Jobs API's); {where} names a Ray "
                        "cluster: HOST:PORT of its head's GCS (`commscale submit` takes the Jobs API's URL as "
                        "--dashboard)")
    if given:
        from sweeps.cluster.reach import check_reachable

        check_reachable(given)
    return value


def check_output_file(ctx: click.Context, param: click.Parameter, value):
    """A file option's path (``--out``, ``--output``, ``--keys-out``) that cannot be written
    is refused now, in one line naming the option, before the command does any work: its
    folder must exist and the path must not be a folder."""
    from sweeps.errors import UserError

    if value is None:
        return value
    path = Path(value)
    option = param.opts[0] if param.opts else param.name
    if path.is_dir():
        raise UserError(f"{option} {path}: is a folder; name a file")
    if not path.parent.is_dir():
        raise UserError(f"{option} {path}: its folder {path.parent} does not exist")
    return value


address_option = click.option("--address", default=None, callback=check_address, metavar="HOST:PORT",
                              help="The Ray cluster to use: HOST:PORT of its head's GCS (default: RAY_ADDRESS, "
                                   "else an embedded local Ray).")
num_cpus_option = click.option("--num-cpus", type=click.IntRange(min=1), default=None,
                               help="CPUs of the embedded Ray (default: all).")
#: What ``--restart`` does in every command that takes it (``sweeps.run.run_job``).
RESTART_HELP = ("Run this version of the work (its config) anew: its rows and failures on this hardware leave the "
                "lake first; other versions', hardware's and sweeps' stay. A changed config needs none: it runs as a "
                "new version beside the old.")
restart_option = click.option("--restart", is_flag=True, help=RESTART_HELP)
no_report_option = click.option("--no-report", "no_report", is_flag=True,
                                help="Do not write the report at the end (`commscale report` writes it later). A "
                                     "report folder that cannot hold the report (a file, read-only, a full disk) "
                                     "ends the command with exit status 1 after the rows are committed.")
allow_large_option = click.option("--allow-large", "allow_large", is_flag=True,
                                  help="Go on with work beyond the bounds that are otherwise refused before it "
                                       "starts (points, trials, input sizes, memory).")


def finite_number(ctx: click.Context, param: click.Parameter, value):
    """A number option's value is finite: NaN passes every range (it compares false), and
    an infinite sleep, time cap or grace period would never end."""
    import math

    from sweeps.errors import ConfigError

    if value is not None and not math.isfinite(value):
        raise ConfigError(param.opts[0], value, "must be a finite number")
    return value
