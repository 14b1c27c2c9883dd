"""Straight lines and trees of elementwise ops fuse into one ElementwiseChain."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import RuntimeModelError, compile_model, native
from runtime.kernels.fused import CHAIN_BINARY, CHAIN_LOAD, CHAIN_POW, CHAIN_SAVE, KIND_FULL, KIND_NONE, KIND_REG
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


# -- trees: a value read by several ops of one chain (a tanh GELU reads x three times) -------------------------------
GELU_CONSTANTS = [
    const("half", 0.5),
    const("one", 1.0),
    const("kappa", 0.044715),
    const("beta", float(np.sqrt(2 / np.pi))),
    const("three", 3.0),
    const("three_i", 3, dtype=np.int64),
]


def _tanh_gelu(form: str) -> list[onnx.NodeProto]:
    """GELU's tanh approximation as exporters write it, from ``x`` to ``y``: ``cube`` x*x*x (PyTorch's own export),
    ``pow`` Pow(x, 3.0) with 0.5*x first (Hugging Face's NewGELU), ``pow_int`` an int64 exponent with the half last."""
    if form == "cube":
        return [
            helper.make_node("Mul", ["x", "x"], ["x2"]),
            helper.make_node("Mul", ["x", "x2"], ["x3"]),
            helper.make_node("Mul", ["x3", "kappa"], ["k"]),
            helper.make_node("Add", ["x", "k"], ["s"]),
            helper.make_node("Mul", ["s", "beta"], ["i"]),
            helper.make_node("Tanh", ["i"], ["t"]),
            helper.make_node("Add", ["t", "one"], ["u"]),
            helper.make_node("Mul", ["x", "u"], ["v"]),
            helper.make_node("Mul", ["v", "half"], ["y"]),
        ]
    exponent = "three" if form == "pow" else "three_i"
    tanh_branch = [
        helper.make_node("Pow", ["x", exponent], ["x3"]),
        helper.make_node("Mul", ["kappa", "x3"], ["k"]),
        helper.make_node("Add", ["x", "k"], ["s"]),
        helper.make_node("Mul", ["beta", "s"], ["i"]),
        helper.make_node("Tanh", ["i"], ["t"]),
        helper.make_node("Add", ["one", "t"], ["u"]),
    ]
    if form == "pow":
        half_first = helper.make_node("Mul", ["half", "x"], ["h"])
        return [half_first, *tanh_branch, helper.make_node("Mul", ["h", "u"], ["y"])]
    return [*tanh_branch, helper.make_node("Mul", ["u", "x"], ["h"]), helper.make_node("Mul", ["h", "half"], ["y"])]


def _gelu_model(form: str) -> onnx.ModelProto:
    return model(_tanh_gelu(form), [vi("x", shape=SHAPE)], [vi("y", shape=SHAPE)], [*INIT, *GELU_CONSTANTS])


def _tanh_gelu_reference(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64**3)))


@pytest.mark.parametrize("form", ["cube", "pow", "pow_int"])
def test_every_spelling_of_the_tanh_gelu_is_one_chain_on_numpy(form: str, numpy_only: None) -> None:
    exe = compare(_gelu_model(form), {"x": FEEDS["x"]}, passes=["elementwise_chain"], rtol=2e-6)
    assert ops_of(exe) == ["ElementwiseChain"]


@pytest.mark.parametrize("form", ["cube", "pow", "pow_int"])
def test_every_spelling_of_the_tanh_gelu_compiled_agrees_with_the_formula(form: str) -> None:
    x = (FEEDS["x"] * 3).astype(np.float32)
    exe = compare(_gelu_model(form), {"x": x}, passes=["elementwise_chain"], rtol=2e-6)
    assert ops_of(exe) == ["ElementwiseChain"]
    np.testing.assert_allclose(exe.run({"x": x})["y"], _tanh_gelu_reference(x), rtol=1e-5, atol=1e-6)


