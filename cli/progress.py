"""Progress on stderr for CLI steps that take more than a moment (fits, evaluations, benchmark suites).

A step prints one line when it starts and one when it ends (with its duration); on a terminal the current item and
the elapsed time are rewritten in place every second; elsewhere (logs, CI, tests) an item line is printed at most
every ``LOG_EVERY_S`` seconds, so logs stay short. stdout keeps only the command's results.

Example::

    >>> with progress("fitting the kernel-unit models") as step:   # doctest: +SKIP
    ...     for route in routes:
    ...         step(route)
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import TextIO

#: Off a terminal, item lines come at most this often.
LOG_EVERY_S = 2.0


@contextlib.contextmanager
def progress(message: str, stream: TextIO | None = None) -> Iterator[Callable[[str], None]]:
    """Report ``message`` as a step on ``stream`` (stderr); yields a function that names the current item."""
    out = stream or sys.stderr
    tty = bool(getattr(out, "isatty", lambda: False)())
    start = time.perf_counter()
    item_now = [""]
    logged = [start]
    lock = threading.Lock()
    done = threading.Event()

    def line() -> str:
        item = f": {item_now[0]}" if item_now[0] else ""
        return f"appopt: {message}{item} ({time.perf_counter() - start:.0f} s)"

    def tick() -> None:
        while not done.wait(1.0):
            with lock:
                out.write("\r\x1b[K" + line())
                out.flush()

    def step(item: str) -> None:
        with lock:
            item_now[0] = item
            now = time.perf_counter()
            if not tty and now - logged[0] >= LOG_EVERY_S:
                logged[0] = now
                out.write(line() + "\n")
                out.flush()

    out.write(f"appopt: {message}...\n")
    out.flush()
    ticker = threading.Thread(target=tick, daemon=True) if tty else None
    if ticker is not None:
        ticker.start()
    try:
        yield step
    finally:
        done.set()
        if ticker is not None:
            ticker.join()
            out.write("\r\x1b[K")
        out.write(f"appopt: {message}: done in {time.perf_counter() - start:.1f} s\n")
        out.flush()
