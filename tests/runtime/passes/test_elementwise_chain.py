"""Straight lines of elementwise ops fuse into one ElementwiseChain."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(4)
SHAPE = [2, 3, 5, 16]
FEEDS = {"x": rng.standard_normal(SHAPE).astype(np.float32), "z": rng.standard_normal(SHAPE).astype(np.float32)}
INIT = [
    const("two", 2.0),
    const("vec", rng.uniform(0.5, 2, 16)),
    const("lo", -1.0),
    const("hi", 1.5),
    const("plane", rng.standard_normal((5, 1))),
]


def _m(nodes: list, outputs: tuple = ("y",)) -> onnx.ModelProto:
    return model(nodes, [vi("x", shape=SHAPE), vi("z", shape=SHAPE)], [vi(o, shape=SHAPE) for o in outputs], INIT)


NODES = [
    helper.make_node("Mul", ["x", "vec"], ["a"]),
    helper.make_node("Sub", ["two", "a"], ["b"]),
    helper.make_node("Sigmoid", ["b"], ["c"]),
    helper.make_node("Div", ["c", "z"], ["d"]),
    helper.make_node("Add", ["d", "plane"], ["e"]),
    helper.make_node("Clip", ["e", "lo", "hi"], ["f"]),
    helper.make_node("Tanh", ["f"], ["y"]),
]


def test_a_chain_becomes_one_node_and_matches_exactly_on_numpy(numpy_only: None) -> None:
    exe = compare(_m(NODES), FEEDS, passes=["elementwise_chain"], exact=True)
    assert ops_of(exe) == ["ElementwiseChain"]


def test_the_compiled_chain_agrees() -> None:
    exe = compare(_m(NODES), FEEDS, passes=["elementwise_chain"], rtol=2e-6)
    assert ops_of(exe) == ["ElementwiseChain"]


def test_a_value_read_outside_splits_the_chain() -> None:
    exe = compare(_m(NODES, outputs=("y", "c")), FEEDS, passes=["elementwise_chain"])
    assert ops_of(exe) == ["ElementwiseChain", "ElementwiseChain"]


def test_a_broadcast_that_grows_the_tensor_is_not_chained() -> None:
    nodes = [
        helper.make_node("Relu", ["small"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["s"]),
        helper.make_node("Neg", ["s"], ["y"]),
    ]
    m = model(nodes, [vi("small", shape=[16]), vi("x", shape=SHAPE)], [vi("y", shape=SHAPE)])
    exe = compare(
        m, {"small": rng.standard_normal(16).astype(np.float32), "x": FEEDS["x"]}, passes=["elementwise_chain"]
    )
    assert ops_of(exe)[0] == "Relu"


def test_a_lone_relu_after_a_fused_op_becomes_a_compiled_chain() -> None:
    from onnx import TensorProto

    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Exp", ["r"], ["e"]),
        helper.make_node("MatMul", ["e", "w"], ["m"]),
        helper.make_node("Relu", ["m"], ["y"]),
    ]
    init = [*INIT, const("w", rng.standard_normal((16, 16)))]
    m = model(nodes, [vi("x", shape=SHAPE)], [vi("y", TensorProto.FLOAT, SHAPE)], init)
    exe = compare(m, {"x": FEEDS["x"]}, passes=["elementwise_chain"], rtol=2e-6)
    assert ops_of(exe) == ["ElementwiseChain", "MatMul", "Relu"]  # a plain MatMul: the Relu keeps its kernel
    with_fusion = compare(m, {"x": FEEDS["x"]}, passes=["matmul_fusion", "elementwise_chain"], rtol=2e-5)
    assert ops_of(with_fusion) == ["ElementwiseChain", "FusedMatMul"]  # the Relu went into the product
    lone_exp = model([helper.make_node("Exp", ["x"], ["y"])], [vi("x", shape=SHAPE)], [vi("y", shape=SHAPE)])
    assert ops_of(compare(lone_exp, {"x": FEEDS["x"]}, passes=["elementwise_chain"])) == ["Exp"]


def test_leaky_relu_is_a_step_with_its_slope_on_numpy_and_compiled(numpy_only: None) -> None:
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["a"]),
        helper.make_node("LeakyRelu", ["a"], ["b"], alpha=0.2),
        helper.make_node("Add", ["b", "vec"], ["y"]),
    ]
    exe = compare(_m(nodes), FEEDS, passes=["elementwise_chain"], exact=True)
    assert ops_of(exe) == ["ElementwiseChain"]


def test_leaky_relu_compiled_agrees() -> None:
    nodes = [
        helper.make_node("Mul", ["x", "two"], ["a"]),
        helper.make_node("LeakyRelu", ["a"], ["y"]),  # the default slope, 0.01
    ]
    exe = compare(_m(nodes), FEEDS, passes=["elementwise_chain"], rtol=2e-6)
    assert ops_of(exe) == ["ElementwiseChain"]


def test_a_lone_tanh_after_a_fused_op_chains_though_its_output_names_the_batch_apart() -> None:
    """A dynamic batch comes out of shape inference as ``unk__0`` before the Tanh and as the graph's ``batch`` after
    it (a VAE decoder's last transposed convolution, run NHWC): a unary step keeps its input's shape, so the names
    need not agree."""
    nodes = [
        helper.make_node("Conv", ["x", "v"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["a", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1], kernel_shape=[4, 4]),
        helper.make_node("Tanh", ["c"], ["y"]),
    ]
    init = [const("v", rng.standard_normal((3, 3, 3, 3)) * 0.3), const("w", rng.standard_normal((3, 4, 4, 4)) * 0.2)]
    m = model(nodes, [vi("x", shape=["n", 3, 5, 16])], [vi("y", shape=["batch", 4, 10, 32])], init)
    exe = compare(m, {"x": FEEDS["x"]}, passes=["layout", "elementwise_chain"], rtol=2e-5, layout="nhwc")
    assert ops_of(exe) == ["ToNhwc", "NhwcConv", "NhwcConvTranspose", "ElementwiseChain", "ToNchw"]


def test_a_residual_added_after_a_fused_convolutions_activation_chains() -> None:
    """``relu(conv(x)) + x`` (a TCN block): the convolution's epilogue takes the ReLU but not a sum after it; the
    lone Add reading its output becomes a compiled chain, and a lone Add of two graph inputs stays an Add."""
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["r", "x"], ["y"]),
    ]
    init = [const("w", rng.standard_normal((3, 3, 3, 3)) * 0.3)]
    m = model(nodes, [vi("x", shape=[2, 3, 5, 16])], [vi("y", shape=[2, 3, 5, 16])], init)
    feeds = {"x": FEEDS["x"]}
    exe = compare(m, feeds, passes=["conv_fusion", "layout", "elementwise_chain"], rtol=1e-5, layout="nhwc")
    assert "ElementwiseChain" in ops_of(exe) and "Add" not in ops_of(exe)
    plain = model([helper.make_node("Add", ["x", "z"], ["y"])], [vi("x", shape=SHAPE), vi("z", shape=SHAPE)],
                  [vi("y", shape=SHAPE)])  # fmt: skip
    assert ops_of(compare(plain, FEEDS, passes=["elementwise_chain"])) == ["Add"]
