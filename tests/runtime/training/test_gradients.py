"""Every gradient rule against central finite differences (float64, one op per model, all float inputs)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime.autodiff import GRAD_RULES
from runtime.autodiff.gradcheck import check_gradients
from runtime.errors import UnsupportedOpError
from runtime.kernels.grad_base import GRAD_DOMAIN
from tests.runtime.training.helpers import D, away_from_zero, gradcheck, op_model, rand

I64 = np.int64


# -- convolution and dense products ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("x_shape", "w_shape", "attrs"),
    [
        ((2, 2, 5, 5), (3, 2, 3, 3), {}),
        ((1, 2, 6, 5), (4, 2, 3, 2), {"pads": [1, 0, 2, 1], "strides": [2, 1]}),
        ((1, 2, 7, 7), (2, 2, 3, 3), {"dilations": [2, 2], "pads": [1, 1, 1, 1]}),
        ((2, 4, 4, 4), (4, 2, 3, 3), {"group": 2, "auto_pad": "SAME_UPPER"}),
        ((2, 3, 9), (2, 3, 4), {"strides": [2], "pads": [1, 2]}),
        ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), {}),
    ],
    ids=["basic", "pads-strides", "dilations", "groups-same", "conv1d", "conv3d"],
)
def test_conv(x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any]) -> None:
    fed = {"x": rand(*x_shape)}
    params = {"W": rand(*w_shape, seed=1), "B": rand(w_shape[0], seed=2)}
    gradcheck(op_model("Conv", fed, params, **attrs), fed, ["x", "W", "B"])


def test_conv_without_bias_asks_no_bias_gradient() -> None:
    fed = {"x": rand(1, 2, 4, 4)}
    gradcheck(op_model("Conv", fed, {"W": rand(3, 2, 2, 2, seed=1)}), fed, ["x", "W"])


@pytest.mark.parametrize(("trans_a", "trans_b"), [(0, 0), (0, 1), (1, 0), (1, 1)])
@pytest.mark.parametrize("c_shape", [(5,), (4, 5), (1, 5)])
def test_gemm(trans_a: int, trans_b: int, c_shape: tuple[int, ...]) -> None:
    a = rand(*((3, 4) if trans_a else (4, 3)))
    b = rand(*((5, 3) if trans_b else (3, 5)), seed=1)
    fed = {"a": a}
    params = {"b": b, "c": rand(*c_shape, seed=2)}
    proto = op_model("Gemm", fed, params, transA=trans_a, transB=trans_b, alpha=0.7, beta=1.3)
    gradcheck(proto, fed, ["a", "b", "c"])


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((3, 4), (4, 2)), ((2, 3, 4), (4, 5)), ((4,), (4, 3)), ((3, 4), (4,)), ((4,), (4,)), ((2, 1, 3, 4), (3, 4, 2))],
)
def test_matmul(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    fed = {"a": rand(*a_shape)}
    gradcheck(op_model("MatMul", fed, {"b": rand(*b_shape, seed=1)}), fed, ["a", "b"])


# -- element-wise arithmetic with broadcasting ---------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize(
    ("a_shape", "b_shape"), [((2, 3, 4), (4,)), ((2, 1, 4), (1, 3, 1)), ((3, 4), (3, 4)), ((), (2, 3))]
)
def test_binary_broadcasting(op: str, a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> None:
    fed = {"a": rand(*a_shape)}
    b = rand(*b_shape, seed=1, low=0.5) if op == "Div" else rand(*b_shape, seed=1)
    gradcheck(op_model(op, fed, {"b": b}), fed, ["a", "b"])


def test_same_value_on_both_inputs_accumulates() -> None:
    fed = {"a": rand(3, 4)}
    gradcheck(op_model("Mul", fed, order=["a", "a"]), fed, ["a"])


@pytest.mark.parametrize(
    ("op", "x", "attrs"),
    [
        ("Relu", away_from_zero(3, 4), {}),
        ("LeakyRelu", away_from_zero(3, 4), {"alpha": 0.2}),
        ("Sigmoid", rand(3, 4), {}),
        ("Tanh", rand(3, 4), {}),
        ("Exp", rand(3, 4), {}),
        ("Log", rand(3, 4, low=0.5), {}),
        ("Sqrt", rand(3, 4, low=0.5), {}),
        ("Reciprocal", rand(3, 4, low=0.5), {}),
        ("Neg", rand(3, 4), {}),
        ("Identity", rand(3, 4), {}),
        ("Erf", rand(3, 4), {}),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_unary(op: str, x: np.ndarray, attrs: dict[str, Any]) -> None:
    fed = {"x": x}
    gradcheck(op_model(op, fed, **attrs), fed, ["x"])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu(approximate: str) -> None:
    fed = {"x": rand(3, 5)}
    gradcheck(op_model("Gelu", fed, approximate=approximate, opset=20), fed, ["x"])


def test_pow_both_inputs() -> None:
    fed = {"a": rand(3, 4, low=0.5)}
    gradcheck(op_model("Pow", fed, {"b": rand(4, seed=1, low=0.5)}), fed, ["a", "b"])


def test_sum_variadic_broadcast() -> None:
    fed = {"a": rand(2, 3)}
    gradcheck(op_model("Sum", fed, {"b": rand(3, seed=1), "c": rand(2, 1, seed=2)}), fed, ["a", "b", "c"])


def test_where_and_expand() -> None:
    fed = {"a": rand(2, 3)}
    params = {"c": np.array([True, False, True]), "b": rand(3, seed=1)}
    gradcheck(op_model("Where", fed, params, order=["c", "a", "b"]), fed, ["a", "b"])
    fed = {"x": rand(3, 1)}
    gradcheck(op_model("Expand", fed, {"shape": np.array([2, 3, 4], I64)}), fed, ["x"])


def test_cast_round_trip_keeps_the_input_dtype() -> None:
    fed = {"x": rand(3, 4)}
    proto = op_model("Cast", fed, to=TensorProto.FLOAT, out_types=[TensorProto.FLOAT])
    report = check_gradients(proto, fed, "y", ["x"], eps=1e-3)
    assert report.analytic["x"].dtype == np.float64
    assert report.max_error < 1e-3  # the forward itself rounds to float32


# -- pools ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "attrs",
    [
        {"kernel_shape": [2, 2], "strides": [2, 2]},
        {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1]},
        {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1},
        {"kernel_shape": [2, 2], "dilations": [2, 2]},
    ],
)
def test_max_pool(attrs: dict[str, Any]) -> None:
    x = np.random.default_rng(3).permutation(2 * 3 * 7 * 7).reshape(2, 3, 7, 7) / 10.0  # distinct: no ties
    gradcheck(op_model("MaxPool", {"x": x}, **attrs), {"x": x}, ["x"])


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_average_pool(count_include_pad: int, ceil_mode: int) -> None:
    fed = {"x": rand(2, 2, 6, 5)}
    proto = op_model(
        "AveragePool",
        fed,
        kernel_shape=[3, 2],
        strides=[2, 2],
        pads=[1, 0, 1, 1],
        count_include_pad=count_include_pad,
        ceil_mode=ceil_mode,
    )
    gradcheck(proto, fed, ["x"])


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op: str) -> None:
    x = np.random.default_rng(4).permutation(2 * 3 * 4 * 5).reshape(2, 3, 4, 5) / 7.0
    gradcheck(op_model(op, {"x": x}), {"x": x}, ["x"])


# -- normalisation -----------------------------------------------------------------------------------------------
def _bn_params(c: int) -> dict[str, np.ndarray]:
    return {"scale": rand(c, seed=1), "bias": rand(c, seed=2), "mean": rand(c, seed=3), "var": rand(c, seed=4, low=0.5)}


def test_batch_norm_training_mode() -> None:
    fed = {"x": rand(4, 3, 2, 2)}
    proto = op_model("BatchNormalization", fed, _bn_params(3), training_mode=1, opset=15, outputs=["y", "rm", "rv"])
    gradcheck(proto, fed, ["x", "scale", "bias"])


def test_batch_norm_inference_mode() -> None:
    fed = {"x": rand(4, 3, 5)}
    gradcheck(op_model("BatchNormalization", fed, _bn_params(3)), fed, ["x", "scale", "bias"])


def test_batch_norm_training_op_of_the_trainer() -> None:
    fed = {"x": rand(5, 3, 2, 3)}
    proto = op_model(
        "BatchNormTraining",
        fed,
        _bn_params(3),
        domain=GRAD_DOMAIN,
        extra_opsets=[(GRAD_DOMAIN, 1)],
        outputs=["y", "rm", "rv", "sm", "si"],
        momentum=0.8,
    )
    gradcheck(proto, fed, ["x", "scale", "bias"])


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm(axis: int) -> None:
    fed = {"x": rand(2, 3, 4)}
    shape = (4,) if axis == -1 else (3, 4)
    params = {"scale": rand(*shape, seed=1), "bias": rand(*shape, seed=2)}
    gradcheck(op_model("LayerNormalization", fed, params, axis=axis), fed, ["x", "scale", "bias"])


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("axis", "opset"), [(-1, 17), (1, 17), (1, 11)])
def test_softmax_family(op: str, axis: int, opset: int) -> None:
    fed = {"x": rand(2, 3, 4)}
    gradcheck(op_model(op, fed, axis=axis, opset=opset), fed, ["x"])


# -- data movement ---------------------------------------------------------------------------------------------
def test_reshape_flatten_squeeze_unsqueeze() -> None:
    fed = {"x": rand(2, 1, 6)}
    gradcheck(op_model("Reshape", fed, {"shape": np.array([3, -1], I64)}), fed, ["x"])
    gradcheck(op_model("Flatten", fed, axis=2), fed, ["x"])
    gradcheck(op_model("Squeeze", fed, {"axes": np.array([1], I64)}), fed, ["x"])
    gradcheck(op_model("Unsqueeze", fed, {"axes": np.array([0, 3], I64)}), fed, ["x"])


@pytest.mark.parametrize("perm", [None, [1, 2, 0]])
def test_transpose(perm: list[int] | None) -> None:
    fed = {"x": rand(2, 3, 4)}
    attrs: dict[str, Any] = {} if perm is None else {"perm": perm}
    gradcheck(op_model("Transpose", fed, **attrs), fed, ["x"])


def test_concat() -> None:
    fed = {"a": rand(2, 1, 3)}
    params = {"b": rand(2, 4, 3, seed=1), "c": rand(2, 2, 3, seed=2)}
    gradcheck(op_model("Concat", fed, params, axis=1), fed, ["a", "b", "c"])


@pytest.mark.parametrize(("axis", "indices"), [(0, [[0, 2], [2, -1]]), (1, [3, 0, 3]), (0, 1)])
def test_gather(axis: int, indices: object) -> None:
    fed = {"data": rand(4, 5)}
    params = {"idx": np.array(indices, I64)}
    gradcheck(op_model("Gather", fed, params, axis=axis), fed, ["data"])


def test_slice_inputs_with_negative_step() -> None:
    fed = {"x": rand(5, 6)}
    params = {
        "starts": np.array([4, 1], I64),
        "ends": np.array([0, 6], I64),
        "axes": np.array([0, 1], I64),
        "steps": np.array([-2, 2], I64),
    }
    gradcheck(op_model("Slice", fed, params), fed, ["x"])


def test_slice_attribute_form_of_opset_9() -> None:
    fed = {"x": rand(4, 6)}
    gradcheck(op_model("Slice", fed, starts=[1, -4], ends=[3, 100], axes=[0, 1], opset=9), fed, ["x"])


def test_dropout_inference_is_identity_and_training_uses_the_mask() -> None:
    fed = {"x": rand(4, 5)}
    gradcheck(op_model("Dropout", fed), fed, ["x"])
    params = {"ratio": np.asarray(0.3, np.float32), "train": np.asarray(True)}
    proto = op_model("Dropout", fed, params, outputs=["y", "mask"], out_types=[D, TensorProto.BOOL], seed=3)
    gradcheck(proto, fed, ["x"])


def test_training_dropout_op() -> None:
    fed = {"x": rand(4, 5), "seed": np.asarray(11, I64)}
    proto = op_model(
        "TrainingDropout",
        fed,
        domain=GRAD_DOMAIN,
        extra_opsets=[(GRAD_DOMAIN, 1)],
        outputs=["y", "mask"],
        out_types=[D, TensorProto.BOOL],
        ratio=0.4,
    )
    report = gradcheck(proto, {"x": fed["x"], "seed": fed["seed"]}, ["x"])
    assert (report.analytic["x"] == 0).any()


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_input(op: str, keepdims: int) -> None:
    fed = {"x": rand(2, 3, 4)}
    proto = op_model(op, fed, {"axes": np.array([0, -1], I64)}, keepdims=keepdims, opset=18)
    gradcheck(proto, fed, ["x"])


def test_reduce_axes_attribute_and_all_axes() -> None:
    fed = {"x": rand(2, 3, 4)}
    gradcheck(op_model("ReduceMean", fed, axes=[1], keepdims=0, opset=17), fed, ["x"])
    gradcheck(op_model("ReduceSum", fed, keepdims=0, opset=13), fed, ["x"])


# -- losses --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_softmax_cross_entropy(reduction: str, weighted: bool) -> None:
    fed = {"scores": rand(5, 4), "labels": np.array([0, 3, 1, 1, 2], I64)}
    params = {"w": rand(4, seed=1, low=0.2)} if weighted else {}
    proto = op_model("SoftmaxCrossEntropyLoss", fed, params, reduction=reduction, ignore_index=1)
    gradcheck(proto, fed, ["scores"])


def test_softmax_cross_entropy_spatial_and_log_prob_output() -> None:
    fed = {"scores": rand(2, 3, 4), "labels": np.array([[0, 2, 1, 1], [2, 2, 0, 1]], I64)}
    proto = op_model("SoftmaxCrossEntropyLoss", fed, outputs=["y", "logp"])
    gradcheck(proto, fed, ["scores"])
    gradcheck(proto, fed, ["scores"], output="logp")


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_negative_log_likelihood(reduction: str) -> None:
    fed = {"logp": rand(5, 4), "labels": np.array([0, 3, 1, 1, 2], I64)}
    proto = op_model("NegativeLogLikelihoodLoss", fed, {"w": rand(4, seed=2, low=0.2)}, reduction=reduction)
    gradcheck(proto, fed, ["logp"])


def test_mse_built_from_sub_mul_reduce_mean() -> None:
    nodes = [
        helper.make_node("Sub", ["pred", "target"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["y"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "mse",
        [helper.make_tensor_value_info("pred", D, [3, 2])],
        [helper.make_tensor_value_info("y", D, [])],
        [numpy_helper.from_array(rand(3, 2, seed=5), "target")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    report = gradcheck(proto, {"pred": rand(3, 2)}, ["pred", "target"])
    # d/dpred mean((p - t)^2) = 2 (p - t) / n, times the random seed r: the analytic result is exact
    assert report.errors["pred"] < 1e-8


# -- the machinery ------------------------------------------------------------------------------------------------
def test_op_without_a_rule_is_named() -> None:
    fed = {"x": rand(3, 4)}
    with pytest.raises(UnsupportedOpError, match=r"Hardmax.*no gradient rule"):
        check_gradients(op_model("Hardmax", fed), fed, "y", ["x"])


def test_every_required_op_has_a_rule() -> None:
    required = [
        "Conv",
        "Gemm",
        "MatMul",
        "Add",
        "Sub",
        "Mul",
        "Div",
        "Relu",
        "Gelu",
        "Sigmoid",
        "Tanh",
        "LeakyRelu",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "BatchNormalization",
        "LayerNormalization",
        "Softmax",
        "LogSoftmax",
        "Reshape",
        "Flatten",
        "Transpose",
        "Concat",
        "Gather",
        "Squeeze",
        "Unsqueeze",
        "Slice",
        "Dropout",
        "ReduceMean",
        "ReduceSum",
        "SoftmaxCrossEntropyLoss",
    ]
    assert [op for op in required if ("", op) not in GRAD_RULES] == []


def test_tiny_transformer_block_end_to_end() -> None:
    """Embedding Gather, attention (MatMul, Transpose, Div, Softmax), residual, LayerNorm, Gelu, mean pooling."""
    d, vocab = 4, 6
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["x"]),  # (2, 3, d)
        helper.make_node("MatMul", ["x", "wq"], ["q"]),
        helper.make_node("MatMul", ["x", "wk"], ["k"]),
        helper.make_node("MatMul", ["x", "wv"], ["v"]),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"]),
        helper.make_node("Div", ["scores", "scale"], ["scaled"]),
        helper.make_node("Softmax", ["scaled"], ["attn"], axis=-1),
        helper.make_node("MatMul", ["attn", "v"], ["ctx"]),
        helper.make_node("Add", ["ctx", "x"], ["res"]),
        helper.make_node("LayerNormalization", ["res", "gamma", "beta"], ["ln"], axis=-1),
        helper.make_node("Gelu", ["ln"], ["act"]),
        helper.make_node("Concat", ["act", "ln"], ["both"], axis=-1),
        helper.make_node("ReduceMean", ["both", "axes"], ["y"], keepdims=0),
    ]
    params = {
        "emb": rand(vocab, d, seed=1),
        "wq": rand(d, d, seed=2),
        "wk": rand(d, d, seed=3),
        "wv": rand(d, d, seed=4),
        "gamma": rand(d, seed=5, low=0.5),
        "beta": rand(d, seed=6),
    }
    consts = {"scale": np.asarray(2.0), "axes": np.array([1], I64)}
    graph = helper.make_graph(
        nodes,
        "block",
        [helper.make_tensor_value_info("tokens", TensorProto.INT64, [2, 3])],
        [helper.make_tensor_value_info("y", D, None)],
        [numpy_helper.from_array(v, k) for k, v in {**params, **consts}.items()],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    gradcheck(proto, {"tokens": np.array([[0, 2, 5], [5, 1, 0]], I64)}, list(params))
