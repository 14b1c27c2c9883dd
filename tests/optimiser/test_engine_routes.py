"""A compiler route's plan: its image compiles the model with the engine in the build stage and runs it with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.engines import all_engines, image_engine
from optimiser.cli import app

EXAMPLES = Path(__file__).parents[2] / "examples"

SPEC = """\
name: digits-{compiler}
application:
  type: inference
  model: {{onnx: digits_mlp.onnx}}
  framework: onnxruntime
target:
  cpu: {{arch: x86_64, model: local}}
  scheduler: none
container:
  formats: [docker]
optimisation:
  allow: {{compilers: [{compiler}], precisions: [fp32]}}
  deny: {{compilers: [none]}}
"""


def _deployment(tmp_path: Path, compiler: str) -> dict:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    (tmp_path / "app.yaml").write_text(SPEC.format(compiler=compiler))
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "app.yaml"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    plan = json.loads((tmp_path / "out" / "plan.json").read_text())
    assert (plan["choice"]["framework"], plan["choice"]["compiler"]) == ("onnxruntime", compiler)
    return json.loads((tmp_path / "out" / "deployment.json").read_text())


@pytest.mark.parametrize(("compiler", "wheels"), [("openvino", {"openvino"}),
                                                  ("tvm", {"apache-tvm", "apache-tvm-ffi", "ziglang"}),
                                                  ("iree", {"iree-base-compiler", "iree-base-runtime"})])
def test_a_compiler_routes_image_compiles_in_the_build_stage_and_runs_with_the_engine(
        tmp_path: Path, compiler: str, wheels: set[str]) -> None:
    dep = _deployment(tmp_path, compiler)
    assert dep["compile_argv"] == ["python3", "-m", "runtime", "compile", "/opt/app/model.onnx", "-o",
                                   "/opt/app/compiled", "--engine", compiler]
    assert dep["run_argv"][:7] == ["python3", "-m", "runtime", "run", "/opt/app/compiled", "--engine", compiler]
    assert dep["app_files"] == ["runtime"]  # the runner ships
    names = {p.split("==")[0] for p in dep["pip_packages"]}
    assert wheels | {"onnxruntime", "numpy", "onnx"} <= names
    dockerfile = (tmp_path / "out" / "Dockerfile").read_text()
    build_stage = dockerfile.split("AS final")[0]
    assert f"--engine {compiler}" in build_stage  # the compile runs in the build stage


def test_image_engines_come_from_the_engine_modules() -> None:
    assert image_engine("onnxruntime", "none") == "onnxruntime"
    assert image_engine("onnxruntime", "openvino") == "openvino"
    assert image_engine("onnxruntime", "tvm") == "tvm"
    assert image_engine("onnxruntime", "iree") == "iree"
    assert image_engine("onnxruntime", "tensorrt") is None and image_engine("pytorch", "none") is None
    assert {spec.image_engine for spec in all_engines()} >= {"onnxruntime", "openvino", "tvm", "iree"}