def test_the_compiled_tanh_gelu_is_the_tree_program() -> None:
    """The Pow form keeps 0.5 * x waiting in a register while the tanh branch is computed from x read again."""
    exe = compile_model(_gelu_model("pow"), passes=["elementwise_chain"])
    (node,) = exe.model.graph.nodes
    steps = [tuple(node.attrs["steps"][i : i + 4]) for i in range(0, len(node.attrs["steps"]), 4)]
    assert (CHAIN_SAVE, KIND_NONE, 0, 0) in steps and (CHAIN_BINARY["Mul"], KIND_REG, 0, 1) == steps[-1]
    assert [s[0] for s in steps].count(CHAIN_POW) == 1 and any(s[0] == CHAIN_LOAD for s in steps)
    assert node.inputs[1:] == ["x"]  # x read again as an operand, not copied


def test_two_computed_sides_use_two_registers_and_a_square_reads_the_accumulator() -> None:
    """(exp(x) - 1) * (sigmoid(x) + (x*x)): each side a computed tree, the square of the accumulator itself."""
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Sub", ["e", "one"], ["a"]),
        helper.make_node("Sigmoid", ["x"], ["s"]),
        helper.make_node("Mul", ["z", "z"], ["q"]),
        helper.make_node("Add", ["s", "q"], ["b"]),
        helper.make_node("Mul", ["a", "b"], ["y"]),
    ]
    m = _m(nodes)
    m.graph.initializer.extend(GELU_CONSTANTS)
    for numpy in (True, False):
        native.set_enabled(False if numpy else None)
        try:
            exe = compare(m, FEEDS, passes=["elementwise_chain"], rtol=2e-6)
        finally:
            native.set_enabled(None)
        assert ops_of(exe) == ["ElementwiseChain"]
    x, z = FEEDS["x"].astype(np.float64), FEEDS["z"].astype(np.float64)
    np.testing.assert_allclose(
        exe.run(dict(FEEDS))["y"], (np.exp(x) - 1) * (1 / (1 + np.exp(-x)) + z * z), rtol=1e-5, atol=1e-6
    )


def test_a_value_read_outside_the_tree_is_read_not_recomputed() -> None:
    """x*0.5 is also a graph output: the chain reads it as an operand and the node computing it stays."""
    m = model(
        _tanh_gelu("pow"),
        [vi("x", shape=SHAPE)],
        [vi("y", shape=SHAPE), vi("h", shape=SHAPE)],
        [*INIT, *GELU_CONSTANTS],
    )
    exe = compare(m, {"x": FEEDS["x"]}, passes=["elementwise_chain"], rtol=2e-6)
    assert sorted(ops_of(exe)) == ["ElementwiseChain", "Mul"]


def test_a_pow_with_a_tensor_exponent_is_not_a_step() -> None:
    nodes = [
        helper.make_node("Abs", ["x"], ["a"]),
        helper.make_node("Pow", ["a", "z"], ["p"]),
        helper.make_node("Relu", ["p"], ["y"]),
    ]
    exe = compare(_m(nodes), FEEDS, passes=["elementwise_chain"])
    assert ops_of(exe) == ["Abs", "Pow", "Relu"]


def test_a_register_outside_the_file_is_refused_at_load() -> None:
    nodes = [helper.make_node("ElementwiseChain", ["x"], ["y"], domain="com.appopt", steps=[CHAIN_SAVE, 0, 9, 0])]
    bad = model(nodes, [vi("x", shape=SHAPE)], [vi("y", shape=SHAPE)], extra_opsets=[("com.appopt", 1)])
    with pytest.raises(RuntimeModelError, match="register 9"):
        compile_model(bad, passes=[]).run({"x": FEEDS["x"]})
    unsaved = [CHAIN_BINARY["Add"], KIND_REG, 1, 0]
    nodes = [helper.make_node("ElementwiseChain", ["x"], ["y"], domain="com.appopt", steps=unsaved)]
    bad = model(nodes, [vi("x", shape=SHAPE)], [vi("y", shape=SHAPE)], extra_opsets=[("com.appopt", 1)])
    with pytest.raises(RuntimeModelError, match="register 1 read before"):
        compile_model(bad, passes=[]).run({"x": FEEDS["x"]})


