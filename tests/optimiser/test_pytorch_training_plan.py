"""A PyTorch training plan for an ONNX model, with no command: its image trains the model on the spec's data with
``python -m runtime train --engine torch`` (``torch-inductor`` on the torch.compile route; the runtime's sources ship
as the trainer), not a bare python3."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from tests.runtime.training.test_runtime_train_cli import _separable_npz

EXAMPLES = Path(__file__).parents[2] / "examples"

SPEC = """\
name: digits-torch-train
application:
  type: training
  model: {{onnx: digits_mlp.onnx}}
  batch_size: 16
  framework: {framework}
  data: {{path: data.npz, epochs: 2}}
{command}target:
  cpu: {{arch: x86_64, model: local}}
  scheduler: none
container:
  formats: [docker]
"""


def _plan(tmp_path: Path, framework: str = "pytorch", command: str = "", compiler: str | None = None) -> Path:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    _separable_npz(tmp_path / "data.npz", n=64)
    text = SPEC.format(framework=framework, command=command)
    if compiler is not None:  # that route alone: the other denied (running without a compiler is allowed unless so)
        other = "none" if compiler == "inductor" else "inductor"
        text += f"optimisation: {{deny: {{compilers: [{other}]}}}}\n"
    (tmp_path / "train.yaml").write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "train.yaml"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def test_the_image_trains_the_onnx_model_with_the_torch_engine_on_the_specs_data(tmp_path: Path) -> None:
    out = _plan(tmp_path)
    deployment = json.loads((out / "deployment.json").read_text())
    choice = json.loads((out / "plan.json").read_text())["choice"]
    assert choice["framework"] == "pytorch"
    engine = "torch-inductor" if choice["compiler"] == "inductor" else "torch"
    assert deployment["run_argv"] == [
        "python3", "-m", "runtime", "train", "/opt/app/model.onnx", "--data", "/opt/app/data/data.npz",
        "-o", "trained.onnx", "--batch-size", "16", "--precision", choice["precision"], "--epochs", "2",
        "--checkpoint", "checkpoints", "--resume", "--engine", engine,
    ]  # fmt: skip
    assert "runtime" in deployment["app_files"]  # the trainer ships with the image
    packages = {p.split("==")[0] for p in deployment["pip_packages"]}
    assert {"torch", "onnx", "numpy"} <= packages
    assert "bare python3" not in (out / "plan.md").read_text()


@pytest.mark.parametrize(("compiler", "engine"), [("none", "torch"), ("inductor", "torch-inductor")])
def test_the_image_trains_with_the_engine_of_the_chosen_compiler(tmp_path: Path, compiler: str, engine: str) -> None:
    """The torch.compile route's image compiles as its predicted steps did (it trained eagerly before), and installs
    the C++ compiler inductor builds with."""
    out = _plan(tmp_path, compiler=compiler)
    choice = json.loads((out / "plan.json").read_text())["choice"]
    assert (choice["framework"], choice["compiler"]) == ("pytorch", compiler)
    deployment = json.loads((out / "deployment.json").read_text())
    assert deployment["run_argv"][-2:] == ["--engine", engine]
    assert ("g++" in (out / "Dockerfile").read_text()) == (compiler == "inductor")


def test_a_command_of_its_own_still_wins(tmp_path: Path) -> None:
    out = _plan(tmp_path, command="  command: [python3, -c, 'print(1)']\n")
    deployment = json.loads((out / "deployment.json").read_text())
    assert deployment["run_argv"] == ["python3", "-c", "print(1)"]
    assert "runtime" not in deployment["app_files"]


@pytest.mark.parametrize("framework", ["onnxruntime"])
def test_an_inference_only_framework_still_cannot_train_the_model(tmp_path: Path, framework: str) -> None:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    _separable_npz(tmp_path / "data.npz", n=64)
    (tmp_path / "train.yaml").write_text(SPEC.format(framework=framework, command=""))
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "train.yaml"), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_convolutional_models_image_trains_in_the_routes_layout(tmp_path: Path, layout: str) -> None:
    """PyTorch's NHWC route trains channels-last (``--layout NHWC``), its NCHW route contiguous: the image runs the
    layout the plan ranked (an MLP's plan ranks none, and its argv names none, as above)."""
    import numpy as np
    import onnx

    from runtime.training.models import digits_cnn

    onnx.save(digits_cnn(0), tmp_path / "digits_mlp.onnx")  # (the name the spec template gives)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x=rng.standard_normal((32, 1, 8, 8)).astype(np.float32), y=rng.integers(0, 10, 32))
    text = SPEC.format(framework="pytorch", command="") + f"optimisation: {{allow: {{layouts: [{layout}]}}}}\n"
    (tmp_path / "train.yaml").write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "train.yaml"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "plan.json").read_text())["choice"]["layout"] == layout
    run_argv = json.loads((out / "deployment.json").read_text())["run_argv"]
    given = run_argv.index("--layout")
    assert run_argv[given + 1] == layout and given > run_argv.index("--engine")
