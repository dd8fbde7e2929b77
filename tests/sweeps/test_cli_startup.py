"""Only the cluster layer imports Ray, and only when points run: the command line and the
sweep runner start without it (a command that runs nothing on Ray, or refuses its input,
does not pay for importing it)."""

from __future__ import annotations

import subprocess
import sys


def test_the_command_line_and_the_sweep_runner_start_without_ray():
    probe = ("import sys, sweeps.cli, sweeps.run, sweeps.sweep, sweeps.calibrate; "
             "print(sorted(m for m in ('ray', 'torch', 'optuna') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