# -- softplus and Mish: compiled chain steps (NumPy's logaddexp took 28 ns an element) -------------------------------
EXTREMES = np.array([-100, -30, -17, -5, -1e-3, -1e-30, 0, 1e-30, 1e-3, 0.5, 5, 17, 30, 100], dtype=np.float32)


def _softplus_reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.logaddexp(x.astype(np.float64), 0.0)


def _activation_model(nodes: list, opset: int = 18) -> onnx.ModelProto:
    shape = [2, 3, 5, 16]
    return model(nodes, [vi("x", shape=shape)], [vi("y", shape=shape)], [*INIT], opset=opset)


def _feeds_with_extremes() -> dict[str, np.ndarray]:
    x = (FEEDS["x"] * 4).astype(np.float32)
    x.reshape(-1)[: EXTREMES.size] = EXTREMES
    return {"x": x}


@pytest.mark.parametrize("numpy", [True, False])
def test_mish_written_out_is_one_chain_and_matches_the_formula_at_the_extremes(numpy: bool) -> None:
    """x * tanh(softplus(x)), as PyTorch exports Mish before opset 18."""
    nodes = [
        helper.make_node("Softplus", ["x"], ["s"]),
        helper.make_node("Tanh", ["s"], ["t"]),
        helper.make_node("Mul", ["x", "t"], ["y"]),
    ]
    feeds = _feeds_with_extremes()
    native.set_enabled(False if numpy else None)
    try:
        exe = compare(_activation_model(nodes, opset=17), feeds, passes=["elementwise_chain"], rtol=2e-6)
        assert ops_of(exe) == ["ElementwiseChain"]
        got = exe.run(feeds)["y"]
    finally:
        native.set_enabled(None)
    x64 = feeds["x"].astype(np.float64)
    np.testing.assert_allclose(got, x64 * np.tanh(_softplus_reference(x64)), rtol=2e-6, atol=1e-30)


@pytest.mark.parametrize("op", ["Softplus", "Mish"])
def test_a_lone_softplus_or_mish_after_a_convolution_is_a_compiled_step(op: str) -> None:
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node(op, ["c"], ["y"])]
    init = [const("w", rng.standard_normal((3, 3, 3, 3)) * 2)]
    shape = [2, 3, 5, 16]
    m = model(nodes, [vi("x", shape=shape)], [vi("y", shape=shape)], init, opset=18)
    exe = compare(m, {"x": FEEDS["x"][:, :3]}, passes=["conv_fusion", "layout", "elementwise_chain"], rtol=2e-6)
    assert "ElementwiseChain" in ops_of(exe) and op not in ops_of(exe)


