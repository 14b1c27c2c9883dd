"""``--engine torch``: an ONNX model trained in PyTorch (what a PyTorch training plan's image runs by default)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runtime import compile_model
from runtime.training import TrainConfig, TrainingError
from runtime.training.data import load_npz
from runtime.training.models import digits_cnn
from tests.runtime.training.test_runtime_train_cli import MLP, ROOT, _separable_npz

torch = pytest.importorskip("torch", reason="torch: extra not installed")

from runtime.training.torch_module import OnnxModule  # noqa: E402
from runtime.training.torch_trainer import TorchTrainer  # noqa: E402


def test_the_module_computes_what_the_runtime_computes() -> None:
    """Conv (padded), BatchNorm (inference mode), MaxPool, Flatten, Gemm: the same numbers as our executor."""
    rng = np.random.default_rng(1)
    proto = digits_cnn(3)
    for init in proto.graph.initializer:  # non-trivial running statistics, so BatchNorm is really exercised
        if init.name in ("bn1.mean", "bn1.var"):
            arr = rng.uniform(0.5, 1.5, 16).astype(np.float32)
            init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    x = rng.standard_normal((5, 1, 8, 8)).astype(np.float32)
    expected = compile_model(proto).run({"image": x})["logits"]
    module = OnnxModule(proto).eval()
    with torch.no_grad():
        got = module(torch.from_numpy(x))["logits"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    assert set(module.values()) == {i.name for i in proto.graph.initializer if i.name != "dropout.ratio"}


def test_trains_the_mlp_and_exports_the_trained_weights_into_the_same_model(tmp_path: Path) -> None:
    data = load_npz(_separable_npz(tmp_path / "data.npz"))
    trainer = TorchTrainer(str(MLP), TrainConfig(epochs=3, batch_size=32, lr=0.05, threads=1))
    history = trainer.fit(data.x_train, data.y_train, validation=(data.x_test, data.y_test))
    assert [h.epoch for h in history] == [1, 2, 3]
    assert history[-1].loss < history[0].loss
    assert history[-1].val_accuracy is not None and history[-1].val_accuracy > 0.9
    exported = trainer.export()
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in onnx.load(MLP).graph.node]
    # the exported model, run by our own executor, scores as the trained torch module did
    assert data.x_test is not None and data.y_test is not None
    probabilities = compile_model(exported).run({"input": data.x_test})["probabilities"]
    accuracy = float((probabilities.argmax(axis=1) == data.y_test).mean())
    assert accuracy == pytest.approx(trainer.evaluate(data.x_test, data.y_test)["accuracy"])


def test_batch_norm_running_statistics_are_trained_and_exported(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1, 8, 8)).astype(np.float32) * 3 + 2
    y = rng.integers(0, 10, 64)
    trainer = TorchTrainer(digits_cnn(0).SerializeToString(), TrainConfig(epochs=1, batch_size=16, threads=1))
    trainer.fit(x, y)
    values = trainer.module.values()
    assert not np.allclose(values["bn1.mean"], 0.0) and not np.allclose(values["bn1.var"], 1.0)


def test_an_op_it_cannot_train_is_named() -> None:
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="hardmax_1")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    message = r"node 'hardmax_1': --engine torch cannot train op 'Hardmax' \(it knows Add, "
    with pytest.raises(TrainingError, match=message):
        OnnxModule(proto)


def test_python_m_runtime_train_engine_torch_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    data = _separable_npz(tmp_path / "data.npz")
    out, checkpoints = tmp_path / "trained.onnx", tmp_path / "ck"
    common = ["--data", str(data), "-o", str(out), "--checkpoint", str(checkpoints), "--resume", "--engine", "torch"]

    def train(epochs: int) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "runtime", "train", str(MLP), *common, "--epochs", str(epochs), "--threads", "1"]
        return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)

    first = train(2)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[0].startswith("epoch 1/2  loss ")
    assert (checkpoints / "torch-checkpoint.pt").is_file() and out.is_file()
    second = train(3)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines()[0] == f"resumed from {checkpoints} at epoch 2"
    assert second.stdout.splitlines()[1].startswith("epoch 3/3  loss ")
    assert "test accuracy" in second.stdout


def test_a_checkpoint_of_another_optimizer_is_refused_in_one_line(tmp_path: Path) -> None:
    data = load_npz(_separable_npz(tmp_path / "data.npz", n=64))
    sgd = TrainConfig(epochs=1, batch_size=32, checkpoint_dir=str(tmp_path / "ck"))
    TorchTrainer(str(MLP), sgd).fit(data.x_train, data.y_train)
    adam = TrainConfig(epochs=2, batch_size=32, optimizer="adam", lr=1e-3, checkpoint_dir=str(tmp_path / "ck"))
    with pytest.raises(TrainingError, match="was made with optimizer 'sgd', not 'adam'"):
        TorchTrainer(str(MLP), adam, resume=True)


@pytest.mark.slow  # inductor compiles the forward and backward: ~30 s on 2 cores
def test_the_compiled_engine_trains_as_the_eager_one_does(tmp_path: Path) -> None:
    """``--engine torch-inductor`` (the torch.compile route's image): the same seeded steps as eager PyTorch, to
    float tolerance, and an export the eager engine's checkpoint layout shares."""
    data = load_npz(_separable_npz(tmp_path / "data.npz", n=96))
    config = TrainConfig(epochs=2, batch_size=32, lr=0.05, threads=1)
    eager = TorchTrainer(str(MLP), config)
    compiled = TorchTrainer(str(MLP), config, compiled=True)
    assert compiled.forward is not compiled.module
    losses = [[h.loss for h in t.fit(data.x_train, data.y_train)] for t in (eager, compiled)]
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)
    trained = [t.module.values() for t in (eager, compiled)]
    for name, value in trained[0].items():
        np.testing.assert_allclose(trained[1][name], value, rtol=1e-4, atol=1e-6)
    assert '"engine": "torch-inductor ' in compiled.export().metadata_props[0].value


