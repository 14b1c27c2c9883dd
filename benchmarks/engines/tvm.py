"""Apache TVM (Relax), untuned: the ONNX model imported, compiled for this CPU by LLVM, run on the Relax VM.

Catalog: compiler ``tvm`` over framework ``onnxruntime`` (the route "ONNX model, compiled by TVM"), no library
(TVM generates its own kernels). Installed by the ``tvm`` extra. The import and compile live in
``runtime.engine_tvm``, shared with the images: an image compiles the model to a shared library in its build stage
and runs it with ``python -m runtime run --engine tvm``. Untuned TVM is far slower than onnxruntime (the performance
anchors: ResNet-18 1,889 ms against 34.5 ms). Every session keeps its compile time (``compile_ms``), which the
runner records beside the latency.

``tvm-tuned`` (``benchmarks.engines.tvm_tuning``) is TVM after a MetaSchedule search with a trial budget: the
catalog's compiler ``tvm-tuned``, a route of its own (its rows never mix with the untuned ones), whose image tunes in
its build stage (``python -m runtime compile --engine tvm --trials N``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from benchmarks.engines.base import Backend, BackendSkipped, EngineSpec, RouteInfo, Session, missing, version


class _TvmSession:
    def __init__(self, vm: Any, input_names: list[str], compile_ms: float) -> None:
        self._vm = vm
        self._input_names = input_names
        self.compile_ms = compile_ms

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        import tvm

        result = self._vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(feeds[n])) for n in self._input_names))
        outputs = result if isinstance(result, (list, tuple)) or type(result).__name__ == "Array" else [result]
        return [np.asarray(out.numpy()) for out in outputs]


class TvmBackend(Backend):
    """TVM 0.27 Relax without tuning: ``from_onnx``, ``tvm.compile`` for the host's LLVM CPU, ``VirtualMachine``."""

    name = "tvm"
    route = RouteInfo("onnxruntime", compiler="tvm", layout="NCHW")
    records_error = True

    def unavailable_reason(self) -> str | None:
        return missing("tvm", extra="tvm")

    def versions(self) -> dict[str, str]:
        return {"apache-tvm": version("apache-tvm"), "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        import tvm
        from tvm import relax

        from runtime.engine_tvm import compile_model, set_threads
        from runtime.errors import RuntimeModelError

        constant = {init.name for init in model.graph.initializer}
        input_names = [vi.name for vi in model.graph.input if vi.name not in constant]
        started = time.perf_counter()
        try:
            executable = compile_model(model, threads)
        except RuntimeModelError as error:
            raise BackendSkipped(str(error)) from None
        compile_ms = (time.perf_counter() - started) * 1e3
        set_threads(threads)
        return _TvmSession(relax.VirtualMachine(executable, tvm.cpu()), input_names, compile_ms)


def _tuned_backend() -> Backend:
    from benchmarks.engines.tvm_tuning import TvmTunedBackend

    return TvmTunedBackend()


ENGINE = EngineSpec(
    name="tvm",
    framework="onnxruntime",
    compilers=("tvm", "tvm-tuned"),
    pip=("apache-tvm",),
    extra="tvm",
    image_engine="tvm",
    backends=lambda: [TvmBackend(), _tuned_backend()],
)
