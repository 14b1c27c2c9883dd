"""Inference backends behind one small interface, so the harness measures every engine the same way.

The interface lives in ``benchmarks.engines.base`` (re-exported here); engines come from ``benchmarks.engines``
(each runtime engine module's record, plus that package's own modules); our runtime, onnx's reference evaluator and
PyTorch eager stay here.

Example::

    >>> backend = get_backend("onnxruntime")
    >>> session = backend.prepare(model_proto, threads=2)   # doctest: +SKIP
    >>> outputs = session.run({"input": x})                  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from benchmarks.engines import all_engines
from benchmarks.engines.base import (
    LAYOUT_BOUNDARY_OPS,
    PRECISIONS,
    Backend,
    BackendSkipped,
    RouteInfo,
    Session,
    boundary_ms,
)
from benchmarks.engines.base import missing as _missing
from benchmarks.engines.base import version as _version
from benchmarks.engines.onnxruntime import OnnxRuntimeBackend

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
    engines = [backend for spec in all_engines() for backend in spec.backends()]
    backends: list[Backend] = [AppoptRuntimeBackend(), *engines, TorchBackend(), OnnxReferenceBackend()]
    return {b.name: b for b in backends}


def get_backend(name: str) -> Backend:
    """A backend by name; KeyError listing the known ones."""
    backends = all_backends()
    if name not in backends:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(backends)}")
    return backends[name]


__all__ = [
    "DEFAULT_BACKENDS",
    "LAYOUT_BOUNDARY_OPS",
    "PRECISIONS",
    "Backend",
    "BackendSkipped",
    "OnnxRuntimeBackend",
    "RouteInfo",
    "Session",
    "all_backends",
    "boundary_ms",
    "get_backend",
]
