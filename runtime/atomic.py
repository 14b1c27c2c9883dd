"""Atomic file writes: the data goes to a temporary file beside the target, is fsynced, then ``os.replace``d over it.

A run killed half-way leaves the previous file whole, never a torn one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_atomic(path: str | os.PathLike[str], write: Callable[[BinaryIO], object]) -> Path:
    """Call ``write`` on a temporary binary file beside ``path``, then replace ``path`` with it (its folder is made
    if missing). The temporary file is removed if ``write`` fails."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    return target
