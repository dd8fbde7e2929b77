"""The heap an enumerating process keeps between calls (``tasks.model.search.heap``).

Counted in page faults, not timed: each call of the scaling space's enumeration used to fault
its few megabytes of columns back in from the system (about 2,300 faults a call); with the
heap kept, a call after the first faults in almost nothing. Each count runs in its own
process, since the thresholds are the process's.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import pytest

from tasks.model.search.heap import retain_freed_heap

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt(3) is glibc's")

_COUNT = """
import json, resource, sys
from sweeps.config import load_search
from tasks.model.search.space import enumerate_layouts, exhaustive
from tasks.model.step.plan import step_columns
setup = load_search(["scaling", "devices=512", "global_batch=2048"])
space, ctx = setup.spec.space, setup.step_context
call = (lambda: exhaustive(space, ctx)) if sys.argv[1] == "exhaustive" else \\
    (lambda: step_columns(enumerate_layouts(space, ctx.devices), ctx))
for _ in range(3):
    call()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    call()
print(json.dumps((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10))
"""


def _faults_per_call(entry: str) -> float:
    done = subprocess.run([sys.executable, "-c", _COUNT, entry], capture_output=True, text=True, timeout=300,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_retain_freed_heap_takes_on_glibc() -> None:
    assert retain_freed_heap() is True


def test_exhaustive_calls_fault_in_far_less_than_without_the_kept_heap() -> None:
    without, kept = _faults_per_call("plain"), _faults_per_call("exhaustive")
    assert without > 500, f"the plain call faulted only {without} pages: nothing left to show"
    assert kept < without / 10, f"{kept} page faults a call with the heap kept against {without} without"
