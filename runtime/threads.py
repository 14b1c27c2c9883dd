"""Thread-pool control around a run.

``threads=N`` sizes the compiled kernels' pool (``runtime.native``; default every available CPU), whose workers stay
hot during a run, and caps the BLAS/OpenMP pools NumPy uses (to one thread when the pool exists, so the two never
compete) through threadpoolctl when it is importable, around each ``run`` so other code in the process keeps its own
setting. Without threadpoolctl the cap can only be set through ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS`` before
NumPy is imported; ``Executable.threads_applied`` says which happened ("not needed" when no step can reach BLAS).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any

_CONTROLLER: Any = None
_CONTROLLER_LOCK = threading.Lock()


_CONTROLLER_MODULES = -1


def _threadpool_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS/OpenMP libraries, rescanned when new Python modules were imported
    since the last look (that is how a new native library, e.g. torch's OpenMP, usually arrives)."""
    global _CONTROLLER, _CONTROLLER_MODULES
    with _CONTROLLER_LOCK:
        if _CONTROLLER is False:
            return _CONTROLLER
        if _CONTROLLER is None or len(sys.modules) != _CONTROLLER_MODULES:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:
                _CONTROLLER = False
            else:
                _CONTROLLER = ThreadpoolController()
                _CONTROLLER_MODULES = len(sys.modules)
    return _CONTROLLER


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@contextlib.contextmanager
def native_threads(threads: int | None, hold: bool = False) -> Iterator[bool]:
    """Threads of the compiled kernels' pool for the duration of the block (default: every available CPU);
    ``hold`` keeps its workers spinning between operations (a model run). Yields whether the pool exists."""
    from runtime import native

    lib = native.lib()
    if lib is None:
        yield False
        return
    wanted = threads or available_cpus()
    if hold:
        previous = lib.run_begin(wanted)
        try:
            yield True
        finally:
            lib.run_end(previous)
        return
    previous = native.get_threads()
    native.set_threads(wanted)
    try:
        yield True
    finally:
        native.set_threads(previous)


def _blas_controllers() -> list[Any]:
    """threadpoolctl's per-library controllers (empty without threadpoolctl)."""
    controller = _threadpool_controller()
    return list(getattr(controller, "lib_controllers", [])) if controller else []


@contextlib.contextmanager
def limit_threads(threads: int | None, blas: bool = True) -> Iterator[str]:
    """Set the compiled kernels' pool size and cap BLAS/OpenMP threads for the duration of a run; yields how the
    cap was applied. With the compiled kernels present, BLAS runs single-threaded: the pool does the parallel
    work, and two thread pools spinning on the same cores slow each other down. ``blas=False`` (no step of the
    run can reach a BLAS library) skips the cap and its cost."""
    with native_threads(threads, hold=True) as pooled:
        if not blas:
            yield "not needed"
            return
        blas_threads = 1 if pooled else threads
        if not blas_threads:
            yield "unlimited"
            return
        libs = _blas_controllers()
        if libs:
            changed = []
            try:
                for lc in libs:
                    current = lc.get_num_threads()
                    if current != blas_threads:
                        lc.set_num_threads(blas_threads)
                        changed.append((lc, current))
                yield "threadpoolctl"
            finally:
                for lc, current in changed:
                    lc.set_num_threads(current)
            return
        yield "environment" if os.environ.get("OMP_NUM_THREADS") == str(blas_threads) else "not applied"
