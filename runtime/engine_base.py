"""What every engine module (``runtime/engine_<name>.py``) shares: the :class:`Engine` record it exports as
``ENGINE``, the runner face (``ModelRunner``), and the helpers for a compiled engine directory.

An engine module is the one place that knows its engine: the catalog ids of the routes it runs, the wheels and the
pyproject extra that install it, its image runner, its build-stage compile (if it has one) and, for benchmarks, an
in-process compile of an ``onnx.ModelProto`` (:class:`Benchmark`). ``runtime.engines`` finds the modules by scanning
and ``benchmarks.engines`` builds each engine's benchmark backend from the record, so adding an engine is its module
and its test. Engine packages are imported lazily, inside the functions: an image carries only the engine its route
needs, and reading the records imports none of them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import helper

from runtime.errors import RuntimeModelError
from runtime.ir import Value

#: What names a compiled engine directory, and the model's declared inputs/outputs inside it.
ENGINE_MANIFEST = "engine.json"
SIGNATURE = "io.onnx"


class ModelRunner(Protocol):
    input_names: list[str]
    inputs: dict[str, Value]
    output_names: list[str]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]: ...


class CompiledModel:
    """A model an engine compiled in this process, for benchmarks: ``run(feeds)`` returns the outputs in graph order,
    ``compile_ms`` is what the compile took (the benchmark records it beside the latency)."""

    def __init__(self, run: Callable[[Mapping[str, np.ndarray]], list[np.ndarray]], compile_ms: float) -> None:
        self._run = run
        self.compile_ms = compile_ms

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return self._run(feeds)


def fp32_only() -> tuple[str, ...]:
    return ("fp32",)


@dataclass(frozen=True)
class Benchmark:
    """How the benchmarks measure an engine in-process (``benchmarks.engines`` makes the ``Backend`` from it).

    ``prepare(model, threads, precision)`` compiles the model and returns an object with ``run(feeds) -> list``
    and ``compile_ms`` (and optionally ``boundary_ms(feeds, runs)``); a model the engine refuses raises
    ``RuntimeModelError``, which the benchmark records as a skip with that line.
    """

    #: The benchmark backend's name (``appopt bench run --backend NAME``).
    backend: str
    #: The catalog compiler id its rows carry.
    compiler: str
    prepare: Callable[[onnx.ModelProto, int, str], Any]
    #: The kernel library and layout the route's rows carry.
    library: str = ""
    layout: str = "NCHW"
    #: The precisions it runs on this machine (asked when the backend is made).
    precisions: Callable[[], tuple[str, ...]] = fp32_only
    #: Whether outputs drift from the reference by rounding (fused, reordered reductions): rows record the error.
    records_error: bool = True


@dataclass(frozen=True)
class Search:
    """A tuning search's budget (``--trials``) and the batch its static shapes fix (``--batch``)."""

    trials: int
    batch: int = 1


@dataclass(frozen=True)
class Engine:
    """One engine, as its module declares it (``ENGINE = Engine(...)``)."""

    #: The ``python -m runtime run --engine`` value.
    name: str
    #: ``runner(path, threads)``: a ``ModelRunner`` over an ONNX file or a directory ``compile`` wrote.
    runner: Callable[[str | os.PathLike[str], int | None], ModelRunner]
    #: Where lists and messages put it (lower first), then by name.
    order: int
    #: Catalog ids (optimiser/catalog/data): the framework and the compilers of the routes whose images run it
    #: (``none``: the framework alone).
    framework: str
    compilers: tuple[str, ...]
    #: The distributions that install it, and the pyproject extra that lists them (None: a core dependency).
    pip: tuple[str, ...]
    extra: str | None
    #: The Python modules it imports (one missing makes its benchmark a skip naming the extra).
    modules: tuple[str, ...]
    #: ``compile(model, out_dir, search)``: the build stage's artefact in ``out_dir`` (``python -m runtime compile
    #: --engine NAME``), returning ``engine.json``'s manifest; None when the engine compiles at run time.
    compile: Callable[[str | os.PathLike[str], str | os.PathLike[str], Search | None], dict[str, Any]] | None = None
    #: Whether ``compile`` may search schedules first with a trial budget (``--trials``).
    tunes: bool = False
    #: The benchmark's generic backend; None when ``benchmarks.engines`` has a module of its own for it.
    benchmark: Benchmark | None = None


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
