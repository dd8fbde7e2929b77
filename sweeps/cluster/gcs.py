"""Asking a cluster's GCS for its node table, from a short Python subprocess.

The subprocess runs the ``ray`` installation's own Python (``python_of``), so the driver
that owns a ``LocalCluster`` need not import Ray. The query prints the node table as one
JSON line: dicts with node_id, alive, ip, head, temp_dir and resources.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any, Mapping

from sweeps.cluster.programs import program_path

__all__ = ["python_of", "start_node_query", "node_query_result", "ask_node_table"]



def python_of(ray_bin: str) -> str:
    """The Python that runs ``ray_bin`` (from its #! line), to ask the GCS with; else ours."""
    try:
        with open(ray_bin, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return sys.executable
    if first.startswith("#!"):
        parts = first[2:].split()
        if parts and parts[0].endswith("/env") and len(parts) > 1:
            parts = [shutil.which(parts[1]) or ""]
        if parts and parts[0] and os.access(parts[0], os.X_OK):
            return parts[0]
    return sys.executable


def start_node_query(python: str, address: str, env: Mapping[str, str], mode: str, arg: str,
                     timeout_s: float) -> subprocess.Popen:
    """Start the node-table query against the GCS at ``address`` (the program
    ``programs.node_table``, run by ``python``)."""
    return subprocess.Popen([python, program_path("node_table"), address, mode, arg, str(timeout_s)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(env), text=True)


def node_query_result(query: subprocess.Popen) -> list[dict[str, Any]]:
    """The node table a finished query printed; ``RuntimeError`` if it printed none."""
    out, err = query.communicate()
    lines = [line for line in out.splitlines() if line.startswith("[")]
    if query.returncode != 0 or not lines:
        message = (err.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"cannot read the node table from the GCS: {message}")
    return json.loads(lines[-1])


def ask_node_table(python: str, address: str, env: Mapping[str, str], mode: str, arg: str, *,
                   timeout_s: float) -> list[dict[str, Any]]:
    """Run one query to its end (``timeout_s`` plus 30 s of grace) and return the table."""
    query = start_node_query(python, address, env, mode, arg, timeout_s)
    try:
        query.wait(timeout=timeout_s + 30)
    except subprocess.TimeoutExpired:
        query.kill()
        query.communicate()
        raise RuntimeError(f"the GCS at {address} did not answer within {timeout_s + 30:.0f} s") from None
    return node_query_result(query)
