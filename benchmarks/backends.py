"""Inference backends behind one small interface, so the harness measures every engine the same way.

A ``Backend`` says whether it can run here (``unavailable_reason``), which versions it uses, what route it stands for
in the planner's terms (framework, compiler, library, layout), and ``prepare``s a model into a ``Session`` whose
``run(feeds)`` returns the outputs in graph order. A backend that is not installed, or cannot run a given precision, is
reported as skipped: ``BackendSkipped`` carries the reason.

Example::

    >>> backend = get_backend("onnxruntime")
    >>> session = backend.prepare(model_proto, threads=2)   # doctest: +SKIP
    >>> outputs = session.run({"input": x})                  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.metadata
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import onnx

#: Precisions a caller may ask for; each backend lists the ones it really runs.
PRECISIONS = ("fp32", "fp16", "bf16", "int8")


class BackendSkipped(Exception):
    """The backend cannot run this request here (not installed, precision unsupported, op unsupported)."""


class Session(Protocol):
    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...


@dataclass(frozen=True)
class RouteInfo:
    """The planner's view of what a backend measures: catalog framework id, compiler, library and layout."""

    framework: str
    compiler: str = "none"
    library: str = ""
    layout: str = "NCHW"


class Backend(ABC):
    """One inference engine."""

    name: str
    route: RouteInfo
    precisions: tuple[str, ...] = ("fp32",)

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the backend can run here, else why not (shown as "skipped: ...")."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Library name -> version of what this backend runs on."""

    @abstractmethod
    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session: ...

    def prepare(self, model: onnx.ModelProto, *, threads: int = 1, precision: str = "fp32") -> Session:
        """Compile ``model`` for ``threads`` at ``precision``; BackendSkipped if it cannot."""
        reason = self.unavailable_reason()
        if reason:
            raise BackendSkipped(reason)
        if precision not in self.precisions:
            raise BackendSkipped(f"{self.name} runs {', '.join(self.precisions)}, not {precision}")
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        return self._prepare(model, threads, precision)


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


def _missing(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except ImportError as error:
        return f"{module} is not installed ({error})"
    return None


# --- onnxruntime ------------------------------------------------------------------------------------------------


#: Op types that only convert between a model's NCHW inputs/outputs and a backend's internal layout (ours:
#: NHWC; onnxruntime's level ``all``: blocked NCHWc).
LAYOUT_BOUNDARY_OPS = frozenset({"ToNhwc", "ToNchw", "ReorderInput", "ReorderOutput"})


def boundary_ms(session: Session, feeds: Mapping[str, np.ndarray], runs: int = 10) -> float:
    """Milliseconds per run the session spends at the model's inputs and outputs, by the backend's own profiler:
    converting layouts, and (ours) copying the feeds into its fixed buffers and the outputs out of its reused ones.
    0 when the backend does none of that or cannot profile.

    A one-kernel model pays these once per kernel, a whole model once: a kernel sweep subtracts them.
    """
    probe = getattr(session, "boundary_ms", None)
    return float(probe(feeds, runs)) if probe is not None else 0.0


class _OrtSession:
    def __init__(self, session: Any, data: bytes = b"", options: Any = None) -> None:
        self._session = session
        self._data = data
        self._options = options

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self._session.run(None, dict(feeds)))

    def boundary_ms(self, feeds: Mapping[str, np.ndarray], runs: int) -> float:
        """Reorder nodes' time from onnxruntime's profiler (a second, profiled session of the same model)."""
        import json
        import tempfile
        from pathlib import Path

        import onnxruntime as ort

        if self._options is None or self._options.graph_optimization_level != ort.GraphOptimizationLevel.ORT_ENABLE_ALL:
            return 0.0
        with tempfile.TemporaryDirectory() as tmp:
            self._options.enable_profiling = True
            self._options.profile_file_prefix = str(Path(tmp, "profile"))
            try:
                session = ort.InferenceSession(self._data, self._options, providers=["CPUExecutionProvider"])
            finally:
                self._options.enable_profiling = False
            for _ in range(runs + 1):
                session.run(None, dict(feeds))
            events = json.loads(Path(session.end_profiling()).read_text(encoding="utf-8"))
        per_run: dict[str, list[float]] = {}
        for event in events:
            is_kernel = event.get("cat") == "Node" and str(event.get("name", "")).endswith("_kernel_time")
            if is_kernel and event.get("args", {}).get("op_name") in LAYOUT_BOUNDARY_OPS:
                per_run.setdefault(event["name"], []).append(float(event["dur"]) / 1e3)
        # each reorder node ran runs + 1 times: drop the first (warm-up) run, take the median of the rest
        return float(sum(np.median(times[1:]) for times in per_run.values() if len(times) > 1))


class OnnxRuntimeBackend(Backend):
    """onnxruntime's CPU execution provider; ``level`` picks its graph optimisation level.

    Level ``all`` rewrites convolutions into the blocked NCHWc layout (MLAS kernels); ``extended`` keeps NCHW and
    only fuses. int8 is onnxruntime's dynamic quantisation of MatMul/Gemm weights.
    """

    precisions = ("fp32", "int8")

    def __init__(self, level: str = "all") -> None:
        self.level = level
        self.name = "onnxruntime" if level == "all" else f"onnxruntime-{level}"
        self.route = RouteInfo("onnxruntime", library="mlas", layout="NCHWc" if level == "all" else "NCHW")

    def unavailable_reason(self) -> str | None:
        return _missing("onnxruntime")

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": _version("onnxruntime"), "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.log_severity_level = 3
        options.graph_optimization_level = {
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        }[self.level]
        data = model.SerializeToString()
        if precision == "int8":
            try:
                data = _quantize_dynamic(data)
            except Exception as error:  # the quantiser raises ValueError/KeyError/… on graphs it cannot handle
                raise BackendSkipped(f"onnxruntime cannot quantise the model to int8: {error}") from None
        try:
            session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        except Exception as error:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented types
            raise BackendSkipped(f"onnxruntime cannot load the model: {str(error).splitlines()[0]}") from None
        return _OrtSession(session, data, options)


