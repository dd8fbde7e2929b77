"""The reaper: kill what a driver spawned once the driver is gone, and remove its cluster's
temp folder.

    python reaper.py DRIVER_PID TEMP_DIR     # stdin: a pipe from the driver

It reads /proc (Linux); elsewhere it only waits, and kills nothing. One byte on stdin means
the driver stopped its cluster itself (remove the folder, kill nothing); end of file means
the driver is gone. Either way it ends by removing the temp folder (may be empty: none).
Imports only the standard library (``sweeps.cluster.programs``).
"""

import os
import select
import shutil
import signal
import sys
from typing import Dict, Tuple


def processes() -> Dict[int, Tuple[int, str]]:
    """pid -> (parent pid, start time) of every process, from /proc/PID/stat."""
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


def _watch(me: int, driver: int, temp_dir: str) -> Dict[int, str]:
    """The driver's descendants seen while it lived (pid -> start time); exits if the driver
    stood the reaper down."""
    known: Dict[int, str] = {}
    while True:
        ready, _, _ = select.select([0], [], [], 0.25)
        if ready:
            if os.read(0, 1):  # the driver stopped its cluster itself
                if temp_dir:
                    shutil.rmtree(temp_dir, ignore_errors=True)
                sys.exit(0)
            return known  # end of file: the driver is gone
        table, children = processes(), {}
        for pid, (parent, _) in table.items():
            children.setdefault(parent, []).append(pid)
        pending = list(children.get(driver, []))
        while pending:  # the driver's descendants, breadth first
            pid = pending.pop()
            if pid != me:
                known.setdefault(pid, table[pid][1])
                pending += children.get(pid, [])


def main(driver: int, temp_dir: str) -> None:
    known = _watch(os.getpid(), driver, temp_dir)
    table = processes()
    for pid, started in known.items():
        if pid in table and table[pid][1] == started:  # the same process, not a reused pid
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    if temp_dir:
        shutil.rmtree(temp_dir, ignore_errors=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
