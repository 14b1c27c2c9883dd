"""A compiler route's plan: its image compiles the model with the engine in the build stage and runs it with it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks.engines import all_engines, image_engine
from cli.main import app
from tests.compiler_routes import COMPILER_ROUTE_SPEC

EXAMPLES = Path(__file__).parents[2] / "examples"


def _deployment(tmp_path: Path, compiler: str, extra: str = "", spec: str | None = None) -> dict:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    (tmp_path / "app.yaml").write_text((spec or COMPILER_ROUTE_SPEC.format(compiler=compiler)) + extra)
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


def test_the_tuned_tvm_routes_image_searches_in_the_build_stage_with_the_catalogs_budget(tmp_path: Path) -> None:
    from optimiser.catalog import load_catalog

    dep = _deployment(tmp_path, "tvm-tuned")
    trials = load_catalog().compilers["tvm-tuned"].tuning.trials  # type: ignore[union-attr]
    assert dep["compile_argv"] == ["python3", "-m", "runtime", "compile", "/opt/app/model.onnx", "-o",
                                   "/opt/app/compiled", "--engine", "tvm", "--trials", str(trials), "--batch", "1"]
    assert dep["run_argv"][:7] == ["python3", "-m", "runtime", "run", "/opt/app/compiled", "--engine", "tvm"]
    pins = dict(p.split("==") for p in dep["pip_packages"] if "==" in p)
    assert pins["apache-tvm-ffi"] == "0.1.14.post0"  # 0.1.15.post2 segfaults when MetaSchedule saves a record
    assert {"xgboost-cpu", "psutil", "cloudpickle", "ziglang"} <= set(pins)  # the search's cost model and pools
    build_stage = (tmp_path / "out" / "Dockerfile").read_text().split("AS final")[0]
    assert f"--engine tvm --trials {trials} --batch 1" in build_stage


def test_the_specs_trial_budget_is_the_one_the_image_searches_with(tmp_path: Path) -> None:
    spec = COMPILER_ROUTE_SPEC.format(compiler="tvm-tuned").replace("  framework: onnxruntime",
                                                                    "  framework: onnxruntime\n  batch_size: 4")
    dep = _deployment(tmp_path, "tvm-tuned", extra="  tuning_trials: 8\n", spec=spec)
    assert dep["compile_argv"][-6:] == ["--engine", "tvm", "--trials", "8", "--batch", "4"]  # the plan's batch
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["choice"]["tuning_trials"] == 8


def test_the_xla_route_runs_the_onnx_file_with_jax_and_its_recipe_validates(tmp_path: Path) -> None:
    """XLA compiles at the first run, for the CPU it runs on: no build-stage compile, the runner is ``--engine jax``."""
    from builders.image_build import load_deployment
    from builders.validate import check_deployment
    from tests.builders.parsers import dockerfile_instructions

    dep = _deployment(tmp_path, "xla")
    assert dep["compile_argv"] is None
    assert dep["run_argv"] == ["python3", "-m", "runtime", "run", "/opt/app/model.onnx", "--engine", "jax",
                               "--random", "--repeat", "20"]
    assert dep["app_files"] == ["runtime"]
    names = {p.split("==")[0] for p in dep["pip_packages"]}
    assert {"jax", "jaxlib", "onnxruntime", "numpy", "onnx"} <= names
    assert "TF_XLA_FLAGS" not in dict(dep["env"])  # TensorFlow's auto-clustering flag is for the tensorflow route
    deployment = load_deployment(tmp_path / "out")
    assert deployment is not None
    check_deployment(deployment)  # raises RenderError listing every problem
    instructions = dockerfile_instructions((tmp_path / "out" / "Dockerfile").read_text())
    entrypoint = [args for keyword, args in instructions if keyword == "ENTRYPOINT"]
    assert len(entrypoint) == 1 and json.loads(entrypoint[0])[-5:] == ["--engine", "jax", "--random", "--repeat", "20"]


def test_image_engines_come_from_the_engine_modules() -> None:
    assert image_engine("onnxruntime", "none") == "onnxruntime"
    assert image_engine("onnxruntime", "openvino") == "openvino"
    assert image_engine("onnxruntime", "tvm") == "tvm" and image_engine("onnxruntime", "tvm-tuned") == "tvm"
    assert image_engine("onnxruntime", "xla") == "jax" and image_engine("tensorflow", "xla") is None
    assert image_engine("onnxruntime", "iree") == "iree"
    assert image_engine("onnxruntime", "tensorrt") is None and image_engine("pytorch", "none") is None
    assert {spec.image_engine for spec in all_engines()} >= {"onnxruntime", "openvino", "tvm", "iree"}
