"""Output that goes to a pipe or a file is not cut at 80 columns: the consoles of every
command (``sweeps.cli.render.console``) are ``COLUMNS`` wide, or ``PIPE_WIDTH``."""

from __future__ import annotations

import os
import subprocess
import sys

from sweeps.cli.render import PIPE_WIDTH

PRINT_150 = ("from sweeps.cli.render import console; "
             "console().print('x' * 150); console(stderr=True).print('y' * 150)")


def _piped(**env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-c", PRINT_150], env={**clean, **env}, capture_output=True, text=True,
                          timeout=60, check=True)


def test_a_piped_console_keeps_long_lines_whole():
    assert PIPE_WIDTH >= 150
    done = _piped()
    assert done.stdout == "x" * 150 + "\n"
    assert done.stderr == "y" * 150 + "\n"


def test_columns_sets_the_width_of_a_piped_console():
    done = _piped(COLUMNS="100")
    assert done.stdout.splitlines() == ["x" * 100, "x" * 50]
