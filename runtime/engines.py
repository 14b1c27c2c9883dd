"""Engines ``python -m runtime run`` can run a model with: this runtime, or onnxruntime for the plans that chose it.

An image built for the onnxruntime route carries this package too, so it runs the model the same way (inputs from
files or seeded random data, output summaries, latency) with ``--engine onnxruntime``. Each engine is a
``ModelRunner``: declared inputs, output names, ``run(feeds)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import onnx

from runtime.errors import RuntimeModelError
from runtime.ir import Value

ENGINES = ("appopt", "onnxruntime")


class ModelRunner(Protocol):
    input_names: list[str]
    inputs: dict[str, Value]
    output_names: list[str]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]: ...


class OnnxRuntimeRunner:
    """An onnxruntime session (CUDA when its provider is available, else CPU) behind the ``ModelRunner`` face."""

    def __init__(self, path: str | Path, threads: int | None = None) -> None:
        try:
            import onnxruntime as ort
        except ImportError:
            raise RuntimeModelError("--engine onnxruntime: the onnxruntime package is not installed") from None
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        available = ort.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/NoSuchFile types
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeModelError(f"onnxruntime cannot load {str(path)!r}: {first}") from None
        graph = onnx.load(str(path), load_external_data=False).graph
        constant = {init.name for init in graph.initializer}
        self.inputs = {vi.name: Value.from_type(vi.name, vi.type) for vi in graph.input if vi.name not in constant}
        self.input_names = [i.name for i in self.session.get_inputs() if i.name in self.inputs]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.providers: list[str] = list(self.session.get_providers())

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        values = self.session.run(self.output_names, dict(feeds))
        return dict(zip(self.output_names, values, strict=True))
