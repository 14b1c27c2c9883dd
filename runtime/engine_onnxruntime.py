"""onnxruntime as a runner engine (``--engine onnxruntime``): the image of an onnxruntime plan runs the ONNX file with
it. No build-stage compile: onnxruntime optimises the graph when the session starts.

Catalog: framework ``onnxruntime``, compiler ``none``; installed by the ``test`` extra (a core peer). Its benchmark
backends (optimisation levels, dynamic int8, the profiler's reorder time) are ``benchmarks.engines.onnxruntime``'s.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from runtime.engine_base import Engine, Signature, first_line, require
from runtime.errors import RuntimeModelError


class OnnxRuntimeRunner:
    """An onnxruntime session (CUDA when its provider is available, else CPU) behind the ``ModelRunner`` face."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None) -> None:
        ort = require("onnxruntime", "onnxruntime")
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        available = ort.get_available_providers()
        providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]
        try:
            self.session = ort.InferenceSession(str(path), options, providers=providers)
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph/NoSuchFile types
            raise RuntimeModelError(f"onnxruntime cannot load {str(path)!r}: {first_line(exc)}") from None
        signature = Signature.of_file(path)
        self.inputs = signature.inputs
        self.input_names = [i.name for i in self.session.get_inputs() if i.name in self.inputs]
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.providers: list[str] = list(self.session.get_providers())
        self.describe = ", ".join(self.providers)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        values = self.session.run(self.output_names, dict(feeds))
        return dict(zip(self.output_names, values, strict=True))


ENGINE = Engine(
    name="onnxruntime", runner=OnnxRuntimeRunner, order=10, framework="onnxruntime", compilers=("none",),
    pip=("onnxruntime",), extra="test", modules=("onnxruntime",),
)
