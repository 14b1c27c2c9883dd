"""onnxruntime's CPU execution provider: the peer every other engine is compared with.

The engine itself (catalog framework ``onnxruntime``, compiler ``none``, the ``test`` extra, the image runner) is
``runtime.engine_onnxruntime``'s record; this module adds its benchmark backends, which need code of their own:
graph optimisation levels, library ``mlas``, dynamic int8 quantisation and the profiler's reorder time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx

from benchmarks.engines.base import (
    LAYOUT_BOUNDARY_OPS,
    Backend,
    BackendSkipped,
    EngineBackends,
    RouteInfo,
    Session,
    missing,
    version,
)


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
        return missing("onnxruntime")

    def versions(self) -> dict[str, str]:
        return {"onnxruntime": version("onnxruntime"), "onnx": onnx.__version__, "numpy": np.__version__}

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


BACKENDS = EngineBackends("onnxruntime", lambda: [OnnxRuntimeBackend("all"), OnnxRuntimeBackend("extended")])
