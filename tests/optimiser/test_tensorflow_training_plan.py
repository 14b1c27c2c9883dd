"""A TensorFlow training plan for an ONNX model, with no command: its image trains the model on the spec's data with
``python -m runtime train --engine tensorflow`` (``tensorflow-xla`` on the XLA route), at fp32 only."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from tests.optimiser.test_pytorch_training_plan import EXAMPLES, SPEC
from tests.runtime.training.test_runtime_train_cli import _separable_npz


def _spec(tmp_path: Path, precision: str = "") -> Path:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    _separable_npz(tmp_path / "data.npz", n=64)
    text = SPEC.format(framework="tensorflow", command="")
    if precision:
        text = text.replace("  batch_size: 16\n", f"  batch_size: 16\n  precision: {precision}\n")
    (tmp_path / "train.yaml").write_text(text)
    return tmp_path / "train.yaml"


def test_the_image_trains_the_onnx_model_with_the_tensorflow_engine_of_its_route(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["plan", str(_spec(tmp_path)), "-o", str(out)])
    assert result.exit_code == 0, result.output
    deployment = json.loads((out / "deployment.json").read_text())
    choice = json.loads((out / "plan.json").read_text())["choice"]
    assert choice["framework"] == "tensorflow" and choice["precision"] == "fp32"
    engine = "tensorflow-xla" if choice["compiler"] == "xla" else "tensorflow"
    assert deployment["run_argv"][:4] == ["python3", "-m", "runtime", "train"]
    assert deployment["run_argv"][-2:] == ["--engine", engine]
    assert "runtime" in deployment["app_files"]  # the trainer ships with the image
    packages = {p.split("==")[0] for p in deployment["pip_packages"]}
    assert {"tensorflow", "onnx", "numpy"} <= packages


def test_a_precision_its_trainer_does_not_train_is_refused_with_the_reason(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["plan", str(_spec(tmp_path, "bf16")), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "tensorflow trains the model in its image with python -m runtime train --engine tensorflow, at fp32" in (
        result.output
    )


def test_a_named_architecture_trained_in_the_runtime_is_held_to_its_trainers_precisions_too(tmp_path: Path) -> None:
    """``model: {architecture: resnet18}`` with no command trains through ``python -m runtime train --arch`` as well:
    bf16 on TensorFlow would have written an entry its trainer refuses."""
    spec = tmp_path / "arch.yaml"
    spec.write_text(
        "name: arch-tf\n"
        "application: {type: training, model: {architecture: resnet18}, batch_size: 8, framework: tensorflow, "
        "precision: bf16}\n"
        "target: {cpu: {arch: x86_64, model: local}, scheduler: none}\n"
        "container: {formats: [docker]}\n"
    )
    result = CliRunner().invoke(app, ["plan", str(spec), "-o", str(tmp_path / "out")])
    assert result.exit_code != 0
    assert "python -m runtime train --engine tensorflow, at fp32 only" in result.output
