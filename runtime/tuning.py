"""Per-shape algorithm choice by measurement, remembered in a persistent cache (cuDNN's algorithm-selection idea).

A heavy op (enough FLOPs to matter) with known shapes times each candidate algorithm on random inputs of its real
shape, keeps the fastest and records it under a key made of the op, its shapes and attributes, the thread count,
and the machine (CPU signature plus the compiled kernels' build). Later compilations read the choice back
without measuring.

The cache lives at ``$APPOPT_TUNING_CACHE`` or ``<appopt cache dir>/tuning.json`` (see ``runtime.native.cache_dir``).
It is written atomically; an unreadable or corrupt file is ignored (and replaced on the next save), so a broken
cache can cost a re-measurement but never a failed run. ``APPOPT_TUNING`` selects the mode: ``on`` (default:
measure what the cache lacks), ``cache`` (use recorded choices, never measure), ``off`` (fixed heuristics).
"""

from __future__ import annotations

import functools
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from runtime import native

__all__ = ["Tuner", "cache_path", "conv_chunk", "conv_layout", "matmul_algorithm", "mode", "tuner"]

FORMAT = 1
#: Ops below this many floating-point operations keep the heuristic choice (not worth a measurement).
MIN_FLOPS = 20e6
#: Measuring stops after this many seconds per process; later ops use heuristics or the cache.
BUDGET_SECONDS = 20.0


def mode() -> str:
    value = os.environ.get("APPOPT_TUNING", "on").strip().lower()
    return value if value in ("on", "cache", "off") else "on"


def cache_path() -> Path:
    explicit = os.environ.get("APPOPT_TUNING_CACHE")
    return Path(explicit) if explicit else native.cache_dir() / "tuning.json"


def machine_key() -> str:
    lib = native.lib()
    build = lib.path.stem if lib is not None else "numpy"
    return f"{native.machine_signature()}:{build}"


