"""Engines ``python -m runtime run`` can run a model with: this runtime, onnxruntime, and the graph compilers
OpenVINO, TVM, IREE and XLA (through JAX), for the plans that chose them.

An image built for another engine's route carries this package too, so it runs the model the same way (inputs from
files or seeded random data, output summaries, latency) with ``--engine X``. Each engine is a ``ModelRunner``:
declared inputs, output names, ``run(feeds)``. The compiling engines (``COMPILED_ENGINES``) also turn an ONNX file
into a directory in an image's build stage (``python -m runtime compile --engine X``): the engine's own artefact, an
``engine.json`` naming it, and ``io.onnx``, the model's inputs and outputs without its nodes or weights, so the
final stage declares them without the ONNX file.

Every engine package is imported lazily: an image carries only the engine its route needs.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import onnx
from onnx import helper

from runtime.errors import RuntimeModelError
from runtime.ir import Value

#: The other engines' runners, imported only when chosen: ``engine -> (module, class)``.
_RUNNERS = {
    "openvino": ("runtime.engine_openvino", "OpenVinoRunner"),
    "tvm": ("runtime.engine_tvm", "TvmRunner"),
    "iree": ("runtime.engine_iree", "IreeRunner"),
    "jax": ("runtime.engine_jax", "JaxRunner"),
}
ENGINES = ("appopt", "onnxruntime", *_RUNNERS)
#: Engines whose ``compile`` writes their own artefact (OpenVINO IR, a TVM shared library, an IREE ``.vmfb``) in the
#: build stage.
COMPILED_ENGINES = ("openvino", "tvm", "iree")
#: Engines whose ``compile`` may search schedules first with a trial budget (``--trials``: TVM's MetaSchedule).
TUNING_ENGINES = ("tvm",)
#: What names a compiled engine directory, and the model's declared inputs/outputs inside it.
ENGINE_MANIFEST = "engine.json"
SIGNATURE = "io.onnx"


class ModelRunner(Protocol):
    input_names: list[str]
    inputs: dict[str, Value]
    output_names: list[str]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]: ...


def read_model(path: str | os.PathLike[str], load_external_data: bool = True) -> onnx.ModelProto:
    """The ONNX model at ``path``; RuntimeModelError in one line when it is not one."""
    try:
        return onnx.load(str(path), load_external_data=load_external_data)
    except Exception as exc:  # onnx raises DecodeError/OSError/… on what is not a model
        raise RuntimeModelError(f"cannot read the ONNX model {str(path)!r}: {exc}") from None


class Signature:
    """A model's graph inputs (without initializers) and outputs, as a runner declares them."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        constant = {init.name for init in graph.initializer}
        self.graph_inputs = [vi for vi in graph.input if vi.name not in constant]
        self.graph_outputs = list(graph.output)
        self.inputs = {vi.name: Value.from_type(vi.name, vi.type) for vi in self.graph_inputs}
        self.input_names = [vi.name for vi in self.graph_inputs]
        self.output_names = [vi.name for vi in self.graph_outputs]

    @classmethod
    def of_file(cls, path: str | os.PathLike[str]) -> Signature:
        return cls(read_model(path, load_external_data=False).graph)

    def save(self, path: Path) -> None:
        """``io.onnx``: the inputs and outputs alone (no nodes, no weights)."""
        graph = helper.make_graph([], "signature", self.graph_inputs, self.graph_outputs)
        onnx.save(helper.make_model(graph), str(path))


def write_engine_dir(out_dir: str | os.PathLike[str], engine: str, artifact: str, signature: Signature,
                     extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write ``engine.json`` and ``io.onnx`` beside an engine's ``artifact`` in ``out_dir``; returns the manifest."""
    out = Path(out_dir)
    signature.save(out / SIGNATURE)
    manifest = {"engine": engine, "artifact": artifact, "inputs": signature.input_names,
                "outputs": signature.output_names, **(extra or {})}
    (out / ENGINE_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def read_engine_dir(path: Path, engine: str) -> tuple[Path, Signature]:
    """(the artefact, the signature) of a directory written by ``compile --engine ENGINE``."""
    try:
        manifest = json.loads((path / ENGINE_MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise RuntimeModelError(
            f"{str(path)!r} is not a directory written by `python -m runtime compile --engine {engine}` "
            f"(no readable {ENGINE_MANIFEST})"
        ) from None
    if manifest.get("engine") != engine:
        raise RuntimeModelError(f"{str(path)!r} was compiled for engine {manifest.get('engine')!r}, not {engine!r}")
    return path / str(manifest["artifact"]), Signature.of_file(path / SIGNATURE)


def first_line(exc: BaseException) -> str:
    """An engine's exception as one short line (they raise multi-line C++ traces)."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def require(module: str, engine: str) -> Any:
    """Import ``module`` for ``--engine ENGINE``, or a one-line error saying it is not installed."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise RuntimeModelError(f"--engine {engine}: the {module} package is not installed") from None


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

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        values = self.session.run(self.output_names, dict(feeds))
        return dict(zip(self.output_names, values, strict=True))


def open_runner(engine: str, model: str | os.PathLike[str], threads: int | None) -> tuple[ModelRunner, str]:
    """A runner of ``engine`` (not ``appopt``) for an ONNX file or a compiled directory, and how to name it."""
    if engine == "onnxruntime":
        runner = OnnxRuntimeRunner(model, threads)
        return runner, f"onnxruntime ({', '.join(runner.providers)})"
    if engine not in _RUNNERS:
        raise RuntimeModelError(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    import importlib

    module, name = _RUNNERS[engine]
    other = getattr(importlib.import_module(module), name)(model, threads)
    return other, f"{engine} ({other.describe})"


def compile_for_engine(engine: str, model: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                       trials: int | None = None) -> dict[str, Any]:
    """``python -m runtime compile --engine ENGINE``: the engine's artefact for ``model`` in ``out_dir`` (``trials``:
    the tuning search's budget, for engines that search: ``tvm``)."""
    if engine not in COMPILED_ENGINES:
        raise RuntimeModelError(
            f"--engine {engine!r} has no compile step; compiling engines: appopt, {', '.join(COMPILED_ENGINES)}"
        )
    if trials is not None and engine not in TUNING_ENGINES:
        raise RuntimeModelError(f"--trials: --engine {engine} has no tuning search; engines that search: "
                                f"{', '.join(TUNING_ENGINES)}")
    if not Path(model).is_file():
        raise RuntimeModelError(f"model {str(model)!r} does not exist")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    if engine == "openvino":
        from runtime.engine_openvino import compile_to_dir as compile_openvino

        return compile_openvino(model, out_dir)
    if engine == "iree":
        from runtime.engine_iree import compile_to_dir as compile_iree

        return compile_iree(model, out_dir)
    from runtime.engine_tvm import compile_to_dir as compile_tvm

    return compile_tvm(model, out_dir, trials)
