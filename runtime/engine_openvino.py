"""OpenVINO's CPU plugin as a runner engine (``--engine openvino``), and its build-stage compile.

``compile_to_dir`` converts the ONNX model to OpenVINO IR (``model.xml`` + ``model.bin``) with ``ov.save_model``:
the conversion is done once, in the image's build stage. The device-specific compile (kernel selection for the CPU
the image runs on) happens when the runner starts, so the image stays portable across x86 CPUs.

On CPUs with AVX512-BF16 or AMX, OpenVINO runs bf16 unless told otherwise: ``compile_config`` always sets
``INFERENCE_PRECISION_HINT`` from the route's precision (the image's ``APPOPT_PRECISION``; fp32 by default), and bf16
is a benchmark precision of its own where the CPU has those instructions.

Catalog: compiler ``openvino`` over framework ``onnxruntime`` (the route "ONNX model, compiled by OpenVINO"), library
``onednn`` (the CPU plugin's kernels); installed by the ``openvino`` extra. The benchmark backend ``openvino``
compiles the model in-process (``compile_session``) and keeps its compile time (``compile_ms``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from runtime.engine_base import (
    Benchmark,
    Engine,
    Search,
    Signature,
    first_line,
    read_engine_dir,
    require,
    write_engine_dir,
)
from runtime.errors import RuntimeModelError

#: appopt precision -> OpenVINO's inference precision hint.
PRECISION_HINTS = {"fp32": "f32", "bf16": "bf16", "fp16": "f16"}
IR_FILE = "model.xml"


_CORE: list[Any] = []
_CORE_LOCK = threading.Lock()


def shared_core() -> Any:
    """The process's one ``openvino.Core``, made at first use and never released.

    OpenVINO's CPU plugin (2026.4) gives a thread its own signal stack when a Core first compiles there, and when that
    Core is destroyed puts back the stack it found and unmaps its own. Cores destroyed out of creation order (the
    garbage collector's order) leave the thread on an unmapped signal stack: the next signal with a Python handler
    (CPython installs them all on the alternate stack), e.g. a SIGALRM time limit, then kills the process with
    SIGSEGV before any handler, faulthandler's included, can run. One Core that is never destroyed avoids it (and
    OpenVINO recommends reusing one Core anyway: it caches the plugins).
    """
    ov = require("openvino", "openvino")
    with _CORE_LOCK:
        if not _CORE:
            _CORE.append(ov.Core())
        return _CORE[0]


def compile_config(threads: int | None, precision: str) -> dict[str, Any]:
    """The CPU plugin's settings: latency hint, the precision asked for (never the bf16 default), ``threads``."""
    if precision not in PRECISION_HINTS:
        raise RuntimeModelError(
            f"openvino runs precision {', '.join(PRECISION_HINTS)}, not {precision!r} (APPOPT_PRECISION)"
        )
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": PRECISION_HINTS[precision]}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    return config


def compile_to_dir(model_path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                   search: Search | None = None) -> dict[str, Any]:
    """Convert ``model_path`` to OpenVINO IR in ``out_dir`` (with ``engine.json`` and ``io.onnx``); OpenVINO has no
    tuning search (``search`` is refused before this is called)."""
    ov = require("openvino", "openvino")
    started = time.perf_counter()
    try:
        model = shared_core().read_model(str(model_path))
        ov.save_model(model, str(Path(out_dir) / IR_FILE), compress_to_fp16=False)  # the default halves weights
    except Exception as exc:  # OpenVINO raises RuntimeError/OpConversionFailure/… on models it cannot take
        raise RuntimeModelError(f"openvino cannot convert {str(model_path)!r}: {first_line(exc)}") from None
    seconds = time.perf_counter() - started
    return write_engine_dir(out_dir, "openvino", IR_FILE, Signature.of_file(model_path),
                            {"openvino": str(ov.__version__), "convert_s": round(seconds, 3)})


