"""An option spelled alike means one thing in every command: ``--address`` the Ray cluster
(HOST:PORT of its GCS, checked before any work), ``--restart`` running the version of the
work anew (``sweeps.run.run_job``: its rows on this hardware leave the lake first).
Read from the commands themselves, so a new command cannot give either another meaning."""

from __future__ import annotations

from typing import Dict

import click

from sweeps.cli import main
from sweeps.cli.options import RESTART_HELP, check_address


def _with(option: str) -> Dict[str, click.Option]:
    """Every command (and subcommand) of ``commscale`` that takes ``option``: its parameter."""
    found = {}
    stack = [(name, command) for name, command in main.commands.items()]
    while stack:
        name, command = stack.pop()
        if isinstance(command, click.Group):
            stack += [(f"{name} {sub}", c) for sub, c in command.commands.items()]
        for param in command.params:
            if option in getattr(param, "opts", ()):
                found[name] = param
    return found


def test_restart_is_one_flag_with_one_help_in_every_command():
    """calibrate said "if the calibration's preset changed" and search "if its config
    changed"; each restarted unconditionally, as run does (all through run_job)."""
    found = _with("--restart")
    assert set(found) == {"run", "probe", "calibrate", "search", "limits"}
    for name, param in found.items():
        assert param.is_flag, name
        assert RESTART_HELP in param.help, (name, param.help)


def test_address_is_the_ray_cluster_in_every_command():
    found = _with("--address")
    assert set(found) == {"run", "probe", "calibrate", "search", "submit", "limits"}
    for name, param in found.items():
        assert param.callback is check_address, name
        assert param.metavar == "HOST:PORT" and param.help.startswith("The Ray cluster"), (name, param.help)
    assert "--dashboard" in _with("--dashboard")["submit"].opts
