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
from runtime.architectures import EncoderShape, build_architecture, encoder_classifier, synthetic_images
from runtime.errors import RuntimeModelError
from runtime.training.run import train_to_file, training_config


def _trainable_params(model: onnx.ModelProto) -> int:
    """Parameters as torchvision and Hugging Face count them: every float initializer with a shape (0-d ones are
    constants) but the BatchNorm running statistics."""
    return sum(
        int(np.prod(t.dims))
        for t in model.graph.initializer
        if t.dims and t.data_type == onnx.TensorProto.FLOAT and not t.name.endswith(("running_mean", "running_var"))
    )


@pytest.mark.parametrize(
    ("name", "torchvision_params"), [("resnet18", 11_689_512), ("resnet50", 25_557_032), ("resnet152", 60_192_808)]
)
def test_resnets_have_torchvisions_parameter_counts(name: str, torchvision_params: int) -> None:
    model = build_architecture(name)
    onnx.checker.check_model(model, full_check=False)
    assert _trainable_params(model) == torchvision_params


def test_mobilenet_v2_has_torchvisions_parameter_count() -> None:
    model = build_architecture("mobilenet_v2")
    onnx.checker.check_model(model, full_check=False)
    assert _trainable_params(model) == 3_504_872  # torchvision.models.mobilenet_v2()


def test_bert_base_has_hugging_faces_parameter_count() -> None:
    """BertModel (bert-base-uncased) has 109,482,240 parameters; BertForSequenceClassification adds 768 x 2 + 2."""
    model = build_architecture("bert_base", classes=2, image_size=8)
    onnx.checker.check_model(model, full_check=False)
    assert _trainable_params(model) == 109_482_240 + 768 * 2 + 2
    assert [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim] == ["batch", 8]


def test_relu6_is_exact_at_and_around_its_corners() -> None:
    """MobileNetV2's ReLU6 is written Relu(x) - Relu(x - 6): the same values as a clip to [0, 6]."""
    from runtime.architectures import _Graph

    g = _Graph(np.random.default_rng(0))
    out = g.relu6("x")
    graph = onnx.helper.make_graph(
        g.nodes, "relu6", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [7])],
        [onnx.helper.make_tensor_value_info(out, onnx.TensorProto.FLOAT, [7])],
        [numpy_helper.from_array(v, k) for k, v in g.inits.items()],
    )  # fmt: skip
    probe = np.array([-3.0, 0.0, 1e-3, 3.0, 6.0, 6.5, 1e4], np.float32)
    got = compile_model(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]), 1).run(
        {"x": probe}
    )[out]
    assert np.array_equal(got, np.clip(probe, 0.0, 6.0))


_SMALL = EncoderShape(layers=2, hidden=32, heads=4, vocab=40, positions=16)


def test_a_small_encoder_classifier_runs_the_same_in_the_runtime_and_in_torch() -> None:
    """The encoder's graph (embeddings, attention, exact GELU, pooler) gives PyTorch's values when the torch engine
    runs it: both read the same ONNX nodes, so a wrong shape or axis shows as a mismatch."""
    torch = pytest.importorskip("torch", reason="torch: extra not installed")
    from runtime.training.torch_module import OnnxModule

    model = encoder_classifier(_SMALL, classes=3, length=8, seed=2)
    tokens = np.random.default_rng(0).integers(0, 40, (5, 8)).astype(np.int64)
    ours = compile_model(model, 1).run({"input": tokens})["logits"]
    theirs = OnnxModule(model).eval()(torch.from_numpy(tokens))["logits"].detach().numpy()
    assert ours.shape == (5, 3) and np.allclose(ours, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("engine", ["appopt", "torch"])
def test_a_small_encoder_classifier_learns_its_synthetic_tokens(engine: str, tmp_path: Path) -> None:
    if engine == "torch":
        pytest.importorskip("torch", reason="torch: extra not installed")
    from runtime.architectures import synthetic_tokens
    from runtime.training.data import split

    x, y = synthetic_tokens(256, 3, 8, _SMALL.vocab, seed=1)
    config = training_config(epochs=6, batch_size=16, lr=None, optimizer="adam", precision="fp32", checkpoint=None,
                             threads=1, seed=0)  # fmt: skip
    lines: list[str] = []
    model = encoder_classifier(_SMALL, classes=3, length=8, seed=0)
    outcome = train_to_file(model, split(x, y, 0.2, 0), tmp_path / "t.onnx", config, echo=lines.append, engine=engine)
    assert outcome.test_accuracy is not None and outcome.test_accuracy > 0.6, lines  # chance: 1/3


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
        (lambda: build_architecture("bert_base", image_size=513), "--image-size: 513; bert_base's sequence length"),
        (lambda: build_architecture("bert_base", classes=1), "--classes: 1"),
        (lambda: synthetic_images(0, 10, 32), "--synthetic: 0"),
    ],
)
def test_bad_architecture_settings_name_the_flag(call: Callable[[], object], message: str) -> None:
    with pytest.raises(RuntimeModelError, match="^" + message):
        call()


def test_runtime_train_arch_mobilenet_v2_on_synthetic_data(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "trained.onnx"
    argv = ["train", "--arch", "mobilenet_v2", "--synthetic", "8", "--classes", "3", "--image-size", "32"]
    assert main([*argv, "--epochs", "1", "--batch-size", "4", "--threads", "1", "-o", str(out)]) == 0
    assert "epoch 1/1" in capsys.readouterr().out
    trained = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(out)).graph.initializer}
    built = build_architecture("mobilenet_v2", classes=3, image_size=32)
    initial = {t.name: numpy_helper.to_array(t) for t in built.graph.initializer}
    assert not np.array_equal(initial["features.1.dw.weight"], trained["features.1.dw.weight"])  # depthwise trained


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
