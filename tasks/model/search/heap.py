"""The C heap an enumerating process keeps between calls.

A call of the step model over a table of layouts (``space.exhaustive``) allocates and frees
a few megabytes of columns. glibc's allocator hands the freed top of its heap back to the
system once it exceeds its trim threshold (128 KiB, raised on the fly to twice the largest
freed ``mmap``'d block; ``mallopt(3)``), and maps large blocks afresh each time; the next call
then faults the same memory back in, a 4 KiB page at a time: about 2,300 page faults a call
of the 15,840-layout scaling space, a quarter to a third of its time on one core.

``retain_freed_heap`` raises both thresholds once per process, so an enumerating process keeps
up to ``TRIM_THRESHOLD_BYTES`` of freed heap for its next call and serves blocks up to
``MMAP_THRESHOLD_BYTES`` from it. It changes no result, only where memory comes from; where
the C library is not glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

__all__ = ["TRIM_THRESHOLD_BYTES", "MMAP_THRESHOLD_BYTES", "retain_freed_heap"]

#: Freed heap kept for the next call (``M_TRIM_THRESHOLD``), bytes: several calls' peaks.
TRIM_THRESHOLD_BYTES = 64 * 2**20
#: Blocks up to this size come from the heap rather than a fresh ``mmap`` (``M_MMAP_THRESHOLD``),
#: bytes: glibc's own ceiling for its dynamic threshold on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``).
MMAP_THRESHOLD_BYTES = 32 * 2**20

# mallopt(3) parameter numbers, from glibc's malloc.h.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


@functools.cache
def retain_freed_heap() -> bool:
    """Set the process's trim and mmap thresholds (once); True where glibc took both, False
    where there is no glibc or it refused."""
    if platform.libc_ver()[0] != "glibc":
        return False
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)) and bool(mallopt(_M_MMAP_THRESHOLD,
                                                                                    MMAP_THRESHOLD_BYTES))
