"""Where a measurement was made: host, CPU, cores, accelerator, BLAS, library versions and the appopt revision;
and how quiet the machine was while it ran (other processes' CPU use, load average).

Provenance is collected once per process (it shells out to git and reads /proc) and stamped on every row the harness
writes; ``interference()`` is measured around each measurement.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfmodels.targets import KERNEL_FLAGS, cpu_model_and_flags, target_key, usable_cores


@dataclass(frozen=True)
class Provenance:
    host: str
    cpu_model: str
    cpu_flags: str
    cores: int
    accelerator: str
    blas: str
    appopt_revision: str

    def as_dict(self) -> dict[str, object]:
        return asdict(self)

    @property
    def target(self) -> str:
        """The key performance models are fitted per: the CPU model and core count (see ``target_key``)."""
        return target_key(self.cpu_model, self.cores)


def blas_in_use() -> str:
    """BLAS libraries NumPy (and anything else loaded) uses, via threadpoolctl: ``openblas 0.3.31 SkylakeX``."""
    try:
        import numpy  # noqa: F401  (load NumPy's BLAS so threadpoolctl can see it)
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    seen = []
    for info in threadpool_info():
        if info.get("user_api") != "blas":
            continue
        text = " ".join(str(info.get(k) or "") for k in ("internal_api", "version", "architecture")).strip()
        if text not in seen:
            seen.append(text)
    return "; ".join(seen) or "none found"


def accelerator() -> str:
    """``none`` unless an NVIDIA GPU answers nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return "none"
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return "none"
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return ", ".join(names) if out.returncode == 0 and names else "none"


def appopt_revision() -> str:
    """The git commit of this checkout (``+dirty`` with local changes), else the installed package version."""
    repo = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10
        )
        if rev.returncode == 0:
            dirty = subprocess.run(
                ["git", "status", "--porcelain", "--untracked-files=no"],
                cwd=repo,
                capture_output=True,
                text=True,
                timeout=10,
            )
            return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        pass
    try:
        import importlib.metadata

        return "appopt-" + importlib.metadata.version("appopt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def collect() -> Provenance:
    model, flags = cpu_model_and_flags()
    return Provenance(
        host=platform.node() or "unknown",
        cpu_model=model,
        cpu_flags=" ".join(f for f in flags if KERNEL_FLAGS.match(f)),
        cores=usable_cores(),
        accelerator=accelerator(),
        blas=blas_in_use(),
        appopt_revision=appopt_revision(),
    )


# --- how quiet the machine was --------------------------------------------------------------------------------

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def busy_cpu_seconds() -> float | None:
    """CPU seconds all CPUs have spent busy since boot (user, nice, system, irq, softirq, steal), or None off Linux.

    Steal time counts as busy: on a virtual machine it is time another guest took from us.
    """
    try:
        with open("/proc/stat", encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    values = [int(v) for v in fields[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (values + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / _CLOCK_TICKS


#: Blocks shorter than this get no reading: /proc/stat counts in clock ticks (10 ms), too coarse for them.
MIN_PROBE_S = 0.25


class ProbeWindow:
    """Other processes' CPU use over a run of consecutive blocks, each too short for ``interference`` alone.

    ``ready()`` once the window spans ``MIN_PROBE_S``; ``read()`` then gives the cores' worth other processes used
    since ``restart()`` (None where it cannot be measured). A sweep of 0.1 s kernels so judges every few kernels
    together instead of none of them.
    """

    def __init__(self) -> None:
        self.restart()

    def restart(self) -> None:
        self._busy0, self._own0, self._wall0 = busy_cpu_seconds(), time.process_time(), time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self._wall0

    def ready(self) -> bool:
        return self.elapsed() >= MIN_PROBE_S

    def read(self) -> float | None:
        busy1, own1, wall = busy_cpu_seconds(), time.process_time(), self.elapsed()
        if self._busy0 is None or busy1 is None or wall < MIN_PROBE_S:
            return None
        return max(0.0, ((busy1 - self._busy0) - (own1 - self._own0)) / wall)


@dataclass
class Interference:
    """CPU time other processes used while a block ran (``other_cpu``: cores' worth; None where unknown)."""

    other_cpu: float | None = None
    wall_s: float = 0.0


@contextlib.contextmanager
def interference() -> Iterator[Interference]:
    """Measure what else ran on the machine during the block: all CPUs' busy time minus this process's CPU time.

    ``with interference() as probe: run(); probe.other_cpu`` → e.g. 0.02 on a quiet machine, 1.0 when another
    process kept one core busy. Resolution: one clock tick (10 ms) per block, so blocks shorter than
    ``MIN_PROBE_S`` get None (``ProbeWindow`` judges a run of them together).
    """
    probe, window = Interference(), ProbeWindow()
    try:
        yield probe
    finally:
        probe.wall_s = window.elapsed()
        probe.other_cpu = window.read()


def load_average() -> float | None:
    """The 1-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def wait_until_quiet(
    threshold: float = 0.25, window_s: float = 5.0, timeout_s: float = 0.0, sleep: Any = time.sleep
) -> float | None:
    """Other processes' CPU use over ``window_s`` (cores' worth), retried until it is below ``threshold`` or
    ``timeout_s`` passes; returns the last reading (None where it cannot be measured)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with interference() as probe:
            sleep(window_s)
        if probe.other_cpu is None or probe.other_cpu <= threshold or time.monotonic() >= deadline:
            return probe.other_cpu
