"""Built-in named architectures (``runtime.architectures``) and ``python -m runtime train --arch``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from runtime import compile_model
from runtime.__main__ import main
from runtime.architectures import build_architecture, synthetic_images
from runtime.errors import RuntimeModelError


def _trainable_params(model: onnx.ModelProto) -> int:
    """Parameters as torchvision counts them: every initializer but the BatchNorm running statistics."""
    return sum(
        int(np.prod(t.dims)) for t in model.graph.initializer if not t.name.endswith(("running_mean", "running_var"))
    )


@pytest.mark.parametrize(
    ("name", "torchvision_params"), [("resnet18", 11_689_512), ("resnet50", 25_557_032), ("resnet152", 60_192_808)]
)
def test_resnets_have_torchvisions_parameter_counts(name: str, torchvision_params: int) -> None:
    model = build_architecture(name)
    onnx.checker.check_model(model, full_check=False)
    assert _trainable_params(model) == torchvision_params


def test_a_built_resnet_runs_at_a_reduced_size_with_the_asked_classes() -> None:
    model = build_architecture("resnet18", classes=7, image_size=32, seed=1)
    x, _ = synthetic_images(3, 7, 32)
    logits = compile_model(model, 1).run({"input": x})["logits"]
    assert logits.shape == (3, 7) and np.isfinite(logits).all()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: build_architecture("vgg16"), "--arch: 'vgg16' is not built in; known: resnet18"),
        (lambda: build_architecture("resnet18", classes=1), "--classes: 1"),
        (lambda: build_architecture("resnet18", image_size=16), "--image-size: 16"),
        (lambda: synthetic_images(0, 10, 32), "--synthetic: 0"),
    ],
)
def test_bad_architecture_settings_name_the_flag(call: Callable[[], object], message: str) -> None:
    with pytest.raises(RuntimeModelError, match="^" + message):
        call()


def test_runtime_train_arch_on_synthetic_data_writes_a_trained_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "trained.onnx"
    argv = ["train", "--arch", "resnet18", "--synthetic", "10", "--classes", "4", "--image-size", "32"]
    argv += ["--epochs", "2", "--batch-size", "4", "--threads", "1", "-o", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "epoch 2/2" in printed and f"wrote {out}" in printed
    trained = onnx.load(str(out))
    initial = build_architecture("resnet18", classes=4, image_size=32)
    before = {t.name: numpy_helper.to_array(t) for t in initial.graph.initializer}
    after = {t.name: numpy_helper.to_array(t) for t in trained.graph.initializer}
    assert not np.array_equal(before["fc.weight"], after["fc.weight"])  # it trained


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["model.onnx", "--arch", "resnet18", "--synthetic", "4"], "give an ONNX file or --arch NAME"),
        (["--arch", "resnet18"], "give --data FILE.npz or --synthetic N"),
        (["model.onnx", "--synthetic", "4"], "--synthetic: only with --arch"),
        (["--arch", "alexnet", "--synthetic", "4"], "--arch: 'alexnet' is not built in"),
    ],
)
def test_runtime_train_refuses_bad_flag_combinations_in_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", *argv, "-o", str(tmp_path / "t.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