#: Quantised models by the fp32 model's digest: one model is quantised once per process, not once per thread count.
_QUANTIZED: dict[str, bytes] = {}


def _quantize_dynamic(data: bytes) -> bytes:
    import hashlib

    key = hashlib.sha256(data).hexdigest()
    if key not in _QUANTIZED:
        _QUANTIZED.clear()  # keep one model's weights at a time
        _QUANTIZED[key] = _quantize_dynamic_uncached(data)
    return _QUANTIZED[key]


def _quantize_dynamic_uncached(data: bytes) -> bytes:
    import tempfile
    from pathlib import Path

    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "fp32.onnx"), Path(tmp, "int8.onnx")
        src.write_bytes(data)
        quantize_dynamic(str(src), str(dst), weight_type=QuantType.QInt8)
        return dst.read_bytes()


# --- our runtime ------------------------------------------------------------------------------------------------


class _AppoptSession:
    def __init__(self, executable: Any) -> None:
        self._exe = executable

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self._exe.run(dict(feeds)).values())

    def boundary_ms(self, feeds: Mapping[str, np.ndarray], runs: int) -> float:
        """ToNhwc/ToNchw nodes' time and the copies at the graph's edges, from the runtime's own profiler (a view
        op's output materialised when copied out counts as its node's work, not as a boundary)."""
        with self._exe.profiling() as profile:
            for _ in range(runs):
                self._exe.run(dict(feeds))
        seconds = sum(n.seconds for n in profile.nodes.values() if n.op_type in LAYOUT_BOUNDARY_OPS)
        seconds += sum(profile.io_seconds.values())
        return seconds / max(profile.runs, 1) * 1e3


class AppoptRuntimeBackend(Backend):
    """appopt's own ONNX runtime (``runtime/``): graph passes plus NumPy/BLAS kernels."""

    name = "appopt-runtime"
    route = RouteInfo("appopt-runtime", library="openblas", layout="NCHW")

    def unavailable_reason(self) -> str | None:
        try:
            from runtime import compile_model  # noqa: F401
        except ImportError as error:
            return f"the appopt runtime is not importable ({error})"
        return None

    def versions(self) -> dict[str, str]:
        return {"appopt": _version("appopt") or "source", "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from runtime import compile_model
        from runtime.errors import RuntimeModelError

        try:
            return _AppoptSession(compile_model(model, threads=threads))
        except RuntimeModelError as error:
            raise BackendSkipped(f"appopt runtime cannot compile the model: {error}") from None


# --- onnx's reference evaluator -------------------------------------------------------------------------------


class _ReferenceSession:
    def __init__(self, evaluator: Any, threads: int) -> None:
        self._evaluator = evaluator
        self._threads = threads

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        from benchmarks.kernels import blas_threads

        with blas_threads(self._threads):
            return list(self._evaluator.run(None, dict(feeds)))


class OnnxReferenceBackend(Backend):
    """onnx's ReferenceEvaluator: slow, but the specification's own reading of every op (an accuracy yardstick)."""

    name = "onnx-reference"
    route = RouteInfo("onnx-reference", library="numpy")

    def unavailable_reason(self) -> str | None:
        return None

    def versions(self) -> dict[str, str]:
        return {"onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from onnx.reference import ReferenceEvaluator

        return _ReferenceSession(ReferenceEvaluator(model), threads)


# --- PyTorch ----------------------------------------------------------------------------------------------------


class TorchBackend(Backend):
    """PyTorch eager: the ONNX graph interpreted node by node with torch ops (``benchmarks.torch_eager``)."""

    name = "torch"
    route = RouteInfo("pytorch", library="mkl")

    def unavailable_reason(self) -> str | None:
        return _missing("torch")

    def versions(self) -> dict[str, str]:
        return {"torch": _version("torch"), "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from benchmarks.torch_eager import UnsupportedTorchOp, compile_torch

        try:
            return compile_torch(model, threads)
        except UnsupportedTorchOp as error:
            raise BackendSkipped(f"torch eager: {error}") from None


# --- registry ---------------------------------------------------------------------------------------------------

#: Backends measured when none is named, in report order.
DEFAULT_BACKENDS = ("appopt-runtime", "onnxruntime", "torch")


def all_backends() -> dict[str, Backend]:
    backends: list[Backend] = [
        AppoptRuntimeBackend(),
        OnnxRuntimeBackend("all"),
        OnnxRuntimeBackend("extended"),
        TorchBackend(),
        OnnxReferenceBackend(),
    ]
    return {b.name: b for b in backends}


def get_backend(name: str) -> Backend:
    """A backend by name; KeyError listing the known ones."""
    backends = all_backends()
    if name not in backends:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(backends)}")
    return backends[name]


__all__ = [
    "DEFAULT_BACKENDS",
    "PRECISIONS",
    "Backend",
    "BackendSkipped",
    "RouteInfo",
    "Session",
    "all_backends",
    "get_backend",
]
