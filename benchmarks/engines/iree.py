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

import onnx

from benchmarks.engines.base import CompiledSession, EngineSpec, OnnxCompilerBackend, RouteInfo, refusal_is_a_skip


class IreeBackend(OnnxCompilerBackend):
    """IREE 3.x, llvm-cpu for the host CPU, ``threads`` task-executor workers."""

    name = "iree"
    route = RouteInfo("onnxruntime", compiler="iree", layout="NCHW")
    modules = ("iree.compiler", "iree.runtime")
    extra = "iree"
    dists = ("iree-base-compiler", "iree-base-runtime")

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> CompiledSession:
        from runtime.engine_iree import IreeSession, compile_model

        constant = {init.name for init in model.graph.initializer}
        input_names = [vi.name for vi in model.graph.input if vi.name not in constant]
        started = time.perf_counter()
        with refusal_is_a_skip():
            vmfb = compile_model(model)
            compile_ms = (time.perf_counter() - started) * 1e3
            session = IreeSession(vmfb, threads)
        return CompiledSession(lambda feeds: session.run([feeds[name] for name in input_names]), compile_ms)


ENGINE = EngineSpec(
    name="iree",
    framework="onnxruntime",
    compilers=("iree",),
    pip=IreeBackend.dists,
    extra="iree",
    image_engine="iree",
    backends=lambda: [IreeBackend()],
)
