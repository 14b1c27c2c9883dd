"""``appopt train`` through typer's CliRunner: ONNX file or spec in, trained model out, one-line user errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import typer
from typer.testing import CliRunner

from cli import train_cmds
from runtime import compile_model
from tests.runtime.training.helpers import mlp


@pytest.fixture
def app() -> typer.Typer:
    cli = typer.Typer()
    train_cmds.register(cli)

    @cli.command("noop")
    def _noop() -> None:  # a second command keeps typer from collapsing the app into "train"
        """Nothing."""

    return cli


@pytest.fixture
def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    return path


def test_train_an_onnx_file_on_digits(app: typer.Typer, model_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "trained.onnx"
    adam_on_digits = ["train", str(model_file), "--data", "digits", "--optimizer", "adam", "--lr", "0.01",
                      "--checkpoint", str(tmp_path / "ck"), "-o", str(out)]
    result = CliRunner().invoke(app, [*adam_on_digits, "--epochs", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("epoch 1/2") and "test acc" in lines[0] and lines[-1].startswith(f"wrote {out}")
    accuracy = float(lines[-1].split("test accuracy ")[1].rstrip("%)"))
    assert accuracy > 85
    outputs = compile_model(str(out)).run({"input": np.zeros((2, 64), np.float32)})
    assert outputs["output"].shape == (2, 10)
    again = CliRunner().invoke(app, [*adam_on_digits, "--epochs", "3", "--resume"])
    assert again.exit_code == 0, again.output
    assert again.output.splitlines()[0] == f"resumed from {tmp_path / 'ck'} at epoch 2"
    assert again.output.splitlines()[1].startswith("epoch 3/3")


def test_train_from_a_spec_and_an_npz(app: typer.Typer, model_file: Path, tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "data.npz", x=rng.random((40, 64), dtype=np.float32), y=rng.integers(0, 10, 40))
    spec = tmp_path / "app.yaml"
    spec.write_text(
        "name: mlp-train\napplication:\n  type: training\n  model: {onnx: mlp.onnx}\n  batch_size: 8\n"
        "  precision: fp16\n  data: {epochs: 1}\n"
    )
    result = CliRunner().invoke(
        app, ["train", str(spec), "--data", str(tmp_path / "data.npz"), "-o", str(tmp_path / "o.onnx")]
    )
    assert result.exit_code == 0, result.output
    assert result.output.startswith("epoch 1/1") and "loss scale" in result.output  # fp16 from the spec


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "nope.csv"], "--data: 'nope.csv' is neither 'digits' nor an .npz file"),
        (["--data", "missing.npz"], "does not exist"),
        (["--data", "digits", "--optimizer", "rmsprop"], "--optimizer: 'rmsprop'; use sgd or adam"),
        (["--data", "digits", "--precision", "int8"], "--precision: 'int8'"),
        (["--data", "digits", "--resume"], "--resume needs --checkpoint DIR"),
    ],
)
def test_user_errors_are_one_line(
    app: typer.Typer, model_file: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(app, ["train", str(model_file), *args, "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [f"error: {result.output.strip()[7:]}"]
    assert message in result.output and "Traceback" not in result.output


def test_spec_errors(app: typer.Typer, tmp_path: Path) -> None:
    spec = tmp_path / "app.yaml"
    spec.write_text("name: x\napplication:\n  type: training\n  model: {architecture: resnet50}\n")
    result = CliRunner().invoke(app, ["train", str(spec), "--data", "digits", "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 1 and "needs an ONNX file" in result.output
    spec.write_text("name: x\napplication:\n  type: inference\n  model: {onnx: m.onnx}\n")
    result = CliRunner().invoke(app, ["train", str(spec), "--data", "digits", "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 1 and "needs type: training" in result.output
