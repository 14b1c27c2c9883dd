"""Keep freed memory in the process while training (glibc): a step's large temporaries then reuse warm pages.

A training step allocates and frees the same large arrays every step (im2col columns, activation gradients). glibc
returns the top of its heap to the kernel once more than ``M_TRIM_THRESHOLD`` is free (128 KiB by default), so the
next step page-faults the same memory in again: on the digits CNN that was a quarter of the step's CPU time
(docs/decisions.md). Raising the trim threshold and the top pad keeps that memory; the process's resident size then
stays at the step's peak, as with PyTorch's caching allocator. No effect on other C libraries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
#: Free memory kept at the heap's top before it is returned to the system, and the extra asked for on growth.
TRIM_THRESHOLD_BYTES = 512 << 20
TOP_PAD_BYTES = 64 << 20

_done = False


def retain_freed_memory() -> bool:
    """Raise glibc's trim threshold and top pad once per process; False where that is not glibc (nothing done)."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and others: no mallopt
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)) and bool(mallopt(M_TOP_PAD, TOP_PAD_BYTES))
    return _done
