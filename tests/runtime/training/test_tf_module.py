"""``OnnxTfGraph``: an ONNX graph run and trained as TensorFlow ops, channels-last inside, ONNX's layout outside."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from runtime.training import TrainingError

tf = pytest.importorskip("tensorflow", reason="tensorflow: extra not installed")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed (the reference)")
try:  # TensorFlow fixes its threads at first use per process: the keras trainer tests pin 1 intra, 1 inter too
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
except RuntimeError:
    pass  # already running (another test module started it)

from runtime.training.tf_module import OnnxTfGraph  # noqa: E402


def _conv_net() -> onnx.ModelProto:
    """Conv (padded) -> BatchNorm -> Relu -> grouped Conv (2 groups, uneven pads) -> depthwise Conv (multiplier 2,
    strided) -> AveragePool (padded, pads not counted, ceil_mode) + 0.5 * MaxPool (padded) -> Flatten (NCHW order)
    -> Gemm."""
    rng = np.random.default_rng(0)

    def init(name: str, *shape: int, low: float = -0.5, high: float = 0.5) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.uniform(low, high, shape).astype(np.float32), name)

    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], strides=[1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["n1"], name="bn"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[0, 1, 1, 0], group=2, name="grouped"),
        helper.make_node("Conv", ["c2", "w3"], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2], group=4, name="dw"),
        helper.make_node(
            "AveragePool",
            ["c3"],
            ["p1"],
            kernel_shape=[3, 3],
            pads=[1, 0, 0, 0],
            strides=[2, 2],
            ceil_mode=1,
            name="avg",
        ),
        helper.make_node("MaxPool", ["c3"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2], name="max"),
        helper.make_node("Mul", ["p2", "half"], ["p3"], name="scale"),
        helper.make_node("Add", ["p1", "p3"], ["s"], name="sum"),
        helper.make_node("Flatten", ["s"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], transB=1, name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "convs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2, 7, 7])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["n", 3])],
        [
            init("w1", 4, 2, 3, 3),
            init("b1", 4),
            init("g", 4, low=0.5, high=1.5),
            init("beta", 4),
            init("mean", 4),
            init("var", 4, low=0.5, high=1.5),
            init("w2", 4, 2, 2, 2),
            init("w3", 8, 1, 3, 3),
            numpy_helper.from_array(np.array(0.5, np.float32), "half"),
            init("fc", 3, 8 * 2 * 2),
            init("fcb", 3),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_channels_last_inside_computes_what_onnx_layout_computes_and_weights_go_back_unchanged() -> None:
    proto = _conv_net()
    x = np.random.default_rng(1).standard_normal((3, 2, 7, 7)).astype(np.float32)
    expected = _reference(proto, x, "logits")
    graph = OnnxTfGraph(proto)
    got = graph([tf.constant(x)], training=False)["logits"].numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    # Conv weights are held as TensorFlow filters and come back in ONNX's layout
    assert tuple(graph.variables["w1"].shape) == (3, 3, 2, 4)
    for init in proto.graph.initializer:
        if init.name in graph.variables:
            np.testing.assert_array_equal(graph.values()[init.name], numpy_helper.to_array(init))
    assert not graph.variables["mean"].trainable and graph.variables["w3"].trainable
    assert "half" not in graph.variables  # a float scalar is a constant, as torch's module has it


def test_batch_norm_trains_on_batch_statistics_and_updates_the_running_ones_as_torch_does() -> None:
    proto = _conv_net()
    x = np.random.default_rng(2).standard_normal((5, 2, 7, 7)).astype(np.float32)
    graph = OnnxTfGraph(proto)
    before = graph.values()
    graph([tf.constant(x)], training=True)
    after = graph.values()
    values = {i.name: numpy_helper.to_array(i) for i in proto.graph.initializer}
    c1 = _reference(proto, x, "c1")
    batch_mean, batch_var = c1.mean(axis=(0, 2, 3)), c1.var(axis=(0, 2, 3), ddof=1)  # running: unbiased
    np.testing.assert_allclose(after["mean"], 0.9 * values["mean"] + 0.1 * batch_mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after["var"], 0.9 * values["var"] + 0.1 * batch_var, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(after["w1"], before["w1"])  # a forward pass trains nothing
    graph([tf.constant(x)], training=False)
    np.testing.assert_array_equal(graph.values()["mean"], after["mean"])  # inference leaves them alone


def _reference(proto: onnx.ModelProto, x: np.ndarray, output: str) -> np.ndarray:
    """onnxruntime's value of ``output`` (an intermediate made a graph output), in inference mode."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    if output not in [o.name for o in model.graph.output]:
        model.graph.output.append(helper.make_tensor_value_info(output, TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.asarray(session.run([output], {"x": x})[0])


def test_an_op_outside_the_table_names_the_node_and_the_ops_it_knows() -> None:
    proto = _conv_net()
    proto.graph.node[2].op_type = "Hardmax"
    with pytest.raises(TrainingError, match=r"node 'relu': tensorflow cannot train op 'Hardmax' \(it knows .*Conv"):
        OnnxTfGraph(proto)


def test_a_bad_node_fails_naming_it() -> None:
    proto = _conv_net()
    proto.graph.node[4].attribute.append(helper.make_attribute("auto_pad", "SAME_UPPER"))
    graph = OnnxTfGraph(proto)
    with pytest.raises(TrainingError, match=r"node 'dw' \(Conv\): auto_pad"):
        graph([tf.zeros((1, 2, 7, 7))])
