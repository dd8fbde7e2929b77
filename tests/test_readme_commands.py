"""Every command of the README runs, in the order shown, in one fresh copy of the repository.

The commands are read from the README's ``bash`` blocks, so the test follows the README as
it changes. A command runs with this environment's ``commscale`` first on PATH; it must end
with the exit status the README gives it (``# exits N``, else 0) and without a traceback. A
calibration the shared machine was too busy for (``BUSY``) is run again with ``--restart``,
the README's remedy, before it is judged.
Commands that install, that run this suite, that need GPUs, or that need a cluster started
by hand are skipped, each with its reason (the cluster commands run in
``tests/sweeps/cluster/test_local_cluster.py`` on a loopback cluster).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

#: (pattern, reason): a command matching the pattern is skipped for that reason.
SKIPPED = [
    (r"-m pytest", "runs this test suite"),
    (r"sweep=roi(?!-)|calibration=h100|scripts/device_check\.py",
     "needs GPU workers (the GPU tests cover the measurements)"),
    (r"--address|RAY_ADDRESS|scripts/cluster\.py|commscale submit|standin_gpu",
     "needs a cluster started by hand (tests/sweeps/cluster runs these on a loopback cluster)"),
]
#: The part of the quick start that installs; what follows it runs.
INSTALL = re.compile(r"^python3\.11 -m venv \.venv && \.venv/bin/pip install [^&]+&& (?P<rest>.*)$")
_EXITS = re.compile(r"#\s*exits (\d+)")
#: What ``commscale calibrate`` says when the shared machine's load left no measurement stable
#: (exit status 1, as the README documents); the README's remedy, ``--restart``, measures anew.
#: The test follows it, at most ``BUSY_RETRIES`` times: a busy CI host is not a broken command.
BUSY = "the machine was too busy to calibrate"
BUSY_RETRIES = 2
_COMMENT = re.compile(r"\s#.*$")


@dataclass(frozen=True)
class ReadmeCommand:
    """One command of the README: its text, its place, the exit status it must end with,
    and why it is skipped (None: it runs)."""

    line: str
    index: int
    exit_status: int
    skipped: Optional[str]


def readme_commands(text: str) -> List[ReadmeCommand]:
    """The commands of every ``bash`` block in order (continuation lines joined, comments
    and blank lines dropped); a block that starts a cluster is skipped whole."""
    commands: List[ReadmeCommand] = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        cluster_block = "scripts/cluster.py start" in block
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            status = int(m.group(1)) if (m := _EXITS.search(line)) else 0
            install = INSTALL.match(line)
            if install:
                line = install.group("rest").replace(".venv/bin/", "")
            code = _COMMENT.sub("", line)  # a skip pattern in a comment does not skip the command
            reason = next((why for pattern, why in SKIPPED if re.search(pattern, code)), None)
            if cluster_block and reason is None:
                reason = SKIPPED[-1][1]
            commands.append(ReadmeCommand(line, len(commands) + 1, status, reason))
    return commands


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_commands_and_each_skip_has_a_reason():
    ran = [c for c in COMMANDS if c.skipped is None]
    assert len(ran) >= 20, "the README's commands were not found"
    assert any(c.line.startswith("commscale run") for c in ran)
    assert all(c.skipped for c in COMMANDS if "--address" in _COMMENT.sub("", c.line))
    assert any(c.skipped is None and "--address" in c.line for c in COMMANDS)  # only in a comment: it runs


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    """A copy of the repository as a clone holds it: no lake, report, venv or caches."""
    folder = tmp_path_factory.mktemp("readme") / "commscale"
    ignore = shutil.ignore_patterns(".git", ".venv", "lake", "report", "__pycache__", "*.egg-info", ".pytest_cache")
    shutil.copytree(ROOT, folder, ignore=ignore)
    return folder


@pytest.mark.parametrize("command", COMMANDS, ids=[f"{c.index:02d}" for c in COMMANDS])
def test_readme_command(command: ReadmeCommand, fresh_copy: Path):
    if command.skipped:
        pytest.skip(f"{command.line[:60]}: {command.skipped}")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("RAY_", "COMMSCALE_")) or k == "RAY_TMPDIR"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-c", command.line], cwd=fresh_copy, env=env, capture_output=True, text=True,
                          timeout=900)
    for _ in range(BUSY_RETRIES):
        if done.returncode != 1 or BUSY not in done.stdout + done.stderr:
            break
        done = subprocess.run(["bash", "-c", _COMMENT.sub("", command.line) + " --restart"], cwd=fresh_copy, env=env,
                              capture_output=True, text=True, timeout=900)
    said = f"README command {command.index}: {command.line}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n" \
           f"{done.stderr[-3000:]}"
    assert done.returncode == command.exit_status, said
    assert "Traceback" not in done.stderr + done.stdout, said
