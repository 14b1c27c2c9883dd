"""IREE (llvm-cpu): the ONNX model imported by IREE's ONNX importer, compiled ahead of time for this CPU, run on
IREE's VM with its task executor.

Catalog: compiler ``iree`` over framework ``onnxruntime`` (the route "ONNX model, compiled by IREE"), no library
(IREE generates its own kernels). Installed by the ``iree`` extra (``iree-base-compiler`` to compile,
``iree-base-runtime`` to run). The import and compile live in ``runtime.engine_iree``, shared with the images: an
image compiles the model to a ``.vmfb`` in its build stage and runs it with ``python -m runtime run --engine iree``.
Every session keeps its compile time (``compile_ms``: import plus ``iree-compile``), which the runner records beside
the latency; a model IREE cannot import, compile or load is skipped with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from benchmarks.engines.base import Backend, BackendSkipped, EngineSpec, RouteInfo, Session, missing, version


class _IreeSession:
    def __init__(self, session: Any, input_names: list[str], compile_ms: float) -> None:
        self._session = session
        self._input_names = input_names
        self.compile_ms = compile_ms

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        outputs: list[np.ndarray] = self._session.run([feeds[name] for name in self._input_names])
        return outputs


class IreeBackend(Backend):
    """IREE 3.x, llvm-cpu for the host CPU, ``threads`` task-executor workers."""

    name = "iree"
    route = RouteInfo("onnxruntime", compiler="iree", layout="NCHW")
    records_error = True

    def unavailable_reason(self) -> str | None:
        return missing("iree.compiler", extra="iree") or missing("iree.runtime", extra="iree")

    def versions(self) -> dict[str, str]:
        return {"iree-base-compiler": version("iree-base-compiler"), "iree-base-runtime": version("iree-base-runtime"),
                "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from runtime.engine_iree import IreeSession, compile_model
        from runtime.errors import RuntimeModelError

        constant = {init.name for init in model.graph.initializer}
        input_names = [vi.name for vi in model.graph.input if vi.name not in constant]
        started = time.perf_counter()
        try:
            vmfb = compile_model(model)
            compile_ms = (time.perf_counter() - started) * 1e3
            session = IreeSession(vmfb, threads)
        except RuntimeModelError as error:
            raise BackendSkipped(str(error)) from None
        return _IreeSession(session, input_names, compile_ms)


ENGINE = EngineSpec(
    name="iree",
    framework="onnxruntime",
    compilers=("iree",),
    pip=("iree-base-compiler", "iree-base-runtime"),
    extra="iree",
    image_engine="iree",
    backends=lambda: [IreeBackend()],
)
