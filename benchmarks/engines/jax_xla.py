"""JAX on XLA: the suite's ONNX graphs translated to JAX code of our own (``runtime.engine_jax``) and compiled whole by
``jax.jit``, one XLA executable per input shape.

Catalog: compiler ``xla`` over framework ``onnxruntime`` (the route "ONNX model, compiled by XLA"), no library (XLA
generates its own kernels and calls Eigen for convolutions and matrix products). Installed by the ``jax`` extra.
An image runs the ONNX file with ``python -m runtime run MODEL --engine jax``: there is no build-stage compile, as
XLA compiles at the first run for the CPU it runs on.

Every session keeps its compile time (``compile_ms``: tracing, lowering and XLA's compile at batch 1, cold: jax's
persistent compilation cache is off unless configured); another batch size compiles during the harness's warm-up
queries. Threads: XLA's CPU pool has a thread per CPU of the process; ``threads=N`` confines its threads to N of
those CPUs (``runtime.engine_jax.pin_pool``), so more threads than CPUs is skipped with the reason.
"""

from __future__ import annotations

import onnx

from benchmarks.engines.base import CompiledSession, EngineSpec, OnnxCompilerBackend, RouteInfo, refusal_is_a_skip
from benchmarks.engines.torch_compile import example_feeds


class JaxXlaBackend(OnnxCompilerBackend):
    """``jax.jit`` (XLA CPU) of the ONNX graph's JAX translation, static shapes, fp32; XLA fuses and reorders
    reductions, so outputs drift from the reference by rounding."""

    name = "jax-xla"
    route = RouteInfo("onnxruntime", compiler="xla", layout="NCHW")
    modules = ("jax",)
    extra = "jax"
    dists = ("jax", "jaxlib")

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> CompiledSession:
        from runtime.engine_jax import JaxGraph

        with refusal_is_a_skip():
            graph = JaxGraph(model, threads)
            graph.run_list(example_feeds(model))  # the cold compile at the declared shapes (batch 1)
        return CompiledSession(graph.run_list, float(graph.compile_ms or 0.0))


ENGINE = EngineSpec(
    name="jax-xla",
    framework="onnxruntime",
    compilers=("xla",),
    pip=JaxXlaBackend.dists,
    extra="jax",
    image_engine="jax",
    backends=lambda: [JaxXlaBackend()],
)
