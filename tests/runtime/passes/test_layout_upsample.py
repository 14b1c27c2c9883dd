"""Decoders stay NHWC: ConvTranspose, Resize, Concat and the elementwise ops between NHWC convolutions change
layout only at the graph's edges, and compute what the unoptimised graph computes."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model, native
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare

rng = np.random.default_rng(18)
needs_native = pytest.mark.skipif(native.lib() is None, reason="layout 'auto' needs the compiled kernels")


def _unet(batch: int, linear: str) -> onnx.ModelProto:
    """conv -> pool -> conv -> ConvTranspose (k2 s2) -> concat(skip) -> conv -> Resize x2 -> concat -> conv."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("MaxPool", ["ar"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", "w2"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("ConvTranspose", ["c", "wt", "bt"], ["up"], strides=[2, 2], kernel_shape=[2, 2]),
        helper.make_node("Concat", ["up", "p"], ["cat1"], axis=1),
        helper.make_node("Conv", ["cat1", "w3"], ["d"], pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["d", "", "scales"], ["r"], mode="linear", coordinate_transformation_mode=linear),
        helper.make_node("Concat", ["r", "ar"], ["cat2"], axis=1),
        helper.make_node("Sigmoid", ["cat2"], ["s"]),
        helper.make_node("Conv", ["s", "w4"], ["y"]),
    ]
    init = [
        const("w1", rng.standard_normal((8, 3, 3, 3)) * 0.3),
        const("b1", rng.standard_normal(8)),
        const("w2", rng.standard_normal((12, 8, 3, 3)) * 0.2),
        const("wt", rng.standard_normal((12, 5, 2, 2)) * 0.3),
        const("bt", rng.standard_normal(5)),
        const("w3", rng.standard_normal((6, 13, 3, 3)) * 0.2),
        const("scales", [1, 1, 2, 2]),
        const("w4", rng.standard_normal((2, 14, 1, 1))),
    ]
    return model(nodes, [vi("x", shape=[batch, 3, 20, 12])], [vi("y", shape=[batch, 2, 20, 12])], init)


