"""Conv + BatchNormalization (and per-channel Mul/Add) folding."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from runtime import compile_model
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(0)
W = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
B = rng.standard_normal(4).astype(np.float32)
STATS = [
    const("scale", rng.uniform(0.5, 2, 4)),
    const("shift", rng.standard_normal(4)),
    const("mean", rng.standard_normal(4)),
    const("var", rng.uniform(0.5, 2, 4)),
]
X = {"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)}
IO = ([vi("x", shape=[2, 3, 8, 8])], [vi("y", shape=[2, 4, 8, 8])])


def _bn_model(bias: bool = True, **bn_attrs: Any) -> onnx.ModelProto:
    conv_in = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [
        helper.make_node("Conv", conv_in, ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"], **bn_attrs),
    ]
    return model(nodes, *IO, [const("w", W), const("b", B), *STATS])


def test_batchnorm_after_conv_is_folded_into_its_weights() -> None:
    for bias in (True, False):
        exe = compare(_bn_model(bias, epsilon=1e-3), X, passes=["conv_bn_fusion"], rtol=1e-5)
        assert ops_of(exe) == ["Conv"]
        assert exe.stats["passes"]["conv_bn_fusion"] == 1


def test_training_batchnorm_and_shared_conv_outputs_stay() -> None:
    training = _bn_model(training_mode=1)
    training.graph.node[1].output.extend(["running_mean", "running_var"])
    exe = compile_model(training, passes=["conv_bn_fusion"])
    assert "BatchNormalization" in ops_of(exe)
    shared = model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"]),
            helper.make_node("Relu", ["c"], ["z"]),
        ],
        IO[0],
        [*IO[1], vi("z", shape=[2, 4, 8, 8])],
        [const("w", W), const("b", B), *STATS],
    )
    assert ops_of(compare(shared, X, passes=["conv_bn_fusion"])) == ["Conv", "BatchNormalization", "Relu"]


def test_per_channel_mul_and_add_after_conv_fold_too() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["y"]),
    ]
    m = model(
        nodes,
        *IO,
        [
            const("w", W),
            const("b", B),
            const("s", rng.uniform(0.5, 2, (4, 1, 1))),
            const("t", rng.standard_normal((1, 4, 1, 1))),
        ],
    )
    exe = compare(m, X, passes=["conv_bn_fusion"])
    assert ops_of(exe) == ["Conv"]


def test_a_mul_that_is_not_per_channel_stays() -> None:
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "s"], ["y"]),
    ]
    m = model(nodes, *IO, [const("w", W), const("b", B), const("s", rng.standard_normal((4, 8, 8)))])
    assert ops_of(compare(m, X, passes=["conv_bn_fusion"])) == ["Conv", "Mul"]


def _transposed_bn_model(group: int, bias: bool, weights_input: bool = False) -> tuple[onnx.ModelProto, dict]:
    """ConvTranspose (kernel 4, stride 2, padding 1: a DCGAN/VAE decoder's upsampling) then BatchNormalization."""
    cin, per_group = 4, 3
    m = per_group * group
    w = rng.standard_normal((cin, per_group, 4, 4)).astype(np.float32)
    feeds = {"x": rng.standard_normal((2, cin, 5, 5)).astype(np.float32)}
    inputs = [vi("x", shape=[2, cin, 5, 5])]
    inits = [
        const("b", rng.standard_normal(m).astype(np.float32)),
        const("scale", rng.uniform(0.5, 2, m)),
        const("shift", rng.standard_normal(m)),
        const("mean", rng.standard_normal(m)),
        const("var", rng.uniform(0.5, 2, m)),
    ]
    if weights_input:
        inputs.append(vi("w", shape=list(w.shape)))
        feeds["w"] = w
    else:
        inits.append(const("w", w))
    conv_in = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [
        helper.make_node("ConvTranspose", conv_in, ["c"], strides=[2, 2], pads=[1, 1, 1, 1], group=group),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["y"]),
    ]
    return model(nodes, inputs, [vi("y", shape=[2, m, 10, 10])], inits), feeds


def test_batchnorm_after_conv_transpose_folds_into_its_output_channels() -> None:
    for group, bias in ((1, True), (1, False), (2, True)):
        m, feeds = _transposed_bn_model(group, bias)
        exe = compare(m, feeds, passes=["conv_bn_fusion"], rtol=1e-5)
        assert ops_of(exe) == ["ConvTranspose"], (group, bias)


def test_a_conv_transpose_with_run_time_weights_keeps_its_batchnorm() -> None:
    m, feeds = _transposed_bn_model(1, True, weights_input=True)
    exe = compare(m, feeds, passes=["conv_bn_fusion"], rtol=1e-5)
    assert ops_of(exe) == ["ConvTranspose", "BatchNormalization"]
