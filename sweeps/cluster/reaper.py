"""The embedded cluster dies with its driver, even a driver killed with SIGKILL.

Ray's own processes (GCS, raylet, workers) notice a dead driver within a second, but its
dashboard and runtime-environment agents then try to report the raylet's death to a GCS
that is gone, and wait a minute for it (a timeout written into Ray). ``Reaper`` is a small
process the driver starts beside its embedded cluster: it keeps a list of the driver's
descendant processes, and when the pipe from the driver reaches end of file without the
word that all is well (the driver is gone), it kills the listed ones that still run. A
driver that stops its cluster itself tells the reaper to stand down. Either way it then
removes the cluster's temp folder (its session: sockets and logs), so a run leaves none.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Optional

__all__ = ["Reaper"]

#: The reaper's program: argv[1] is the driver's pid, argv[2] (may be empty) the cluster's
#: temp folder, stdin the pipe from the driver. It reads /proc (Linux); elsewhere it only
#: waits, and kills nothing. Either way it ends by removing the temp folder.
_PROGRAM = r"""
import os, select, shutil, signal, sys

def processes():
    # pid -> (parent pid, start time) of every process, from /proc/PID/stat
    found = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                found[int(name)] = (int(fields[1]), fields[19])
            except (OSError, IndexError, ValueError):
                pass
    return found

me, driver, temp_dir, known = os.getpid(), int(sys.argv[1]), sys.argv[2], {}
while True:
    ready, _, _ = select.select([0], [], [], 0.25)
    if ready:
        if os.read(0, 1):  # the driver stopped its cluster itself
            if temp_dir:
                shutil.rmtree(temp_dir, ignore_errors=True)
            sys.exit(0)
        break  # end of file: the driver is gone
    table, children = processes(), {}
    for pid, (parent, _) in table.items():
        children.setdefault(parent, []).append(pid)
    pending = list(children.get(driver, []))
    while pending:  # the driver's descendants, breadth first
        pid = pending.pop()
        if pid != me:
            known.setdefault(pid, table[pid][1])
            pending += children.get(pid, [])
table = processes()
for pid, started in known.items():
    if pid in table and table[pid][1] == started:  # the same process, not a reused pid
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
if temp_dir:
    shutil.rmtree(temp_dir, ignore_errors=True)
"""


class Reaper:
    """Start with ``Reaper.start(temp_dir)`` before the embedded cluster starts (a driver
    killed during Ray's start leaves nothing either); ``stand_down()`` once the cluster has
    stopped. Either way the reaper removes ``temp_dir``, the cluster's session folder,
    when it ends."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._process: Optional[subprocess.Popen] = process

    @classmethod
    def start(cls, temp_dir: str = "") -> "Reaper":
        process = subprocess.Popen([sys.executable, "-c", _PROGRAM, str(os.getpid()), temp_dir], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return cls(process)

    def stand_down(self) -> None:
        """The cluster stopped: the reaper removes its temp folder, kills nothing and exits."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.write(b"x")
            process.stdin.close()
        except OSError:
            pass
        process.wait()
