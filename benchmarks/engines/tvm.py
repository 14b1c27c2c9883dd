"""Apache TVM (Relax), untuned: the ONNX model imported, compiled for this CPU by LLVM, run on the Relax VM.

Catalog: compiler ``tvm`` over framework ``onnxruntime`` (the route "ONNX model, compiled by TVM"), no library
(TVM generates its own kernels). Installed by the ``tvm`` extra; no image runner yet. Untuned TVM is far slower
than onnxruntime (the performance anchors: ResNet-18 1,889 ms against 34.5 ms); MetaSchedule tuning is not built
here. Every session keeps its compile time (``compile_ms``), which the runner records beside the latency.
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


def llvm_target(threads: int) -> Any:
    """The LLVM target for this CPU (``mcpu`` as LLVM detects it) with ``threads`` cores; 0.27 refuses strings."""
    import tvm
    from tvm.target import codegen

    return tvm.target.Target({"kind": "llvm", "mcpu": str(codegen.llvm_get_system_cpu()), "num-cores": threads})


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
        from tvm.relax.frontend.onnx import from_onnx

        constant = {init.name for init in model.graph.initializer}
        input_names = [vi.name for vi in model.graph.input if vi.name not in constant]
        started = time.perf_counter()
        try:
            module = from_onnx(model, keep_params_in_input=False)
            executable = tvm.compile(module, target=llvm_target(threads))
        except Exception as error:  # the importer raises OpNotImplemented/ValueError/TVMError… on what it cannot take
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendSkipped(f"tvm cannot compile the model: {type(error).__name__}: {first[:300]}") from None
        compile_ms = (time.perf_counter() - started) * 1e3
        configure = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
        if configure is not None:
            configure(0, threads)  # affinity mode 0 (big cores), this many worker threads
        return _TvmSession(relax.VirtualMachine(executable, tvm.cpu()), input_names, compile_ms)


ENGINE = EngineSpec(
    name="tvm",
    framework="onnxruntime",
    compilers=("tvm",),
    pip=("apache-tvm",),
    extra="tvm",
    image_engine=None,
    backends=lambda: [TvmBackend()],
)
