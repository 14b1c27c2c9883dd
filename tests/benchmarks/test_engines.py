"""Engines: every engine's spec names real catalog ids, a real extra and a real image runner; and an engine is one
module: a throwaway ``runtime/engine_<name>.py`` dropped into the package is found with no other edit, and runs in
``python -m runtime`` (compile and run), in an image's plan and as a benchmark backend."""

from __future__ import annotations

import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import runtime
from benchmarks.backends import BackendSkipped, all_backends, get_backend
from benchmarks.engines import all_engines, image_engine, rescan
from optimiser.catalog import load_catalog
from runtime.__main__ import main as runtime_main
from runtime.engines import compiled_engines, engine_names, open_runner, tuning_engines
from tests.benchmarks.compiled_backends import mlp_row, unrunnable_model
from tests.drop_in import dropped_module

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "digits_mlp.onnx"


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize("spec", all_engines(), ids=lambda spec: spec.name)
def test_engine_spec_names_catalog_ids_extra_and_image_runner(spec):
    catalog = load_catalog()
    assert spec.framework in catalog.frameworks
    for compiler in spec.compilers:
        assert compiler == "none" or compiler in catalog.compilers
    if spec.extra is not None:
        extra = _extras()[spec.extra]
        assert all(any(req.startswith(pip) for req in extra) for pip in spec.pip), (spec.pip, extra)
    assert spec.image_engine is None or spec.image_engine in engine_names()


@pytest.mark.parametrize("spec", all_engines(), ids=lambda spec: spec.name)
def test_engine_backends_are_registered_with_the_spec_route(spec):
    registry = all_backends()
    backends = spec.backends()
    assert backends
    for backend in backends:
        assert registry[backend.name].route == backend.route
        assert backend.route.framework == spec.framework
        assert backend.route.compiler in spec.compilers


def test_the_scans_find_every_engine_once_in_the_declared_order():
    assert engine_names() == ("appopt", "onnxruntime", "openvino", "tvm", "iree", "jax")
    assert (compiled_engines(), tuning_engines()) == (("openvino", "tvm", "iree"), ("tvm",))
    assert [spec.name for spec in all_engines()] == ["onnxruntime", "openvino", "tvm", "iree", "torch-compile", "jax"]
    engines = [name for name in all_backends() if name not in ("appopt-runtime", "torch", "onnx-reference")]
    assert engines == ["onnxruntime", "onnxruntime-extended", "openvino", "tvm", "tvm-tuned", "iree", "torch-compile",
                       "jax-xla"]


#: A whole engine module as a newcomer writes it: onnx's reference evaluator as an engine with a build-stage
#: "compile" (the model copied into the directory) and a benchmark backend.
DROPPED_ENGINE = textwrap.dedent('''
    from __future__ import annotations

    import os
    import time
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Any

    import onnx

    from runtime.engine_base import (Benchmark, CompiledModel, Engine, Signature, read_engine_dir, read_model,
                                     require, write_engine_dir)
    from runtime.errors import RuntimeModelError


    class ReferenceRunner:
        def __init__(self, path: str | os.PathLike[str], threads: int | None = None) -> None:
            path = Path(path)
            artifact, signature = read_engine_dir(path, "toyref") if path.is_dir() else (path, Signature.of_file(path))
            self._evaluator = require("onnx.reference", "toyref").ReferenceEvaluator(read_model(artifact))
            self.inputs, self.input_names = signature.inputs, signature.input_names
            self.output_names = signature.output_names
            self.describe = "onnx's reference evaluator"

        def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
            return dict(zip(self.output_names, self._evaluator.run(None, dict(feeds)), strict=True))


    def compile_to_dir(model_path, out_dir, trials=None) -> dict[str, Any]:
        model = read_model(model_path)
        onnx.save(model, str(Path(out_dir) / "model.onnx"))
        return write_engine_dir(out_dir, "toyref", "model.onnx", Signature(model.graph))


    def compile_session(model: onnx.ModelProto, threads: int, precision: str) -> CompiledModel:
        from onnx.reference import ReferenceEvaluator

        unknown = [node.op_type for node in model.graph.node if node.domain not in ("", "ai.onnx")]
        if unknown:
            raise RuntimeModelError(f"toyref cannot compile the model: no op {unknown[0]}")
        started = time.perf_counter()
        evaluator = ReferenceEvaluator(model)
        return CompiledModel(lambda feeds: list(evaluator.run(None, dict(feeds))),
                             (time.perf_counter() - started) * 1e3)


    ENGINE = Engine(
        name="toyref", runner=ReferenceRunner, order=70, framework="onnxruntime", compilers=("toyref",),
        pip=("onnx",), extra=None, modules=("onnx.reference",), compile=compile_to_dir,
        benchmark=Benchmark(backend="toyref", compiler="toyref", prepare=compile_session, library="numpy"),
    )
''')


@pytest.fixture
def dropped_engine(tmp_path: Path) -> Iterator[str]:
    """``runtime/engine_toyref.py`` (in a second directory of the package's path), scanned afresh."""
    with dropped_module(runtime, "engine_toyref", DROPPED_ENGINE, tmp_path / "pkg", rescan):
        yield "toyref"


def test_an_engine_module_dropped_into_the_runtime_is_found_with_no_other_edit(
        dropped_engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert engine_names()[-1] == "toyref" and compiled_engines()[-1] == "toyref"
    assert image_engine("onnxruntime", "toyref") == "toyref"
    # the image's two commands: compile in the build stage, run in the final one
    assert runtime_main(["compile", str(MLP), "-o", str(tmp_path / "c"), "--engine", "toyref"]) == 0
    assert runtime_main(["run", str(tmp_path / "c"), "--engine", "toyref", "--random"]) == 0
    assert "engine: toyref (onnx's reference evaluator)" in capsys.readouterr().out
    runner, _ = open_runner("toyref", tmp_path / "c", 1)
    ours, peer = runner.run({"input": np.ones((1, 64), np.float32)}), open_runner("onnxruntime", MLP, 1)[0]
    want = peer.run({"input": np.ones((1, 64), np.float32)})
    np.testing.assert_allclose(ours["probabilities"], want["probabilities"], rtol=1e-5, atol=1e-6)
    # the benchmark backend, made from the module's record: its route, a row and a skip
    backend = get_backend("toyref")
    assert (backend.route.framework, backend.route.compiler, backend.route.library) == ("onnxruntime", "toyref",
                                                                                       "numpy")
    assert backend.versions()["onnx"] and [s.name for s in all_engines()][-1] == "toyref"
    mlp_row("toyref", "onnxruntime", "toyref")
    with pytest.raises(BackendSkipped, match=r"^toyref cannot compile the model: no op NoSuchOp"):
        backend.prepare(unrunnable_model())


def test_a_dropped_engine_leaves_the_registries_once_it_is_gone() -> None:
    assert "toyref" not in engine_names() and "toyref" not in all_backends()
