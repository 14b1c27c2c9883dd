"""PyTorch 2 with ``torch.compile`` (TorchInductor), beside the eager route, on the suite's own ONNX graphs.

The ONNX graph becomes torch code through the same interpreter the eager route measures (``benchmarks.torch_eager``:
one torch call per node, constant subgraphs folded into parameters), with shape-like constants read once as Python
ints so Dynamo traces it: ``torch.compile(fullgraph=True, dynamic=False)`` then hands one whole FX graph per input
shape to inductor, which fuses the pointwise ops into generated C++ and calls oneDNN/MKL for convolutions and GEMMs.
``fullgraph`` makes a graph break an error: a model Dynamo cannot trace whole is skipped with the reason, never
measured half eager. (onnx2torch was the other way in, but its Reshape calls ``torch.Size(tensor)``, which breaks
Dynamo.)

Catalog: framework ``pytorch``, compiler ``inductor``. Torch itself comes from the CPU wheel ``scripts/test``
installs (the default index's wheel is the CUDA build), not from an extra; inductor's CPU backend needs a C++
compiler on PATH. No image runner yet: the eager route has none either (an image of a PyTorch plan runs the
spec's own command). Each session's ``compile_ms`` is the first call at batch 1 (tracing plus inductor's C++ build,
with its caches off: a cold compile); another batch size recompiles during the harness's warm-up queries, outside
the timed ones, and its rows carry the batch-1 figure.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper

from benchmarks.engines.base import Backend, BackendSkipped, EngineSpec, RouteInfo, Session, missing, version


def example_feeds(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Zeros of each graph input's declared shape and dtype, symbolic dims as 1: the shapes compiled first."""
    constant = {init.name for init in model.graph.initializer}
    feeds: dict[str, np.ndarray] = {}
    for vi in model.graph.input:
        if vi.name in constant:
            continue
        tensor = vi.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tensor.shape.dim]
        feeds[vi.name] = np.zeros(shape, dtype=helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    return feeds


class TorchCompiledGraph:
    """The suite graph as torch code, compiled whole by ``torch.compile``; ``run(feeds)`` returns outputs in order."""

    def __init__(self, model: onnx.ModelProto, threads: int) -> None:
        import torch

        from benchmarks.torch_eager import TorchGraph

        self.torch = torch
        self.graph = TorchGraph(model, threads, static_shapes=True)
        # One process measures many models: Dynamo caches compiled frames per code object (this class's _forward)
        # and falls back to eager past its recompile limit. A fresh cache per session keeps every model compiled.
        torch.compiler.reset()
        import torch._inductor.config as inductor_config

        self._compiled = torch.compile(self._forward, fullgraph=True, dynamic=False)
        # compile_ms is a cold compile, what a job on a fresh machine pays: inductor's on-disk FX-graph and kernel
        # caches would otherwise make every compile after a model's first one nearly free
        with inductor_config.patch(force_disable_caches=True):
            started = time.perf_counter()
            self.run(example_feeds(model))
            self.compile_ms = (time.perf_counter() - started) * 1e3

    def _forward(self, *inputs: Any) -> tuple[Any, ...]:
        graph = self.graph
        env: dict[str, Any] = dict(graph.constants)
        for index, name in enumerate(graph.input_names):
            env[name] = inputs[index]
        for index, (fn, names, outputs) in enumerate(graph.steps):
            result = fn(*[env[name] if name else None for name in names])
            if isinstance(result, tuple):
                for position, output in enumerate(outputs[: len(result)]):
                    env[output] = result[position]
            else:
                env[outputs[0]] = result
            for name in graph.last_uses[index]:
                env.pop(name, None)
        return tuple(env[name] for name in graph.output_names)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        torch = self.torch
        tensors = [torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in self.graph.input_names]
        with torch.no_grad():
            outputs = self._compiled(*tensors)
        return [output.numpy() for output in outputs]


class TorchCompileBackend(Backend):
    """``torch.compile`` (inductor, whole graph, static shapes) of the ONNX graph's torch code."""

    name = "torch-compile"
    route = RouteInfo("pytorch", compiler="inductor", library="mkl")
    records_error = True  # inductor reorders reductions and fuses: outputs drift from eager's by rounding

    def unavailable_reason(self) -> str | None:
        reason = missing("torch")
        if reason:
            return reason
        # inductor's CPU backend writes C++ and builds it: it needs a compiler on PATH
        return None if shutil.which("g++") or shutil.which("c++") else "torch.compile: no C++ compiler on PATH"

    def versions(self) -> dict[str, str]:
        return {"torch": version("torch"), "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from benchmarks.torch_eager import UnsupportedTorchOp

        try:
            return TorchCompiledGraph(model, threads)
        except UnsupportedTorchOp as error:
            raise BackendSkipped(f"torch.compile: {error}") from None
        except Exception as error:  # Dynamo's Unsupported/graph breaks, inductor's lowering and C++ build errors
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise BackendSkipped(f"torch.compile cannot compile the model: {type(error).__name__}: {first[:300]}") \
                from None


ENGINE = EngineSpec(
    name="torch-compile",
    framework="pytorch",
    compilers=("inductor",),
    pip=("torch",),
    extra=None,
    image_engine=None,
    backends=lambda: [TorchCompileBackend()],
    order=50,
)
