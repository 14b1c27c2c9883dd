"""Which machine a measurement or a prediction is about: a stable key from the CPU model and core count.

Benchmark rows carry this key; fitted models are keyed by it; the planner's ``local`` device maps to this machine's key.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from pathlib import Path


def target_key(cpu_model: str, cores: int) -> str:
    """``intel-r-xeon-r-processor-2c``: a slug of the CPU model plus the usable core count."""
    slug = re.sub(r"[^a-z0-9]+", "-", cpu_model.lower()).strip("-") or "unknown-cpu"
    return f"{slug}-{cores}c"


def cpu_model_and_flags() -> tuple[str, list[str]]:
    """CPU model name and ISA flags from /proc/cpuinfo (platform fallbacks elsewhere)."""
    model, flags = "", list[str]()
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if not model and key in ("model name", "cpu model") and value.strip():
            model = value.strip()
        if not flags and key in ("flags", "features"):
            flags = value.split()
    return model or platform.processor() or platform.machine(), flags


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, not the host's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@functools.lru_cache(maxsize=1)
def local_target_key() -> str:
    """This machine's key."""
    return target_key(cpu_model_and_flags()[0], usable_cores())
