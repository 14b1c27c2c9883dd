"""Compiled kernels: ``kernels.c`` built with the system C compiler at first use, cached, loaded with ctypes.

The runtime works without them: every caller checks ``lib()`` and falls back to NumPy when it is ``None``
(no compiler, a failed build, or ``APPOPT_NATIVE=0``). The shared object is cached under the appopt cache
directory, keyed by the source, the compiler, the flags and the CPU (``-march=native`` code must not run on
another machine sharing a home directory), and written atomically so concurrent first uses do not collide.
Images for another platform ship kernels cross-built on the host (``cross_build``) and name them in
``APPOPT_NATIVE_LIB``, so nothing needs a compiler at run time.

Each C entry point takes one pointer to an int64 argument block (``Args``), so a call costs ~0.2 µs; float
parameters travel as float32 bit patterns (``Args.f32``).

>>> from runtime import native
>>> native.lib() is not None or native.status()      # doctest: +SKIP
True
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "Args",
    "NativeLib",
    "addr",
    "cache_dir",
    "cross_build",
    "cross_flags",
    "lib",
    "needs_build",
    "set_enabled",
    "set_threads",
    "status",
]

SOURCE = Path(__file__).with_name("kernels.c")
#: Compiled into the same shared object as ``SOURCE`` (recurrent layers, upsampling, attention, squeeze-excite, the
#: embedding bag, the prebound-call program runner and training's backward kernels in their own files).
EXTRA_SOURCES = tuple(
    Path(__file__).with_name(name)
    for name in ("recurrent.c", "upsample.c", "attention.c", "convnets.c", "program.c", "training.c")
)
#: Included by the sources (``#include "..."``): part of the build's cache key.
HEADERS = (Path(__file__).with_name("vec16.h"),)
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-pthread", "-Wno-psabi", "-fno-math-errno")
#: Entry points, each ``void f(const int64_t *args)``.
ENTRY_POINTS = (
    "ap_conv",
    "ap_conv2d",
    "ap_pack_b",
    "ap_dwconv",
    "ap_pool",
    "ap_pool_nchw",
    "ap_gap",
    "ap_transpose",
    "ap_softmax",
    "ap_layernorm",
    "ap_gelu",
    "ap_ew",
    "ap_channel_shuffle",
    "ap_dwpw",
    "ap_lrn",
    "ap_rnn_seq",
    "ap_rnn_layer",
    "ap_col2im_gather",
    "ap_attention",
    "ap_se",
    "ap_embag",
    "ap_embag_ranges",
    "ap_gather",
    "ap_strided_copy",
    "ap_col2im_nhwc",
    "ap_resize2d",
    "ap_concat_last",
    "ap_run_program",
    "ap_maxpool_grad_tiled",
    "ap_maxpool_2x2",
    "ap_sgd_momentum",
    "ap_bn_train",
    "ap_bn_train_grad",
    "ap_relu_grad",
    "ap_pack_conv_weights",
    "ap_layer_norm_grad",
)

_lock = threading.Lock()
_state: dict[str, Any] = {"lib": None, "tried": False, "reason": "not built yet", "enabled": None}


def cache_dir() -> Path:
    """The appopt cache root: ``$APPOPT_CACHE_DIR``, else ``$XDG_CACHE_HOME/appopt``, else ``~/.cache/appopt``."""
    explicit = os.environ.get("APPOPT_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return Path(xdg) / "appopt" if xdg else Path.home() / ".cache" / "appopt"


def machine_signature() -> str:
    """CPU model and feature flags (what ``-march=native`` code depends on), hashed."""
    parts = [platform.machine(), platform.system()]
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(("model name", "flags", "Features", "CPU part")):
                    parts.append(line.strip())
                if len(parts) > 6:
                    break
    except OSError:
        parts.append(platform.processor())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _compiler() -> str | None:
    for cand in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if cand and shutil.which(cand):
            return cand
    return None


def _compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.splitlines()[0] if out.stdout else "unknown"


def build_key(cc: str, flags: tuple[str, ...] = FLAGS) -> str:
    """What names a cached build: every source and header, the flags, the compiler and the CPU."""
    source = b"".join(path.read_bytes() for path in (SOURCE, *EXTRA_SOURCES, *HEADERS))
    return hashlib.sha256(
        source + " ".join(flags).encode() + _compiler_version(cc).encode() + machine_signature().encode()
    ).hexdigest()[:20]


def _library_name(cc: str, key: str) -> str:
    """The cached build's file name for ``cc``'s target and a ``build_key``."""
    return f"appopt_kernels_{target_arch(cc)}_{key}.so"


def _default_roots() -> tuple[Path, ...]:
    return (cache_dir() / "native", Path(tempfile.gettempdir()) / f"appopt-native-{os.getuid()}")


def needs_build() -> bool:
    """Whether the first ``lib()`` of this process will compile the kernels (about 20 s of one core): they are
    wanted, not prebuilt, a compiler exists and no cached build matches this CPU, compiler and source. Callers that
    time things (a probe's budget) build first, on their own clock."""
    if _state["tried"] or not _wanted() or os.environ.get("APPOPT_NATIVE_LIB"):
        return False
    cc = _compiler()
    if cc is None:
        return False
    try:
        key = build_key(cc)
    except OSError:  # a source is missing: lib() reports it
        return False
    return not any((root / _library_name(cc, key)).is_file() for root in _default_roots())


def _build(cc: str, flags: tuple[str, ...] = FLAGS, roots: tuple[Path, ...] | None = None) -> Path:
    key = build_key(cc, flags)
    if roots is None:
        roots = _default_roots()
    for root in roots:
        target = root / _library_name(cc, key)
        if target.is_file():
            return target
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".so", dir=root)
            os.close(fd)
        except OSError:
            continue  # read-only cache: try the next location
        try:
            proc = subprocess.run(
                [cc, *flags, "-o", tmp, *map(str, (SOURCE, *EXTRA_SOURCES))],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if proc.returncode != 0:
                raise RuntimeError(f"{cc} failed: {proc.stderr.strip()[:500]}")
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return target
    raise RuntimeError("no writable cache directory for the compiled kernels")


def _address(fn: Any) -> int:
    address = ctypes.cast(fn, ctypes.c_void_p).value
    if address is None:
        raise RuntimeError("symbol without an address")
    return int(address)


class NativeLib:
    """The loaded library: one ``ctypes`` function per entry point, each taking an ``Args`` pointer."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.cdll = ctypes.CDLL(str(path))
        proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
        self.fn: dict[str, Any] = {}
        for name in ENTRY_POINTS:
            self.fn[name] = proto(_address(getattr(self.cdll, name)))
        self.cdll.ap_set_threads.argtypes = [ctypes.c_int]
        self.cdll.ap_hold.argtypes = [ctypes.c_int]
        self.run_begin = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int)(_address(self.cdll.ap_run_begin))
        self.run_end = ctypes.CFUNCTYPE(None, ctypes.c_int)(_address(self.cdll.ap_run_end))
        self.cdll.ap_get_threads.restype = ctypes.c_int
        self.cdll.ap_vector_width.restype = ctypes.c_int
        self.vector_width = int(self.cdll.ap_vector_width())

    def __getattr__(self, name: str) -> Any:
        fn = self.__dict__.get("fn", {}).get(f"ap_{name}")
        if fn is None:
            raise AttributeError(name)
        return fn


def _wanted() -> bool:
    if _state["enabled"] is not None:
        return bool(_state["enabled"])
    return os.environ.get("APPOPT_NATIVE", "1").strip().lower() not in ("0", "off", "false", "no")


_ACTIVE: list[NativeLib | None] = []  # [lib] once decided for the current enabled setting (the fast path)


def lib() -> NativeLib | None:
    """The compiled kernels, building them on first use; ``None`` when unavailable or disabled."""
    if _ACTIVE:
        return _ACTIVE[0]
    with _lock:
        if not _wanted():
            _ACTIVE[:] = [None]
            return None
        if not _state["tried"]:
            _state["lib"], _state["reason"] = _load()
            _state["tried"] = True
        _ACTIVE[:] = [_state["lib"]]
    loaded: NativeLib | None = _state["lib"]
    return loaded


def _load() -> tuple[NativeLib | None, str]:
    prebuilt = os.environ.get("APPOPT_NATIVE_LIB")
    if prebuilt:  # an image's kernels, cross-built for its platform: no compiler needed at run time
        try:
            loaded = NativeLib(Path(prebuilt))
        except Exception as exc:
            return None, f"APPOPT_NATIVE_LIB={prebuilt}: {type(exc).__name__}: {exc}"
        return loaded, f"loaded {loaded.path.name} (prebuilt)"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler found (set CC or install gcc)"
    missing = [path for path in (SOURCE, *EXTRA_SOURCES, *HEADERS) if not path.is_file()]
    if missing:
        return None, f"kernel source {missing[0]} is missing"
    try:
        loaded = NativeLib(_build(cc))
    except Exception as exc:  # any build or load problem: run on NumPy
        return None, f"{type(exc).__name__}: {exc}"
    return loaded, f"loaded {loaded.path.name}"


def build_variant(flags: tuple[str, ...], directory: Path) -> NativeLib:
    """Build and load the kernels with other compiler flags (e.g. a portable ``-march``), for tests of the
    code paths the local CPU would not take. Raises when there is no compiler or the build fails."""
    cc = _compiler()
    if cc is None:
        raise RuntimeError("no C compiler found")
    return NativeLib(_build(cc, flags, (directory,)))


#: Cross compilers by target architecture (Debian's gcc-<triplet> packages).
CROSS_COMPILERS = {"aarch64": "aarch64-linux-gnu-gcc", "x86_64": "x86_64-linux-gnu-gcc"}
#: Extra flags per CPU: A64FX has 512-bit SVE, so the 64-byte GCC vectors map onto one SVE register each.
_CPU_FLAGS = {"a64fx": ("-msve-vector-bits=512",)}


def target_arch(cc: str) -> str:
    """The architecture a compiler builds for, from its name (``aarch64-linux-gnu-gcc`` -> ``aarch64``);
    a plain ``cc``/``gcc`` builds for this machine."""
    name = os.path.basename(cc)
    return name.split("-linux-")[0] if "-linux-" in name else platform.machine()


def cross_flags(cpu: str = "", march: str = "") -> tuple[str, ...]:
    """:data:`FLAGS` for a chosen CPU (``-mcpu=a64fx``) or ISA (``-march=armv8.2-a+sve``), never ``-march=native``:
    cross-built code runs on another machine."""
    if bool(cpu) == bool(march):
        raise ValueError("give exactly one of cpu (e.g. 'a64fx', 'neoverse-n1') or march (e.g. 'armv8.2-a+sve')")
    chosen = (f"-mcpu={cpu}", *_CPU_FLAGS.get(cpu, ())) if cpu else (f"-march={march}",)
    return tuple(f for f in FLAGS if f != "-march=native") + chosen


def cross_build(arch: str, out: Path, cpu: str = "", march: str = "", cc: str | None = None) -> Path:
    """Build the kernels for another architecture (``arch`` e.g. ``aarch64``) and a chosen CPU or ISA into the
    file ``out``; the build is cached like the native one, under a key naming the target architecture.

    >>> cross_build("aarch64", Path("k.so"), cpu="a64fx")      # doctest: +SKIP
    PosixPath('k.so')
    """
    compiler = cc or CROSS_COMPILERS.get(arch)
    if compiler is None:
        raise RuntimeError(f"no cross compiler known for {arch!r}; known: {', '.join(sorted(CROSS_COMPILERS))}")
    if not shutil.which(compiler):
        raise RuntimeError(f"cross compiler {compiler} not found (Debian: gcc-{arch.replace('_', '-')}-linux-gnu)")
    built = _build(compiler, cross_flags(cpu, march), (cache_dir() / "native-cross",))
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(built, out)
    return out


def status() -> str:
    """Why the compiled kernels are or are not in use (one line)."""
    if not _wanted():
        return "disabled (APPOPT_NATIVE=0 or set_enabled(False))"
    lib()
    return str(_state["reason"])


def set_enabled(enabled: bool | None) -> None:
    """Force the compiled kernels on/off for this process (``None``: follow ``APPOPT_NATIVE``, read again now).
    For tests and benchmarks that compare both paths; ``APPOPT_NATIVE`` is otherwise read once, at first use."""
    _state["enabled"] = enabled
    _ACTIVE.clear()


def set_threads(threads: int) -> None:
    """Threads the compiled kernels use (the caller's thread included)."""
    loaded = lib()
    if loaded is not None:
        loaded.cdll.ap_set_threads(max(1, int(threads)))


def hold(on: bool) -> None:
    """Keep the pool's workers spinning for a model run (``True``), or let them sleep again (``False``)."""
    loaded = lib()
    if loaded is not None:
        loaded.cdll.ap_hold(1 if on else 0)


def get_threads() -> int:
    loaded = lib()
    return int(loaded.cdll.ap_get_threads()) if loaded is not None else 1


def addr(array: np.ndarray) -> int:
    """Address of an array's first element."""
    return int(array.ctypes.data)


class Args:
    """An int64 argument block for one C call, built once and patched per call where addresses change."""

    __slots__ = ("block", "keep", "ptr")

    def __init__(self, size: int) -> None:
        self.block = np.zeros(size, dtype=np.int64)
        self.ptr = int(self.block.ctypes.data)
        #: Arrays the block points into (kept alive as long as the block).
        self.keep: list[Any] = []

    @property
    def _as_parameter_(self) -> int:
        """What ctypes passes for an ``Args`` given to an entry point: the block's address. Pass the object, not
        ``.ptr`` of a temporary: the call then holds the block, and the arrays it keeps, until the kernel returns."""
        return self.ptr

    def __setitem__(self, index: int, value: int) -> None:
        self.block[index] = value

    @staticmethod
    def f32(value: float) -> int:
        """A float32's bit pattern, as the C side reads float parameters."""
        return int(np.array(value, dtype=np.float32).view(np.int32))

    def pin(self, array: np.ndarray) -> int:
        """Keep ``array`` alive with this block and return its address."""
        self.keep.append(array)
        return addr(array)
