"""Small ONNX models built in code, with seeded initial weights: the digits CNN used by tests and benchmarks."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def digits_cnn(seed: int = 0, *, opset: int = 17, batch_norm: bool = True, dropout: float = 0.0) -> onnx.ModelProto:
    """A CNN for 8x8 single-channel digits: conv3x3(16)-BN-ReLU, conv3x3(32)-ReLU, maxpool 2, FC 64-ReLU, FC 10.

    Input ``image`` ``[batch, 1, 8, 8]``, output ``logits`` ``[batch, 10]``. He-normal weights, zero biases.
    """
    rng = np.random.default_rng(seed)

    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    inits = {
        "conv1.W": he((16, 1, 3, 3), 9),
        "conv1.B": np.zeros(16, np.float32),
        "conv2.W": he((32, 16, 3, 3), 16 * 9),
        "conv2.B": np.zeros(32, np.float32),
        "fc1.W": he((64, 32 * 4 * 4), 32 * 4 * 4),
        "fc1.B": np.zeros(64, np.float32),
        "fc2.W": he((10, 64), 64),
        "fc2.B": np.zeros(10, np.float32),
    }
    nodes = [helper.make_node("Conv", ["image", "conv1.W", "conv1.B"], ["c1"], pads=[1, 1, 1, 1], name="conv1")]
    x = "c1"
    if batch_norm:
        inits.update(
            {
                "bn1.scale": np.ones(16, np.float32),
                "bn1.bias": np.zeros(16, np.float32),
                "bn1.mean": np.zeros(16, np.float32),
                "bn1.var": np.ones(16, np.float32),
            }
        )
        nodes.append(
            helper.make_node(
                "BatchNormalization", [x, "bn1.scale", "bn1.bias", "bn1.mean", "bn1.var"], ["b1"], name="bn1"
            )
        )
        x = "b1"
    nodes += [
        helper.make_node("Relu", [x], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "conv2.W", "conv2.B"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2], name="pool2"),
        helper.make_node("Flatten", ["p2"], ["f"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["f", "fc1.W", "fc1.B"], ["h"], transB=1, name="fc1"),
        helper.make_node("Relu", ["h"], ["hr"], name="relu3"),
    ]
    x = "hr"
    if dropout > 0:
        nodes.append(helper.make_node("Dropout", [x], ["hd"], name="dropout", ratio=float(dropout)))
        if opset >= 12:
            nodes[-1] = helper.make_node("Dropout", [x, "dropout.ratio"], ["hd"], name="dropout")
            inits["dropout.ratio"] = np.asarray(dropout, np.float32)
        x = "hd"
    nodes.append(helper.make_node("Gemm", [x, "fc2.W", "fc2.B"], ["logits"], transB=1, name="fc2"))
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    opsets = [helper.make_opsetid("", opset)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name="appopt-runtime")
    model.ir_version = helper.find_min_ir_version_for(opsets)  # the oldest IR that works: readable by older runtimes
    onnx.checker.check_model(model)
    return model