class Tuner:
    """Choices recorded per machine; ``choose`` measures candidates once per key."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self.lock = threading.Lock()
        self.choices: dict[str, str] = {}
        self.spent = 0.0
        self.measured = 0
        self._loaded = False

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        self.choices = dict(self._read().get(machine_key(), {}))

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("machines"), dict):
            return {}
        machines = data["machines"]
        return {
            m: {str(k): str(v) for k, v in entries.items()}
            for m, entries in machines.items()
            if isinstance(entries, dict)
        }

    def _save(self) -> None:
        try:
            machines = self._read()
            machines.setdefault(machine_key(), {}).update(self.choices)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".tuning-", suffix=".json", dir=self.path.parent)
            with os.fdopen(fd, "w") as fh:
                json.dump({"format": FORMAT, "machines": machines}, fh, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a read-only cache only costs re-measuring next time

    def lookup(self, key: str) -> str | None:
        with self.lock:
            self._load()
            return self.choices.get(key)

    def choose(self, key: str, candidates: Mapping[str, Callable[[], Any]], default: str, margin: float = 1.1) -> str:
        """The fastest candidate for ``key`` (measured now unless recorded); ``default`` when not measuring.

        Another candidate replaces ``default`` only when it is faster by ``margin`` (noise must not flip a choice).
        """
        recorded = self.lookup(key)
        if recorded is not None and recorded in candidates:
            return recorded
        if mode() != "on" or len(candidates) < 2 or self.spent > BUDGET_SECONDS:
            return default
        started = time.perf_counter()
        times = measure_interleaved(candidates)
        best = default if default in times else min(times, key=times.__getitem__)
        for name, elapsed in times.items():
            if elapsed * margin < times.get(best, math.inf):
                best = name
        with self.lock:
            self.spent += time.perf_counter() - started
            self.measured += 1
            self.choices[key] = best
            self._save()
        return best


def measure_interleaved(candidates: Mapping[str, Callable[[], Any]], rounds: int = 7) -> dict[str, float]:
    """Minimum time of each candidate over ``rounds`` runs taken in turn (A, B, A, B...), after a warm-up, so
    that a burst of load from other processes hits every candidate alike; the minimum is the least noisy
    estimate on a busy machine. A failing candidate gets infinity; one 3x slower than the best stops early."""
    times: dict[str, float] = {}
    live: dict[str, Callable[[], Any]] = {}
    for name, fn in candidates.items():
        times[name] = math.inf
        try:
            fn()
        except Exception:
            continue
        live[name] = fn
    for round_ in range(rounds):
        for name, fn in list(live.items()):
            t0 = time.perf_counter()
            fn()
            times[name] = min(times[name], time.perf_counter() - t0)
        if round_ >= 1:
            best = min(times.values())
            for name in [n for n in live if times[n] > 3 * best]:
                del live[name]
    return times


_TUNER: Tuner | None = None
_TUNER_LOCK = threading.Lock()


def tuner() -> Tuner:
    global _TUNER
    with _TUNER_LOCK:
        if _TUNER is None or _TUNER.path != cache_path():
            _TUNER = Tuner()
    return _TUNER


def _static(shape: Sequence[Any] | None, batch_default: int = 1) -> tuple[int, ...] | None:
    """A shape with a symbolic leading (batch) dim replaced by ``batch_default``; None if others are unknown."""
    if shape is None:
        return None
    dims = list(shape)
    if dims and not isinstance(dims[0], int):
        dims[0] = batch_default
    if not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return tuple(int(d) for d in dims)


# -- the decisions ---------------------------------------------------------------------------------------------
def conv_chunk(kernel: Any, lib: native.NativeLib, w: np.ndarray, b: np.ndarray | None, x_shape: Any) -> int | None:
    """Task size (output pixels per task) of an NHWC convolution; ``None`` keeps the built-in heuristic."""
    from runtime.native import ops

    shape = _static(x_shape)
    if shape is None or len(shape) != 4 or (kernel.group == shape[3] and kernel.group > 1):
        return None  # depthwise kernels have no task-size knob
    probe = ops.NhwcConv2d(lib, w, b, kernel.group, kernel.strides, kernel.dilations, kernel.pads, kernel.epilogue)
    out_shape = probe.output_shape(shape)
    flops = 2.0 * math.prod(out_shape) * w.shape[1] * w.shape[2] * w.shape[3]
    if flops < MIN_FLOPS or mode() == "off":
        return None
    block = probe.geometry(shape)[0].block
    npix = int(block[ops.CV_OH]) * int(block[ops.CV_OW])
    default = int(block[ops.CV_CHUNK])
    options = sorted({default, min(npix, 48), min(npix, 192), npix} - {0})
    if len(options) < 2:
        return None
    key = "|".join(
        [
            "NhwcConv.chunk",
            f"x{shape}",
            f"w{tuple(w.shape)}",
            f"g{kernel.group}",
            f"s{tuple(kernel.strides)}",
            f"d{tuple(kernel.dilations)}",
            f"p{tuple(kernel.pads)}",
            f"t{native.get_threads()}",
        ]
    )
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(np.float32)
    out = np.empty(out_shape, dtype=np.float32)
    candidates: dict[str, Callable[[], Any]] = {}
    for chunk in options:
        conv = ops.NhwcConv2d(
            lib, w, b, kernel.group, kernel.strides, kernel.dilations, kernel.pads, kernel.epilogue, chunk
        )
        candidates[str(chunk)] = functools.partial(conv, x, None, out)
    return int(tuner().choose(key, candidates, str(default)))


def matmul_algorithm(kernel: Any, lib: native.NativeLib, b: np.ndarray, bias: np.ndarray | None, a_shape: Any) -> str:
    """``packed`` (compiled kernel over the pre-packed constant operand) or ``blas`` (NumPy's matmul)."""
    from runtime.native import ops

    shape = _static(a_shape)
    if shape is None or len(shape) < 2 or mode() == "off":
        return "packed"
    k, n = (b.shape[1], b.shape[0]) if kernel.trans_b else b.shape
    rows = math.prod(shape[:-1])
    if kernel.trans_a or shape[-1] != k or 2.0 * rows * k * n < MIN_FLOPS:
        return "packed"
    key = f"FusedMatMul|rows{rows}|k{k}|n{n}|tb{int(kernel.trans_b)}|t{native.get_threads()}"
    rng = np.random.default_rng(0)
    a = rng.standard_normal((rows, k)).astype(np.float32)
    packed = ops.PackedMatMul(lib, b.T if kernel.trans_b else b, bias, kernel.epilogue)
    out = np.empty((rows, n), dtype=np.float32)

    def blas() -> Any:
        return kernel.compute_numpy(a, b, bias)

    return tuner().choose(key, {"packed": lambda: packed(a, out=out), "blas": blas}, "packed")


def conv_layout(node: Any, pads: Sequence[int], w: np.ndarray, x_shape: Any) -> str:
    """``nhwc`` (compiled direct convolution) or ``nchw`` (im2col + BLAS in NumPy) for one convolution."""
    from runtime.kernels.conv import conv_nd
    from runtime.native import ops

    lib = native.lib()
    shape = _static(x_shape)
    if lib is None:
        return "nchw"
    if shape is None or len(shape) != 4 or mode() == "off":
        return "nhwc"
    group = int(node.attrs.get("group", 1))
    strides = [int(s) for s in node.attrs.get("strides") or [1, 1]]
    dilations = [int(d) for d in node.attrs.get("dilations") or [1, 1]]
    conv = ops.NhwcConv2d(lib, w, None, group, strides, dilations, pads, ops.Epilogue())
    n, c, h, wd = shape
    out_shape = conv.output_shape((n, h, wd, c))
    flops = 2.0 * math.prod(out_shape) * w.shape[1] * w.shape[2] * w.shape[3]
    if flops < MIN_FLOPS:
        return "nhwc"
    key = f"Conv.layout|x{shape}|w{tuple(w.shape)}|g{group}|s{tuple(strides)}|d{tuple(dilations)}|p{tuple(pads)}"
    key += f"|t{native.get_threads()}"
    rng = np.random.default_rng(0)
    x_nchw = rng.standard_normal(shape).astype(np.float32)
    x_nhwc = np.ascontiguousarray(x_nchw.transpose(0, 2, 3, 1))
    out = np.empty(out_shape, dtype=np.float32)
    onnx_pads = [pads[0], pads[1], pads[2], pads[3]]
    candidates = {
        "nhwc": lambda: conv(x_nhwc, out=out),
        "nchw": lambda: _nchw_epilogue(conv_nd(x_nchw, w, None, onnx_pads, strides, dilations, group), node),
    }
    return tuner().choose(key, candidates, "nhwc", margin=1.3)


def _nchw_epilogue(y: np.ndarray, node: Any) -> np.ndarray:
    """The activation an NCHW FusedConv applies after the product (part of that candidate's cost)."""
    activation = str(node.attrs.get("activation", ""))
    if activation == "Relu":
        return np.maximum(y, np.float32(0))
    if activation == "Clip":
        lo, hi = np.float32(node.attrs.get("act_lo", 0.0)), np.float32(node.attrs.get("act_hi", 0.0))
        return np.minimum(np.maximum(y, lo), hi)
    from runtime.native.abi import apply_activation

    return apply_activation(y, activation, float(node.attrs.get("act_lo", 0.0)), float(node.attrs.get("act_hi", 0.0)))