def _yolo_neck(batch: int) -> onnx.ModelProto:
    """stride-2 conv -> 1x1 lateral -> nearest x2 -> concat with the finer map -> conv -> sigmoid -> flatten."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["p3"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["p3", "w2"], ["p4"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Conv", ["p4", "w3"], ["lat"]),
        helper.make_node(
            "Resize",
            ["lat", "", "scales"],
            ["up"],
            mode="nearest",
            coordinate_transformation_mode="asymmetric",
            nearest_mode="floor",
        ),
        helper.make_node("Concat", ["up", "p3"], ["cat"], axis=1),
        helper.make_node("Conv", ["cat", "w4", "b4"], ["det"]),
        helper.make_node("Sigmoid", ["det"], ["sig"]),
        helper.make_node("Reshape", ["sig", "flat"], ["y"]),
    ]
    init = [
        const("w1", rng.standard_normal((8, 3, 3, 3)) * 0.3),
        const("w2", rng.standard_normal((16, 8, 3, 3)) * 0.2),
        const("w3", rng.standard_normal((8, 16, 1, 1)) * 0.3),
        const("scales", [1, 1, 2, 2]),
        const("w4", rng.standard_normal((9, 16, 1, 1)) * 0.3),
        const("b4", rng.standard_normal(9)),
        const("flat", [batch, 9, -1], np.int64),
    ]
    return model(nodes, [vi("x", shape=[batch, 3, 15, 19])], [vi("y", shape=[batch, 9, 80])], init)


def _autoencoder(batch: int | str) -> onnx.ModelProto:
    """strided conv encoder, ConvTranspose decoder with output padding, ReLU and a one-channel sigmoid output."""
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["e1"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["e1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["e2"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["e2"], ["r2"]),
        helper.make_node(
            "ConvTranspose", ["r2", "d1", "db1"], ["u1"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]
        ),
        helper.make_node("Relu", ["u1"], ["ur"]),
        helper.make_node(
            "ConvTranspose", ["ur", "d2"], ["u2"], strides=[2, 2], pads=[1, 1, 1, 1], output_padding=[1, 1]
        ),
        helper.make_node("Sigmoid", ["u2"], ["y"]),
    ]
    init = [
        const("w1", rng.standard_normal((16, 1, 3, 3)) * 0.3),
        const("w2", rng.standard_normal((24, 16, 3, 3)) * 0.2),
        const("d1", rng.standard_normal((24, 16, 3, 3)) * 0.2),
        const("db1", rng.standard_normal(16)),
        const("d2", rng.standard_normal((16, 1, 3, 3)) * 0.3),
    ]
    return model(nodes, [vi("x", shape=[batch, 1, 12, 20])], [vi("y", shape=[batch, 1, 12, 20])], init)


@needs_native
def test_a_dynamic_batch_decoder_gets_compiled_activation_chains() -> None:
    """A named batch dim (as torch.onnx exports) does not keep the lone Relu/Sigmoid after a fused op unfused."""
    m = _autoencoder("N")
    exe = compare(m, {"x": rng.standard_normal((3, 1, 12, 20)).astype(np.float32)}, rtol=1e-4)
    ops = Counter(n.op_type for n in exe.model.graph.nodes)
    assert ops["ElementwiseChain"] == 2 and not ops["Relu"] and not ops["Sigmoid"]


def _feeds(m: onnx.ModelProto) -> dict[str, np.ndarray]:
    dims = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    return {"x": rng.standard_normal(dims).astype(np.float32)}


def _layout_ops(m: onnx.ModelProto, layout: str = "auto") -> Counter[str]:
    exe = compare(m, _feeds(m), rtol=1e-4, layout=layout)
    return Counter(n.op_type for n in exe.model.graph.nodes)


@needs_native
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("linear", ["pytorch_half_pixel", "align_corners", "half_pixel"])
def test_unet_decoder_changes_layout_only_at_the_edges(batch: int, linear: str) -> None:
    ops = _layout_ops(_unet(batch, linear))
    assert ops["ToNhwc"] == 1 and ops["ToNchw"] == 1
    assert ops["NhwcConvTranspose"] == 1 and ops["NhwcResize"] == 1 and ops["NhwcConcat"] == 2
    assert not ops["ConvTranspose"] and not ops["Resize"] and not ops["Concat"]


@needs_native
def test_unet_upsampled_parts_are_written_into_their_concat() -> None:
    m = _unet(2, "half_pixel")
    exe = compare(m, _feeds(m), rtol=1e-4)
    static = next(iter(exe.plan._static.values()))  # type: ignore[union-attr]
    producers = {n.outputs[0]: n.op_type for n in exe.model.graph.nodes}
    assert sorted(producers[v] for v in static.memory.placed) == ["NhwcConvTranspose", "NhwcResize"]


@needs_native
@pytest.mark.parametrize("batch", [1, 3])
def test_yolo_neck_keeps_nhwc_until_the_flatten(batch: int) -> None:
    ops = _layout_ops(_yolo_neck(batch))
    assert ops["ToNhwc"] == 1 and ops["ToNchw"] == 1  # the last: before the Reshape, which needs NCHW order
    assert ops["NhwcResize"] == 1 and ops["NhwcConcat"] == 1 and not ops["Resize"]


@needs_native
@pytest.mark.parametrize("batch", [1, 2])
def test_convtranspose_decoder_stays_nhwc(batch: int) -> None:
    ops = _layout_ops(_autoencoder(batch))
    assert ops["ToNhwc"] == 1 and ops["ToNchw"] == 1
    assert ops["NhwcConvTranspose"] == 2 and not ops["ConvTranspose"]


def test_forced_nhwc_decoders_run_on_numpy_too(numpy_only: None) -> None:
    for m in (_unet(2, "pytorch_half_pixel"), _autoencoder(1)):
        ops = _layout_ops(m, layout="nhwc")
        assert ops["ToNhwc"] == 1 and ops["ToNchw"] == 1


def test_a_lone_convtranspose_or_resize_keeps_nchw() -> None:
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w"], ["t"], strides=[2, 2]),
        helper.make_node("Resize", ["t", "", "scales"], ["y"], mode="nearest"),
    ]
    init = [const("w", rng.standard_normal((3, 4, 2, 2))), const("scales", [1, 1, 2, 2])]
    m = model(nodes, [vi("x", shape=[1, 3, 5, 5])], [vi("y", shape=[1, 4, 20, 20])], init)
    exe = compile_model(m, layout="nhwc")
    assert [n.op_type for n in exe.model.graph.nodes] == ["ConvTranspose", "Resize"]


@needs_native
@pytest.mark.parametrize("batch", [1, 2])
def test_a_decoder_of_conv_transposes_alone_seeds_nhwc(batch: int) -> None:
    """A VAE/DCGAN decoder: no convolution before its first ConvTranspose, activations between them."""
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w1", "b1"], ["a"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["a"], ["r"], alpha=0.2),
        helper.make_node("ConvTranspose", ["r", "w2"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Tanh", ["t"], ["y"]),
    ]
    init = [
        const("w1", rng.standard_normal((8, 6, 4, 4)) * 0.2),
        const("b1", rng.standard_normal(6)),
        const("w2", rng.standard_normal((6, 3, 4, 4)) * 0.2),
    ]
    m = model(nodes, [vi("x", shape=[batch, 8, 4, 4])], [vi("y", shape=[batch, 3, 16, 16])], init)
    ops = _layout_ops(m)
    assert ops["ToNhwc"] == 1 and ops["ToNchw"] == 1 and ops["NhwcConvTranspose"] == 2 and not ops["ConvTranspose"]
