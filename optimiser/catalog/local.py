"""Detect the running machine as the hardware preset ``local`` (CPU only: an accelerator is never assumed).

Peak FLOP/s are estimated, not measured::

    peak[fp32] = usable cores × clock (GHz) × FP32 FLOPs per cycle per core

FLOPs per cycle come from the vector ISA in ``/proc/cpuinfo`` flags (an FMA counts 2):

* x86_64: AVX-512 with two FMA units 64 (Intel; AMD Zen 4 executes AVX-512 on 256-bit pipes: 32, Zen 5: 64);
  AVX2+FMA 32; AVX 16; SSE 8. bf16: AMX 1024 per cycle, else AVX512_BF16 2× fp32. int8: AMX 2048 per cycle,
  else VNNI 4× the fp32 rate. fp16: AVX512_FP16 2× fp32.
* aarch64: two vector pipes of the SVE vector length (``/proc/sys/abi/sve_default_vector_length``), at least two
  128-bit NEON pipes: ``2 × (bits / 32) × 2``. fp16 (asimdhp) and bf16 (BFDOT) 2× fp32, int8 (SDOT: asimddp or
  SVE) 4×.
* ppc64le: two 128-bit VSX FMA pipes, 16.

The clock is the base frequency where the kernel reports one (intel_pstate's ``base_frequency``), else the "@ x GHz"
in the model name, else ``cpu MHz`` from ``/proc/cpuinfo``, else the cpufreq maximum, else 2.0 GHz (noted).

Memory bandwidth is measured once per host with a single-threaded NumPy copy of 128 MiB (``2 × bytes / seconds``,
best of two after a warm-up) — a lower bound on what several threads reach — unless ``APPOPT_LOCAL_MEM_BANDWIDTH``
(bytes/s) is set. The figure is kept in ``$APPOPT_CACHE_DIR`` (or ``$XDG_CACHE_HOME/appopt``, ``~/.cache/appopt``)
``/probes/<host key>.json``, keyed by the host name, CPU model, flags and usable cores, so every plan on one host sees
the same figure (a live probe varied by a few percent between runs, and with it the plans' figures and image labels).
Delete the file to measure again.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import cast, get_args

from optimiser.catalog.models import Arch, Hardware, Precision, Source
from perfmodels.targets import precision_rates

#: Bytes copied by the bandwidth probe: large enough to leave the caches of current server CPUs.
PROBE_BYTES = 256 * 2**20

_ARCH_NAMES: dict[str, Arch] = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "ppc64le": "ppc64le",
}
_VENDORS = {"GenuineIntel": "intel", "AuthenticAMD": "amd", "0x41": "arm", "0x46": "fujitsu", "0xc0": "ampere"}
#: /proc/cpuinfo flags worth reporting as Hardware.features (cpuinfo name -> feature name).
_FEATURES = {
    "avx2": "avx2",
    "fma": "fma",
    "avx512f": "avx512f",
    "avx512_vnni": "avx512_vnni",
    "avx_vnni": "avx_vnni",
    "avx512_bf16": "avx512_bf16",
    "avx512_fp16": "avx512_fp16",
    "amx_tile": "amx",
    "asimd": "neon",
    "sve": "sve",
    "sve2": "sve2",
    "bf16": "bf16",
    "i8mm": "i8mm",
    "asimddp": "dotprod",
    "asimdhp": "fp16",
    "vsx": "vsx",
}


@dataclass(frozen=True)
class CpuInfo:
    """What ``/proc/cpuinfo`` says about the first processor."""

    model_name: str = ""
    vendor_id: str = ""
    cpu_family: int | None = None
    mhz: float | None = None
    flags: frozenset[str] = field(default_factory=frozenset)


def parse_cpuinfo(text: str) -> CpuInfo:
    """Parse the first processor block of ``/proc/cpuinfo`` text (x86 ``flags`` or Arm ``Features``)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    model = fields.get("model name") or fields.get("cpu") or fields.get("hardware") or ""
    vendor = fields.get("vendor_id") or fields.get("cpu implementer") or ""
    flags = frozenset((fields.get("flags") or fields.get("features") or "").split())
    if fields.get("cpu", "").upper().startswith("POWER") or "altivec" in fields.get("cpu", "").lower():
        vendor = vendor or "IBM"
        flags = flags | {"vsx"}
    family = fields.get("cpu family")
    mhz = fields.get("cpu mhz") or fields.get("clock", "").lower().removesuffix("mhz")
    return CpuInfo(
        model_name=model,
        vendor_id=vendor,
        cpu_family=int(family) if family and family.isdigit() else None,
        mhz=_float(mhz),
        flags=flags,
    )


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def usable_cores() -> int:
    """Cores this process may use: the affinity mask, capped by a cgroup v2 CPU quota (containers, Kubernetes)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    quota = (_read("/sys/fs/cgroup/cpu.max") or "").split()
    if len(quota) == 2 and quota[0] != "max":
        limit, period = _float(quota[0]), _float(quota[1])
        if limit and period:
            cores = min(cores, max(1, math.ceil(limit / period)))
    return max(1, cores)


def clock_ghz(info: CpuInfo) -> tuple[float, str]:
    """The clock to compute peaks at, and where it came from."""
    base_khz = _float((_read("/sys/devices/system/cpu/cpu0/cpufreq/base_frequency") or "").strip())
    if base_khz:
        return base_khz / 1e6, "cpufreq base_frequency"
    named = re.search(r"@\s*([\d.]+)\s*GHz", info.model_name)
    if named:
        return float(named.group(1)), "model name"
    if info.mhz:
        return info.mhz / 1000, "/proc/cpuinfo cpu MHz"
    max_khz = _float((_read("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq") or "").strip())
    if max_khz:
        return max_khz / 1e6, "cpufreq cpuinfo_max_freq"
    return 2.0, "unknown (assumed 2.0 GHz)"


def sve_vector_bits() -> int | None:
    """The SVE vector length in bits (from the kernel's default for new processes), None without SVE."""
    text = _read("/proc/sys/abi/sve_default_vector_length")
    value = _float(text.strip()) if text else None
    return int(value) * 8 if value else None


def flops_per_cycle(
    arch: Arch | None, info: CpuInfo, sve_bits: int | None = None
) -> tuple[dict[Precision, float], str]:
    """Per-core FLOPs (int8: ops) per cycle by precision, and the rule that gave the fp32 figure."""
    flags = info.flags
    if arch == "x86_64":
        amd = info.vendor_id == "AuthenticAMD"
        if "avx512f" in flags:
            full_width = not amd or (info.cpu_family or 0) >= 26
            fp32, rule = (64.0, "AVX-512, two FMA units") if full_width else (32.0, "AVX-512 on 256-bit pipes")
        elif "avx2" in flags and "fma" in flags:
            fp32, rule = 32.0, "AVX2+FMA"
        elif "avx" in flags:
            fp32, rule = 16.0, "AVX"
        else:
            fp32, rule = 8.0, "SSE"
        return _rates(arch, flags, fp32), rule
    if arch == "aarch64":
        bits = max(128, sve_bits or 128) if "sve" in flags else 128
        fp32 = 2 * (bits / 32) * 2
        return _rates(arch, flags, fp32), f"two {bits}-bit {'SVE' if 'sve' in flags else 'NEON'} FMA pipes"
    if arch == "ppc64le":
        return {"fp32": 16.0}, "two 128-bit VSX FMA pipes"
    return {"fp32": 2.0}, "scalar FMA (unknown ISA)"


def _rates(arch: Arch, flags: frozenset[str], fp32: float) -> dict[Precision, float]:
    return {cast(Precision, p): v for p, v in precision_rates(arch, flags, fp32).items()}


@lru_cache(maxsize=1)
def measure_memory_bandwidth(nbytes: int = PROBE_BYTES) -> float:
    """Bytes/s of a single-threaded NumPy copy between the halves of an ``nbytes`` buffer (read + write counted),
    best of two after a warm-up. One buffer keeps the page-fault cost (most of the ~0.3 s) down."""
    import numpy as np

    buffer = np.ones(nbytes // 8, dtype=np.float64)
    half = buffer.size // 2
    source, target = buffer[:half], buffer[half : 2 * half]
    np.copyto(target, source)  # warm-up: TLB, first touch of the page tables
    best = math.inf
    for _ in range(2):
        start = time.perf_counter()
        np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.nbytes / best


def cache_base() -> Path:
    """appopt's cache directory: ``$APPOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/appopt``, else ``~/.cache/appopt``."""
    explicit = os.environ.get("APPOPT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg, "appopt")


def host_key() -> str:
    """What identifies this host for cached probes: name, CPU model and flags, usable cores (hashed)."""
    info = parse_cpuinfo(_read("/proc/cpuinfo") or "")
    facts = [platform.node(), platform.machine(), info.model_name, " ".join(sorted(info.flags)), str(usable_cores())]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", platform.node() or "host")[:40]
    return f"{name}-{hashlib.sha256(chr(31).join(facts).encode()).hexdigest()[:12]}"


def probe_cache_path() -> Path:
    """The file this host's probe results are kept in."""
    return cache_base() / "probes" / f"{host_key()}.json"


def cached_memory_bandwidth() -> tuple[float, Path, bool]:
    """This host's probed bandwidth from the cache, measuring (and storing) it the first time: (bytes/s, cache file,
    whether it was measured now). A cache that cannot be written still gives the measured figure."""
    path = probe_cache_path()
    try:
        value = _float(str(json.loads(path.read_text(encoding="utf-8")).get("mem_bandwidth")))
        if value and value > 0:
            return value, path, False
    except (OSError, ValueError, AttributeError):
        pass
    value = measure_memory_bandwidth()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"mem_bandwidth": value, "probe_bytes": PROBE_BYTES, "host": platform.node()}
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass
    return value, path, True


def memory_bandwidth(measure: bool = True) -> tuple[float, str]:
    """The bandwidth to plan with, and how it was obtained."""
    override = _float(os.environ.get("APPOPT_LOCAL_MEM_BANDWIDTH"))
    if override:
        return override, "APPOPT_LOCAL_MEM_BANDWIDTH"
    if measure:
        value, path, _ = cached_memory_bandwidth()
        probe = f"single-thread NumPy copy of {PROBE_BYTES // 2**21} MiB (a lower bound), cached per host in {path}"
        return value, probe
    return 10e9, "not measured: assumed 10 GB/s"


def memory_bytes() -> float | None:
    """Physical memory, capped by a cgroup v2 memory limit."""
    total = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            total = _float(line.split()[1])
            total = total * 1024 if total else None
    limit = _float((_read("/sys/fs/cgroup/memory.max") or "").strip())
    if limit and (total is None or limit < total):
        return limit
    return total


def detect_hardware(
    info: CpuInfo,
    machine: str,
    cores: int,
    clock: tuple[float, str],
    bandwidth: tuple[float, str],
    sve_bits: int | None = None,
    memory: float | None = None,
) -> Hardware:
    """Build the ``local`` preset from already-gathered facts (pure; ``detect_local_hardware`` gathers them)."""
    arch = _ARCH_NAMES.get(machine.lower())
    ghz, clock_source = clock
    rates, rule = flops_per_cycle(arch, info, sve_bits)
    peaks = {precision: cores * ghz * 1e9 * per_cycle for precision, per_cycle in rates.items()}
    features = sorted({name for flag, name in _FEATURES.items() if flag in info.flags})
    if sve_bits and "sve" in info.flags:
        features.append(f"sve{sve_bits}")
    bandwidth_value, bandwidth_source = bandwidth
    notes = (
        f"detected: fp32 = {cores} cores × {ghz:.2f} GHz ({clock_source}) × {rates['fp32']:g} FLOPs/cycle ({rule}); "
        f"memory bandwidth {bandwidth_value / 1e9:.1f} GB/s from {bandwidth_source}; no accelerator assumed"
    )
    return Hardware(
        id="local",
        name=info.model_name or f"local {machine} machine",
        kind="cpu",
        vendor=_VENDORS.get(info.vendor_id, info.vendor_id.lower() or "unknown"),
        arch=arch if arch in get_args(Arch) else None,
        cores=cores,
        frequency_ghz=round(ghz, 3),
        peak_flops=peaks,
        mem_bandwidth=bandwidth_value,
        memory_bytes=memory,
        features=features,
        notes=notes,
        sources=[Source(citation="detected from /proc/cpuinfo, the affinity mask and cgroup limits of this machine")],
    )


@lru_cache(maxsize=2)
def detect_local_hardware(measure_bandwidth: bool = True) -> Hardware:
    """The running machine as a ``Hardware`` preset with id ``local`` (cached per process).

    Example::

        >>> hw = detect_local_hardware()  # doctest: +SKIP
        >>> hw.cores, hw.arch, f"{hw.peak('fp32') / 1e9:.0f} GFLOP/s"  # doctest: +SKIP
        (2, 'x86_64', '333 GFLOP/s')
    """
    info = parse_cpuinfo(_read("/proc/cpuinfo") or "")
    return detect_hardware(
        info,
        machine=platform.machine(),
        cores=usable_cores(),
        clock=clock_ghz(info),
        bandwidth=memory_bandwidth(measure_bandwidth),
        sve_bits=sve_vector_bits(),
        memory=memory_bytes(),
    )
