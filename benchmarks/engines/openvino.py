"""Intel OpenVINO's CPU plugin (the seeds' nGraph's successor), run directly on the ONNX model.

Catalog: compiler ``openvino`` over framework ``onnxruntime`` (the route "ONNX model, compiled by OpenVINO"), library
``onednn`` (the CPU plugin's kernels). Installed by the ``openvino`` extra; an image converts the model to IR in its
build stage and runs it with ``python -m runtime run --engine openvino`` (``runtime.engine_openvino``, which also
holds the plugin settings both use).

On CPUs with AVX512-BF16 or AMX, OpenVINO runs bf16 unless told otherwise, so the fp32 backend sets
``INFERENCE_PRECISION_HINT: f32``; bf16 is a precision of its own, offered where the CPU has those instructions.
Every session keeps its compile time (``compile_ms``), which the runner records beside the latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.engines.base import Backend, BackendSkipped, EngineSpec, RouteInfo, Session, missing, version

#: /proc/cpuinfo flags under which OpenVINO's CPU plugin runs bf16 natively.
BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_has_bf16(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU runs bf16 natively (AVX512-BF16 or AMX-BF16)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return bool(BF16_FLAGS & set(flags))


#: OpenVINO's node type for a layout conversion: at a model's edges it turns NCHW feeds into the blocked layout its
#: kernels use and back (a one-kernel model pays it once per kernel, a whole model once).
REORDER = "Reorder"


class _OpenVinoSession:
    def __init__(self, compiled: Any, compile_ms: float, compile_again: Callable[[], Any] | None = None) -> None:
        self._compiled = compiled
        self._request = compiled.create_infer_request()
        self._outputs = list(compiled.outputs)
        self.compile_ms = compile_ms
        self._profiled = compile_again

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        results = self._request.infer(dict(feeds))
        return [np.array(results[output], copy=True) for output in self._outputs]

    def boundary_ms(self, feeds: Mapping[str, np.ndarray], runs: int) -> float:
        """Reorder nodes' time by OpenVINO's own counters (a second, profiled compilation of the same model):
        the median over ``runs`` runs after a warm-up run."""
        if self._profiled is None:
            return 0.0
        request = self._profiled().create_infer_request()
        request.infer(dict(feeds))
        per_run = []
        for _ in range(max(1, runs)):
            request.infer(dict(feeds))
            per_run.append(
                sum(p.real_time.total_seconds() * 1e3 for p in request.get_profiling_info() if p.node_type == REORDER)
            )
        return float(np.median(per_run))


class OpenVinoBackend(Backend):
    """OpenVINO's CPU plugin at latency hint, ``threads`` inference threads, fp32 (forced) or bf16."""

    name = "openvino"
    route = RouteInfo("onnxruntime", compiler="openvino", library="onednn", layout="NCHWc")
    records_error = True

    def __init__(self) -> None:
        self.precisions = ("fp32", "bf16") if cpu_has_bf16() else ("fp32",)

    def unavailable_reason(self) -> str | None:
        return missing("openvino", extra="openvino")

    def versions(self) -> dict[str, str]:
        return {"openvino": version("openvino"), "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from runtime.engine_openvino import compile_config, shared_core

        config = compile_config(threads, precision)
        started = time.perf_counter()
        try:
            core = shared_core()  # never one Core per session: see shared_core
            compiled = core.compile_model(core.read_model(model.SerializeToString()), "CPU", config)
        except Exception as error:  # OpenVINO raises RuntimeError/OpConversionFailure/… on models it cannot take
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise BackendSkipped(f"openvino cannot compile the model: {first[:300]}") from None
        compile_ms = (time.perf_counter() - started) * 1e3

        def profiled() -> Any:
            return core.compile_model(core.read_model(model.SerializeToString()), "CPU", {**config, "PERF_COUNT": True})

        return _OpenVinoSession(compiled, compile_ms, profiled)


ENGINE = EngineSpec(
    name="openvino",
    framework="onnxruntime",
    compilers=("openvino",),
    pip=("openvino",),
    extra="openvino",
    image_engine="openvino",
    backends=lambda: [OpenVinoBackend()],
)
