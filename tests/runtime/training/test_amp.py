"""The AMP pass (cast lists, schema guard, outputs kept) and dynamic loss scaling."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime import compile_model
from runtime.autodiff.gradcheck import typed_model
from runtime.ir import Graph, Model
from runtime.kernels import NodeContext
from runtime.kernels.grad_conv import ConvGrad
from runtime.passes.amp import AmpReport, apply_amp
from runtime.training import DynamicLossScaler, TrainConfig, Trainer
from runtime.training.models import digits_cnn
from tests.runtime.training.helpers import digits

F, H, BF = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16


def _amp_model(low: str, opset: int = 17) -> tuple[Model, AmpReport]:
    model = typed_model(digits_cnn(0, opset=opset))
    return model, apply_amp(model.graph, low)


def _type(graph: Graph, name: str) -> int:
    return graph.values[name].elem_type


def _producer(graph: Graph, name: str) -> str:
    return next(n.op_type for n in graph.nodes if name in n.outputs)


def test_cast_lists_on_the_digits_cnn() -> None:
    model, report = _amp_model("float16")
    g = model.graph
    assert report.low_nodes == ["conv1", "conv2", "fc1", "fc2"]  # Conv and Gemm run in fp16
    by_name = {n.name: n for n in g.nodes}
    for name in report.low_nodes:
        node = by_name[name]
        assert all(_type(g, i) == H for i in node.inputs), name  # weights cast, masters stay fp32 initializers
        assert g.initializers[node.inputs[1]].dtype == np.float32 if node.inputs[1] in g.initializers else True
    assert all(_type(g, i) == F for i in by_name["bn1"].inputs)  # norms in fp32
    assert _type(g, "r2") == H and _type(g, "p2") == H and _type(g, "f") == H  # Relu/MaxPool/Flatten follow
    assert _type(g, "r1") == F  # Relu after the fp32 BatchNorm stays fp32
    assert _producer(g, "logits") == "Cast" and _type(g, "logits") == F  # the graph output keeps its type
    assert {n.inputs[1] for n in g.nodes if n.op_type == "Conv"} == {"conv1.W__low", "conv2.W__low"}


@pytest.mark.parametrize(
    ("low", "opset", "expect_low"),
    [
        ("float16", 17, ["conv1", "conv2", "fc1", "fc2"]),
        ("bfloat16", 17, ["fc1", "fc2"]),  # Conv accepts bf16 only from opset 22
        ("bfloat16", 22, ["conv1", "conv2", "fc1", "fc2"]),
    ],
)
def test_amp_model_runs_and_stays_close_to_fp32(low: str, opset: int, expect_low: list[str]) -> None:
    model, report = _amp_model(low, opset)
    assert report.low_nodes == expect_low
    if low == "bfloat16" and opset == 17:
        assert report.refused == ["conv1", "conv2"]
    x = np.random.default_rng(0).random((8, 1, 8, 8)).astype(np.float32)
    mixed = compile_model(model.to_onnx(), passes=()).run({"image": x})["logits"]
    full = compile_model(digits_cnn(0, opset=opset)).run({"image": x})["logits"]
    assert mixed.dtype == np.float32
    tol = 0.01 if low == "float16" else 0.05
    np.testing.assert_allclose(mixed, full, atol=tol * np.abs(full).max())
    assert not np.array_equal(mixed, full)  # it did compute in low precision


def _graph(nodes: list[onnx.NodeProto], inits: dict[str, np.ndarray], out_type: int = F) -> Model:
    proto = helper.make_model(
        helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", F, [2, 3])],
            [helper.make_tensor_value_info("y", out_type, None)],
            [numpy_helper.from_array(v, k) for k, v in inits.items()],
        ),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    return typed_model(proto)


def test_widest_type_and_unknown_ops() -> None:
    w = np.ones((3, 3), np.float32)
    model = _graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),  # fp16
            helper.make_node("Add", ["m", "bias"], ["a"]),  # fp16 + fp32 -> fp32
            helper.make_node("MatMul", ["a", "w"], ["m2"]),  # fp16
            helper.make_node("Mul", ["m2", "m2"], ["sq"]),  # fp16 * fp16 -> fp16
            helper.make_node("Hardmax", ["sq"], ["y"]),  # not on any list: fp32
        ],
        {"w": w, "bias": np.ones(3, np.float32)},
    )
    report = apply_amp(model.graph, "float16")
    g = model.graph
    add = next(n for n in g.nodes if n.op_type == "Add")
    assert [_type(g, i) for i in add.inputs] == [F, F] and _type(g, "a") == F
    assert _type(g, "sq") == H
    hardmax = next(n for n in g.nodes if n.op_type == "Hardmax")
    assert _type(g, hardmax.inputs[0]) == F and report.fp32_nodes == [hardmax.name]
    out = compile_model(model.to_onnx(), passes=()).run({"x": np.ones((2, 3), np.float32)})["y"]
    assert out.dtype == np.float32


def test_model_fp16_tensors_are_left_alone() -> None:
    model = _graph(
        [helper.make_node("Cast", ["x"], ["h"], to=H), helper.make_node("Softmax", ["h"], ["y"])], {}, out_type=H
    )
    report = apply_amp(model.graph, "float16")
    assert report.casts == 0 and [n.op_type for n in model.graph.nodes] == ["Cast", "Softmax"]


def test_grad_kernels_keep_low_precision_dtypes() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float16)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float16)
    dy = rng.standard_normal((2, 4, 3, 3)).astype(np.float16)
    kernel = ConvGrad(NodeContext("c", "ConvGrad", n_outputs=3), {})
    dx, dw, db = kernel.run(dy, x, w)
    assert dx.dtype == dw.dtype == db.dtype == np.float16
    ref_dx, ref_dw, _ = kernel.run(dy.astype(np.float32), x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_allclose(dw.astype(np.float32), ref_dw, rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(dx.astype(np.float32), ref_dx, rtol=1e-2, atol=1e-2)


# -- dynamic loss scaling ---------------------------------------------------------------------------------------
def test_scaler_backs_off_on_overflow_and_grows_after_clean_steps() -> None:
    scaler = DynamicLossScaler(scale=1024.0, growth_interval=3)
    assert scaler.update(False) is False and scaler.scale == 512.0 and scaler.skipped == 1
    assert [scaler.update(True) for _ in range(2)] == [True, True] and scaler.scale == 512.0
    assert scaler.update(True) and scaler.scale == 1024.0 and scaler.good_steps == 0
    scaler.update(True)
    assert not scaler.update(False) and scaler.good_steps == 0  # an overflow resets the clean-step count
    low = DynamicLossScaler(scale=2.0**-14)
    low.update(False)
    assert low.scale == 2.0**-14  # never below the floor
    assert DynamicLossScaler.from_state(scaler.state_dict()) == scaler


def test_fp16_training_skips_overflowing_steps_and_keeps_fp32_masters() -> None:
    data = digits()
    config = TrainConfig(epochs=0, batch_size=32, precision="fp16", loss_scale=2.0**40, loss_scale_growth_interval=2)
    trainer = Trainer(digits_cnn(0), config)
    assert all(p.dtype == np.float32 for p in trainer.params.values())
    feeds = {"image": data.x_train[:32].reshape(-1, 1, 8, 8)}
    before = {k: v.copy() for k, v in trainer.params.items()}
    trainer.train_step(feeds, data.y_train[:32])  # 2^40 overflows fp16: skipped, scale halves
    assert trainer.scaler is not None and trainer.scaler.skipped == 1 and trainer.scaler.scale == 2.0**39
    assert all(np.array_equal(before[k], trainer.params[k]) for k in before)
    for _ in range(60):  # halving from 2^39 reaches a scale fp16 can hold in ~25 steps
        if trainer.optimizer.steps:
            break
        trainer.train_step(feeds, data.y_train[:32])
    assert trainer.optimizer.steps == 1 and trainer.scaler.skipped > 20
    assert trainer.scaler.scale <= 2.0**16  # backed off until the gradients fit in fp16
    assert any(not np.array_equal(before[k], trainer.params[k]) for k in before)
    scale, skipped = trainer.scaler.scale, trainer.scaler.skipped
    trainer.train_step(feeds, data.y_train[:32])  # the second clean step in a row doubles the scale
    grew = trainer.scaler.scale == 2 * scale and trainer.scaler.skipped == skipped
    backed_off = trainer.scaler.scale == scale / 2 and trainer.scaler.skipped == skipped + 1
    assert grew or backed_off
    assert all(p.dtype == np.float32 for p in trainer.params.values())


def test_mixed_precision_trains_a_regressor_whose_last_node_runs_low() -> None:
    """mse after a Gemm: the loss's Sub reads the low Gemm output and the fp32 target input, so it runs in fp32
    (the target is typed by its input, which has no value entry of its own)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3)).astype(np.float32) * 0.1, "w")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "w"], ["y"])],
        "regressor",
        [helper.make_tensor_value_info("x", F, ["batch", 8])],
        [helper.make_tensor_value_info("y", F, ["batch", 3])],
        [w],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    trainer = Trainer(proto, TrainConfig(epochs=0, batch_size=16, precision="fp16", loss="mse"))
    x = rng.standard_normal((16, 8)).astype(np.float32)
    target = (x @ np.full((8, 3), 0.5, np.float32)).astype(np.float32)
    first = trainer.train_step({"x": x}, target)
    for _ in range(20):
        last = trainer.train_step({"x": x}, target)
    assert last < first
