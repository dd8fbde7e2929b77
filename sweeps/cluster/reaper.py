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

from sweeps.cluster.programs import program_path

__all__ = ["Reaper"]



class Reaper:
    """Start with ``Reaper.start(temp_dir)`` before the embedded cluster starts (a driver
    killed during Ray's start leaves nothing either); ``stand_down()`` once the cluster has
    stopped. Either way the reaper removes ``temp_dir``, the cluster's session folder,
    when it ends."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._process: Optional[subprocess.Popen] = process

    @classmethod
    def start(cls, temp_dir: str = "") -> "Reaper":
        process = subprocess.Popen([sys.executable, program_path("reaper"), str(os.getpid()), temp_dir],
                                   stdin=subprocess.PIPE,
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
