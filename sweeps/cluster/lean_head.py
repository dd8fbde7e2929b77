"""Start an embedded Ray head without the services no one can use on it.

``ray.init(address="local")`` starts, beside the GCS and the raylet, three Python
processes an embedded cluster never needs:

- the autoscaler's monitor (``ray/autoscaler/_private/monitor.py``): a one-node cluster that
  no node ever joins has nothing to scale;
- the log monitor (``ray/_private/log_monitor.py``): it streams the workers' output to
  drivers, and the embedded session's driver asks for none (``log_to_driver=False``);
- the API server (``ray/dashboard/dashboard.py``, minimal without the dashboard): it
  serves the Jobs and state APIs to clients that join by HTTP, while an embedded cluster
  is reached by its own driver alone.

Each imports Ray on its own: together 2.8 of the 6.6 CPU-seconds Ray's processes take to
start on the 2-core development machine, and 2.5 s of a start's 7.9 s there
(``scripts/bench_cold_run.py``, Ray alone, medians of 5). Ray 2.60
(pinned in ``pyproject.toml``) offers no ``ray.init`` switch for them: its ``RayParams``
has ``no_monitor`` and ``include_log_monitor`` (``ray/_private/parameter.py``), which only
``ray start`` sets, and ``Node.start_head_processes`` starts the API server whatever they
say (``ray/_private/node.py``). ``lean_head`` sets the two and skips the third for the
span of one ``ray.init``, then puts Ray back as it was; Ray's own ``ray.shutdown`` still
stops what it started. Joining a cluster is never done inside it.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Iterator

from ray._private.node import Node
from ray._private.parameter import RayParams

__all__ = ["lean_head", "SKIPPED_SERVICES"]

#: The program each skipped service runs, as its command line names it.
SKIPPED_SERVICES = ("autoscaler/_private/monitor.py", "_private/log_monitor.py", "dashboard/dashboard.py")

_lock = threading.Lock()


@contextlib.contextmanager
def lean_head() -> Iterator[None]:
    """Within the block, a Ray head started in this process starts no autoscaler monitor,
    no log monitor and no API server (its dashboard URL is then None, as Ray has it when
    its API server fails). One block at a time per process; Ray is restored on exit."""
    with _lock:
        params_init, start_api_server = RayParams.__init__, Node.start_api_server

        def without_monitors(self: RayParams, *args, **kwargs) -> None:
            params_init(self, *args, **kwargs)
            self.no_monitor = True
            self.include_log_monitor = False

        def without_api_server(self: Node, *, include_dashboard, raise_on_failure) -> None:
            self._webui_url = None

        RayParams.__init__ = without_monitors
        Node.start_api_server = without_api_server
        try:
            yield
        finally:
            RayParams.__init__, Node.start_api_server = params_init, start_api_server