def test_the_compiled_engine_without_a_cpp_compiler_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runtime.training.torch_trainer.shutil.which", lambda _name: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TrainingError, match=r"--engine torch-inductor: .* no C\+\+ compiler is on PATH"):
        TorchTrainer(str(MLP), TrainConfig(epochs=1), compiled=True)


def test_torch_compile_traces_the_module_as_one_graph() -> None:
    """The compiled engine's forward is one graph: a graph break per node recompiled each op for every shape and
    fell back to eager after eight (the digits MLP's epoch ended on dynamo's recompile limit)."""
    explained = torch._dynamo.explain(OnnxModule(digits_cnn(0)).train())(torch.randn(4, 1, 8, 8))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_a_compile_that_fails_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    """A C++ compiler on PATH that does not work: inductor's failure is the trainer's one-line error, not its
    traceback, and no trained model is written."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("g++", "c++", "gcc", "cc"):
        fake = bin_dir / name
        fake.write_text("#!/bin/sh\nexit 1\n")
        fake.chmod(0o755)
    data, out = _separable_npz(tmp_path / "data.npz", n=64), tmp_path / "trained.onnx"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CXX": str(bin_dir / "g++"),
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}  # fmt: skip
    argv = [sys.executable, "-m", "runtime", "train", str(MLP), "--data", str(data), "-o", str(out), "--engine",
            "torch-inductor", "--epochs", "1", "--threads", "1"]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode != 0
    assert "error: --engine torch-inductor: torch.compile failed: " in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_nhwc_trains_channels_last_and_takes_the_nchw_steps(tmp_path: Path) -> None:
    """``--layout NHWC`` (PyTorch's NHWC route): the weights and batches run channels-last, and the seeded steps,
    trained weights and export are NCHW's to float tolerance."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((48, 1, 8, 8)).astype(np.float32)
    y = rng.integers(0, 10, 48)
    trainers = {
        layout: TorchTrainer(digits_cnn(0).SerializeToString(), TrainConfig(epochs=2, batch_size=16, threads=1,
                                                                           layout=layout))
        for layout in ("NCHW", "NHWC")
    }  # fmt: skip
    weight = next(p for p in trainers["NHWC"].module.parameters() if p.dim() == 4 and p.shape[1] > 1)
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    losses = {k: [h.loss for h in t.fit(x, y)] for k, t in trainers.items()}
    np.testing.assert_allclose(losses["NHWC"], losses["NCHW"], rtol=1e-4)
    for name, value in trainers["NCHW"].module.values().items():
        np.testing.assert_allclose(trainers["NHWC"].module.values()[name], value, rtol=1e-3, atol=1e-5)
    exported = compile_model(trainers["NHWC"].export()).run({"image": x[:4]})["logits"]
    np.testing.assert_allclose(exported, compile_model(trainers["NCHW"].export()).run({"image": x[:4]})["logits"],
                               rtol=1e-3, atol=1e-4)  # fmt: skip


def test_a_layout_the_engine_does_not_train_is_refused_in_one_line(tmp_path: Path) -> None:
    data, out = _separable_npz(tmp_path / "data.npz", n=64), tmp_path / "trained.onnx"
    argv = [sys.executable, "-m", "runtime", "train", str(MLP), "--data", str(data), "-o", str(out), "--layout",
            "NHWC", "--epochs", "1"]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False, timeout=300)
    assert done.returncode != 0
    assert "error: --layout NHWC: --engine appopt trains NCHW only (--engine torch runs either)" in done.stderr
    assert "Traceback" not in done.stderr and not out.exists()