class OpenVinoRunner:
    """An OpenVINO CPU compiled model (from IR written by ``compile_to_dir``, or an ONNX file)."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None, precision: str | None = None) -> None:
        require("openvino", "openvino")  # before the directory's checks: an image without it says so first
        path = Path(path)
        if path.is_dir():
            artifact, signature = read_engine_dir(path, "openvino")
        else:
            artifact, signature = path, Signature.of_file(path)
        precision = precision or os.environ.get("APPOPT_PRECISION") or "fp32"
        config = compile_config(threads, precision)
        core = shared_core()
        try:
            self.compiled = core.compile_model(core.read_model(str(artifact)), "CPU", config)
        except Exception as exc:
            raise RuntimeModelError(f"openvino cannot compile {str(path)!r}: {first_line(exc)}") from None
        self._request = self.compiled.create_infer_request()
        self._outputs = list(self.compiled.outputs)
        self.inputs, self.input_names, self.output_names = (
            signature.inputs, signature.input_names, signature.output_names)
        if len(self._outputs) != len(self.output_names):
            raise RuntimeModelError(
                f"openvino compiled {len(self._outputs)} outputs where the model declares {self.output_names}")
        self.describe = f"CPU, {config['INFERENCE_PRECISION_HINT']}"

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        results = self._request.infer({name: np.ascontiguousarray(value) for name, value in feeds.items()})
        return {name: np.array(results[out], copy=True)
                for name, out in zip(self.output_names, self._outputs, strict=True)}


#: /proc/cpuinfo flags under which OpenVINO's CPU plugin runs bf16 natively.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_has_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU runs bf16 natively (AVX512-BF16 or AMX-BF16)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return bool(BF16_FLAGS & set(flags))


def benchmark_precisions() -> tuple[str, ...]:
    """fp32 (forced), and bf16 where the CPU has it."""
    return ("fp32", "bf16") if cpu_has_bf16() else ("fp32",)


#: OpenVINO's node type for a layout conversion: at a model's edges it turns NCHW feeds into the blocked layout its
#: kernels use and back (a one-kernel model pays it once per kernel, a whole model once).
REORDER = "Reorder"


class CompiledOpenVino:
    """A model compiled in this process (the benchmark's session): ``run`` returns outputs in graph order."""

    def __init__(self, compiled: Any, compile_ms: float, compile_again: Callable[[], Any] | None = None) -> None:
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._outputs = list(compiled.outputs)
        self.compile_ms = compile_ms
        self._profiled = compile_again

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        results = self._request.infer(dict(feeds))
        return [np.array(results[output], copy=True) for output in self._outputs]

    def boundary_ms(self, feeds: Mapping[str, np.ndarray], runs: int) -> float:
        """Reorder nodes' time by OpenVINO's own counters (a second, profiled compilation of the same model):
        the median over ``runs`` runs after a warm-up run."""
        if self._profiled is None:
            return 0.0
        request = self._profiled().create_infer_request()
        request.infer(dict(feeds))
        per_run = []
        for _ in range(max(1, runs)):
            request.infer(dict(feeds))
            per_run.append(
                sum(p.real_time.total_seconds() * 1e3 for p in request.get_profiling_info() if p.node_type == REORDER)
            )
        return float(np.median(per_run))


def compile_session(model: onnx.ModelProto, threads: int, precision: str) -> CompiledOpenVino:
    """``model`` compiled for this CPU at latency hint, ``threads`` inference threads and ``precision``."""
    config = compile_config(threads, precision)
    started = time.perf_counter()
    try:
        core = shared_core()  # never one Core per session: see shared_core
        compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU", config)
    except Exception as exc:  # OpenVINO raises RuntimeError/OpConversionFailure/… on models it cannot take
        raise RuntimeModelError(f"openvino cannot compile the model: {first_line(exc)}") from None
    compile_ms = (time.perf_counter() - started) * 1e3

    def profiled() -> Any:
        return core.compile_model(core.read_model(model.SerializeToString()), "CPU", {**config, "PERF_COUNT": True})

    return CompiledOpenVino(compiled, compile_ms, profiled)


ENGINE = Engine(
    name="openvino", runner=OpenVinoRunner, order=20, framework="onnxruntime", compilers=("openvino",),
    pip=("openvino",), extra="openvino", modules=("openvino",), compile=compile_to_dir,
    benchmark=Benchmark(backend="openvino", compiler="openvino", prepare=compile_session, library="onednn",
                        layout="NCHWc", precisions=benchmark_precisions),
)
