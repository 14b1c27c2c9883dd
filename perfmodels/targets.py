"""Which machine a measurement or a prediction is about: a stable key from the CPU model and core count.

Benchmark rows carry this key; fitted models are keyed by it; the planner's ``local`` device maps to this machine's key.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

#: ISA flags that matter to DL kernels (the rest of /proc/cpuinfo's flags are noise for our purposes).
KERNEL_FLAGS = re.compile(r"^(fma|avx|avx2|avx512\w*|avx_vnni|amx\w*|sve\w*|asimd\w*|neon|f16c|sse4_2)$")


def slug(name: str, fallback: str) -> str:
    """``Intel(R) Xeon(R) Processor`` -> ``intel-r-xeon-r-processor``: lower-case words joined by dashes."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or fallback


def target_key(cpu_model: str, cores: int) -> str:
    """``intel-r-xeon-r-processor-2c``: a slug of the CPU model plus the usable core count."""
    return f"{slug(cpu_model, 'unknown-cpu')}-{cores}c"


def cpu_name(key: str) -> str:
    """A target key without its core count (``intel-r-xeon-r-processor`` of ``intel-r-xeon-r-processor-2c``)."""
    name, _, cores = key.rpartition("-")
    return name if name and cores.endswith("c") and cores[:-1].isdigit() else key


def nearest_host(key: str, measured: Sequence[str]) -> str | None:
    """Of the measured hosts (one entry per fitted route, so that the host with most routes counts most), the one a
    host of ``key`` is carried from: itself, else a host of the same CPU name (another core count), else the most
    measured (None: none measured)."""
    if not measured:
        return None
    if key in measured:
        return key
    same_cpu = [t for t in measured if cpu_name(t) == cpu_name(key)]
    pool = same_cpu or list(measured)
    return max(sorted(set(pool)), key=pool.count)


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


def kernel_flags(flags: Iterable[str]) -> tuple[str, ...]:
    """The flags among ``flags`` that matter to DL kernels (``KERNEL_FLAGS``), sorted."""
    return tuple(sorted({f for f in flags if KERNEL_FLAGS.match(f)}))


@functools.lru_cache(maxsize=1)
def local_kernel_flags() -> tuple[str, ...]:
    """This machine's ``kernel_flags``."""
    return kernel_flags(cpu_model_and_flags()[1])


def host_difference(measured: Iterable[str], here: Iterable[str]) -> str:
    """How this host's kernel ISA differs from that of the host a measurement came from ("" when alike).

    Machines with one CPU model name (and so one target key) can differ: a cloud VM of one type may expose AMX on
    one host and not on the next, and kernels then run at other speeds.

    >>> host_difference(["avx512f", "amx_tile"], ["avx512f", "avx_vnni"])
    'measured with amx_tile, which this CPU lacks; this CPU also has avx_vnni'
    """
    measured, here = set(kernel_flags(measured)), set(kernel_flags(here))
    parts = []
    if measured - here:
        parts.append(f"measured with {', '.join(sorted(measured - here))}, which this CPU lacks")
    if here - measured:
        parts.append(f"this CPU also has {', '.join(sorted(here - measured))}")
    return "; ".join(parts)


def flags_arch(flags: Iterable[str]) -> str:
    """The instruction set that a host's ``kernel_flags`` belong to ("" when they name neither).

    >>> flags_arch(["avx2", "fma"]), flags_arch(["asimd", "sve"]), flags_arch([])
    ('x86_64', 'aarch64', '')
    """
    flags = set(kernel_flags(flags))
    if any(f.startswith(("avx", "sse", "amx")) for f in flags):
        return "x86_64"
    if any(f.startswith(("asimd", "sve", "neon")) for f in flags):
        return "aarch64"
    return ""


def precision_rates(arch: str, flags: Iterable[str], fp32: float) -> dict[str, float]:
    """FLOPs (int8: ops) per cycle per core at each precision the ISA has arithmetic for, given its fp32 rate:
    x86_64 AVX512_FP16 fp16 2x fp32; bf16 AMX 1024 a cycle, else AVX512_BF16 2x; int8 AMX 2048, else VNNI 4x;
    aarch64 fp16 (asimdhp) and bf16 (BFDOT) 2x, int8 (SDOT: asimddp or SVE) 4x."""
    have = set(flags)
    rates = {"fp32": fp32}
    if arch == "x86_64":
        if "avx512_fp16" in have:
            rates["fp16"] = 2 * fp32
        if "amx_bf16" in have:
            rates["bf16"] = 1024.0
        elif "avx512_bf16" in have:
            rates["bf16"] = 2 * fp32
        if "amx_int8" in have:
            rates["int8"] = 2048.0
        elif have & {"avx512_vnni", "avx_vnni", "avx512vnni"}:
            rates["int8"] = 4 * fp32
    elif arch == "aarch64":
        if have & {"asimdhp", "fphp"}:
            rates["fp16"] = 2 * fp32
        if "bf16" in have:
            rates["bf16"] = 2 * fp32
        if have & {"asimddp", "sve"}:  # SDOT: NEON dot-product extension, or part of base SVE
            rates["int8"] = 4 * fp32
    return rates