def test_the_compiled_softplus_keeps_tiny_values_and_the_infinities() -> None:
    nodes = [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Softplus", ["n"], ["y"])]
    x = np.zeros([2, 3, 5, 16], dtype=np.float32)
    x.reshape(-1)[: EXTREMES.size] = -EXTREMES
    x.reshape(-1)[EXTREMES.size : EXTREMES.size + 3] = [np.inf, -np.inf, np.nan]
    exe = compile_model(_activation_model(nodes), passes=["elementwise_chain"])
    assert ops_of(exe) == ["ElementwiseChain"]
    got = exe.run({"x": x})["y"].reshape(-1)
    want = _softplus_reference(-x.reshape(-1))
    n = EXTREMES.size
    np.testing.assert_allclose(got[:n][EXTREMES > -87], want[:n][EXTREMES > -87], rtol=2e-6)  # tiny ones too
    assert got[:n][EXTREMES < -87] == 0  # e^-100 is below FLT_MIN: no denormal
    assert got[n] == 0 and got[n + 1] == np.inf and np.isnan(got[n + 2])


def test_a_transposed_operand_is_read_from_a_copy_that_lives_through_the_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain's operand that is a view (an MLP-Mixer's token MLP output, transposed back) is copied contiguous for
    the kernel. The copy, and the argument block, were freed before the kernel ran (held only by a temporary), so
    the model read freed memory: MLP-Mixer differed from onnxruntime by 1.6e-3 to 3e-2, or NaN, depending on what
    reused it. Here every freed block is overwritten before the kernel runs."""
    lib = native.lib()
    if lib is None:
        pytest.skip(f"compiled kernels unavailable: {native.status()}")
    real = lib.ew

    def ew_after_reuse(ptr: int) -> None:
        import gc

        gc.collect()
        junk = [np.full(4096, np.nan, dtype=np.float32) for _ in range(64)]  # takes the freed memory back
        real(ptr)
        del junk

    monkeypatch.setattr(lib, "ew", ew_after_reuse)
    x = FEEDS["x"][0]  # [3, 5, 16]
    base = np.ascontiguousarray(FEEDS["z"][0].transpose(0, 2, 1))  # [3, 16, 5]
    view = base.transpose(0, 2, 1)
    from runtime.kernels.fused import ElementwiseChain

    chain = ElementwiseChain(None, {"steps": [CHAIN_BINARY["Add"], KIND_FULL, 0, 0], "scalars": [0.0]})
    np.testing.assert_array_equal(chain.compute_into(None, x, view), x + view)


def test_a_computed_operand_whose_tree_cannot_be_compiled_is_read_as_it_is() -> None:
    """relu(exp(x) + (p + q)) with p and q smaller than x: the tree of p + q would load broadcast leaves, which the
    chain does not do, so the chain reads p + q's output as an operand (as before trees) rather than stopping."""
    nodes = [
        helper.make_node("Exp", ["x"], ["e"]),
        helper.make_node("Add", ["p", "q"], ["n"]),
        helper.make_node("Add", ["e", "n"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    inputs = [vi("x", shape=SHAPE), vi("p", shape=[2, 3, 5, 1]), vi("q", shape=[16])]
    m = model(nodes, inputs, [vi("y", shape=SHAPE)], INIT)
    feeds = {"x": FEEDS["x"], "p": rng.standard_normal((2, 3, 5, 1)).astype(np.float32),
             "q": rng.standard_normal(16).astype(np.float32)}  # fmt: skip
    exe = compare(m, feeds, passes=["elementwise_chain"], rtol=2e-6)
    assert sorted(ops_of(exe)) == ["Add", "ElementwiseChain"]


def _gate(shape_a: list[object], shape_b: list[object]) -> onnx.ModelProto:
    """A WaveNet gate's product and the sum after it, over inputs whose lengths the graph names apart."""
    nodes = [
        helper.make_node("Tanh", ["a"], ["t"]),
        helper.make_node("Sigmoid", ["b"], ["s"]),
        helper.make_node("Mul", ["t", "s"], ["g"]),
        helper.make_node("Relu", ["g"], ["y"]),
    ]
    return model(nodes, [vi("a", shape=shape_a), vi("b", shape=shape_b)], [vi("y", shape=["n", "ly", 8])])


def test_a_product_of_operands_whose_dims_are_named_apart_chains_and_broadcasts_at_run_time() -> None:
    """The graph cannot tell ``la`` from ``lb``: the chain takes them as the output's shape, and where they differ
    at run time (one is 1) it broadcasts its result up, as the ops it replaced did."""
    m = _gate(["n", "la", 8], ["n", "lb", 8])
    feeds = {name: rng.standard_normal((2, 6, 8)).astype(np.float32) for name in "ab"}
    exe = compare(m, feeds, passes=["elementwise_chain"])
    assert ops_of(exe)[-1] == "ElementwiseChain" and "Mul" not in ops_of(exe), ops_of(exe)  # the product and Relu
    plain = compile_model(m, passes=[])
    for shapes in (((2, 1, 8), (2, 6, 8)), ((2, 6, 8), (2, 1, 8)), ((2, 4, 8), (2, 4, 8))):
        feeds = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in zip("ab", shapes, strict=True)}
        for _ in range(2):
            got, want = exe.run(dict(feeds))["y"], plain.run(dict(feeds))["y"]
            assert got.shape == want.shape == (2, max(shapes[0][1], shapes[1][1]), 8)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
