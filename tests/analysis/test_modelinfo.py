"""analysis.modelinfo: per-op FLOPs/params/bytes from ONNX graphs, checked against the architecture table.

Tolerance: 5% on GMACs and parameters. Table figures come from torchvision/papers; the graphs here are either the
light model-zoo nets shipped in the onnx wheel or reference graphs built below from the papers' layer tables
(weights as ConstantOfShape, so the protos stay a few kB). Differences within the tolerance come from counting
conventions (BatchNorm running statistics are parameters here; GoogLeNet's paper table vs the BVLC graph).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from analysis.modelinfo import OP_CLASSES, ModelCost, OpClass, analyse_onnx, cost_from_architecture, op_class
from benchmarks.models.convnets import MOBILENET_V2_BLOCKS
from optimiser.catalog import load_catalog
from optimiser.errors import SpecError

TOLERANCE = 0.05
LIGHT_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"

# --------------------------------------------------------------------------------------------------------------------
# Reference graphs from the papers' layer tables
# --------------------------------------------------------------------------------------------------------------------


class GraphBuilder:
    """Appends nodes and tiny constant weights; tracks nothing but names (shape inference does the rest)."""

    def __init__(self, opset: int = 17) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.opset = opset
        self._count = 0

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def const_int64(self, values: list[int]) -> str:
        name = self._name("i")
        self.initializers.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
        return name

    def weight(self, shape: list[int]) -> str:
        name = self._name("w")
        value = helper.make_tensor("value", TensorProto.FLOAT, [1], [0.01])
        self.nodes.append(helper.make_node("ConstantOfShape", [self.const_int64(shape)], [name], value=value))
        return name

    def op(self, op_type: str, inputs: list[str], **attrs: Any) -> str:
        out = self._name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def conv(
        self, x: str, cin: int, cout: int, k: int, stride: int = 1, pad: int = 0, groups: int = 1, bias: bool = False
    ) -> str:
        inputs = [x, self.weight([cout, cin // groups, k, k])] + ([self.weight([cout])] if bias else [])
        return self.op("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=groups)

    def bn(self, x: str, c: int) -> str:
        return self.op("BatchNormalization", [x, *(self.weight([c]) for _ in range(4))])

    def conv_bn(
        self,
        x: str,
        cin: int,
        cout: int,
        k: int,
        stride: int = 1,
        groups: int = 1,
        relu: bool = True,
        relu6: bool = False,
    ) -> str:
        y = self.bn(self.conv(x, cin, cout, k, stride, k // 2, groups), cout)
        if relu6:
            return self.op("Clip", [y, self.scalar(0.0), self.scalar(6.0)])
        return self.op("Relu", [y]) if relu else y

    def scalar(self, value: float) -> str:
        name = self._name("s")
        self.initializers.append(numpy_helper.from_array(np.array(value, dtype=np.float32), name))
        return name

    def linear(self, x: str, cin: int, cout: int) -> str:
        return self.op("Gemm", [x, self.weight([cout, cin]), self.weight([cout])], transB=1)

    def model(self, inputs: list[onnx.ValueInfoProto], output: str) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes,
            "reference",
            inputs,
            [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
            initializer=self.initializers,
        )
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])


def image_input(size: int = 224) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, size, size])


def resnet(blocks: list[int], bottleneck: bool) -> onnx.ModelProto:
    """torchvision ResNet (v1.5: stride on the 3×3 conv of a bottleneck)."""
    g = GraphBuilder()
    x = g.conv_bn("image", 3, 64, 7, stride=2)
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, count in enumerate(blocks):
        width = 64 * 2**stage
        cout = width * 4 if bottleneck else width
        for index in range(count):
            stride = 2 if index == 0 and stage > 0 else 1
            if bottleneck:
                y = g.conv_bn(x, cin, width, 1)
                y = g.conv_bn(y, width, width, 3, stride)
                y = g.conv_bn(y, width, cout, 1, relu=False)
            else:
                y = g.conv_bn(x, cin, width, 3, stride)
                y = g.conv_bn(y, width, cout, 3, relu=False)
            shortcut = g.conv_bn(x, cin, cout, 1, stride, relu=False) if (stride != 1 or cin != cout) else x
            x = g.op("Relu", [g.op("Add", [y, shortcut])])
            cin = cout
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    return g.model([image_input()], g.linear(x, cin, 1000))


def vgg(config: list[int | str]) -> onnx.ModelProto:
    """torchvision VGG without batch norm."""
    g = GraphBuilder()
    x, cin = "image", 3
    for item in config:
        if item == "M":
            x = g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        else:
            x = g.op("Relu", [g.conv(x, cin, int(item), 3, pad=1, bias=True)])
            cin = int(item)
    x = g.op("Flatten", [x])
    x = g.op("Relu", [g.linear(x, 512 * 7 * 7, 4096)])
    x = g.op("Relu", [g.linear(x, 4096, 4096)])
    return g.model([image_input()], g.linear(x, 4096, 1000))


VGG16: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]


def alexnet() -> onnx.ModelProto:
    """torchvision AlexNet (single tower)."""
    g = GraphBuilder()
    x = g.op("Relu", [g.conv("image", 3, 64, 11, stride=4, pad=2, bias=True)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    x = g.op("Relu", [g.conv(x, 64, 192, 5, pad=2, bias=True)])
    x = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])
    x = g.op("Relu", [g.conv(x, 192, 384, 3, pad=1, bias=True)])
    x = g.op("Relu", [g.conv(x, 384, 256, 3, pad=1, bias=True)])
    x = g.op("Relu", [g.conv(x, 256, 256, 3, pad=1, bias=True)])
    x = g.op("Flatten", [g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2])])
    x = g.op("Relu", [g.linear(x, 256 * 6 * 6, 4096)])
    x = g.op("Relu", [g.linear(x, 4096, 4096)])
    return g.model([image_input()], g.linear(x, 4096, 1000))


def mobilenet_v2() -> onnx.ModelProto:
    """torchvision MobileNetV2 (width 1.0)."""
    g = GraphBuilder()
    x = g.conv_bn("image", 3, 32, 3, stride=2, relu=False, relu6=True)
    cin = 32
    for t, c, n, s in MOBILENET_V2_BLOCKS:
        for index in range(n):
            stride = s if index == 0 else 1
            hidden = cin * t
            y = g.conv_bn(x, cin, hidden, 1, relu=False, relu6=True) if t != 1 else x
            y = g.conv_bn(y, hidden, hidden, 3, stride, groups=hidden, relu=False, relu6=True)
            y = g.conv_bn(y, hidden, c, 1, relu=False)
            x = g.op("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = g.conv_bn(x, cin, 1280, 1, relu=False, relu6=True)
    x = g.op("Flatten", [g.op("GlobalAveragePool", [x])])
    return g.model([image_input()], g.linear(x, 1280, 1000))


def transformer_encoder(
    layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq: int, lm_head: bool = False
) -> onnx.ModelProto:
    """BERT-style encoder (post-LN), or with lm_head a GPT-2-style stack with a tied output projection."""
    g = GraphBuilder(opset=20)
    table = g.weight([vocab, hidden])
    x = g.op("Gather", [table, "tokens"])
    x = g.op("Add", [x, g.op("Gather", [g.weight([max(seq, 512), hidden]), g.const_int64(list(range(seq)))])])
    if not lm_head:
        x = g.op("Add", [x, g.op("Gather", [g.weight([2, hidden]), g.const_int64([0] * seq)])])

    def layer_norm(v: str) -> str:
        return g.op("LayerNormalization", [v, g.weight([hidden]), g.weight([hidden])], axis=-1)

    def dense(v: str, cin: int, cout: int) -> str:
        return g.op("Add", [g.op("MatMul", [v, g.weight([cin, cout])]), g.weight([cout])])

    head = hidden // heads
    split = g.const_int64([0, 0, heads, head])
    merge = g.const_int64([0, 0, hidden])
    x = layer_norm(x)
    for _ in range(layers):
        q, k, v = (
            g.op("Transpose", [g.op("Reshape", [dense(x, hidden, hidden), split])], perm=[0, 2, 1, 3]) for _ in range(3)
        )
        scores = g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])])
        probs = g.op("Softmax", [g.op("Mul", [scores, g.scalar(head**-0.5)])], axis=-1)
        context = g.op("Reshape", [g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge])
        x = layer_norm(g.op("Add", [x, dense(context, hidden, hidden)]))
        y = dense(g.op("Gelu", [dense(x, hidden, ffn)]), ffn, hidden)
        x = layer_norm(g.op("Add", [x, y]))
    if lm_head:
        flat = g.op("Reshape", [x, g.const_int64([-1, hidden])])
        out = g.op("Gemm", [flat, table], transB=1)
    else:
        first = g.op("Gather", [x, g.const_int64([0])], axis=1)
        out = g.op("Tanh", [dense(first, hidden, hidden)])
    tokens = helper.make_tensor_value_info("tokens", TensorProto.INT64, ["batch", seq])
    return g.model([tokens], out)


REFERENCE_GRAPHS = {
    "resnet18": lambda: resnet([2, 2, 2, 2], bottleneck=False),
    "resnet50": lambda: resnet([3, 4, 6, 3], bottleneck=True),
    "resnet152": lambda: resnet([3, 8, 36, 3], bottleneck=True),
    "vgg16": lambda: vgg(VGG16),
    "alexnet": alexnet,
    "mobilenet_v2": mobilenet_v2,
    "bert_base": lambda: transformer_encoder(12, 768, 12, 3072, 30522, 128),
    "bert_large": lambda: transformer_encoder(24, 1024, 16, 4096, 30522, 128),
    "gpt2": lambda: transformer_encoder(12, 768, 12, 3072, 50257, 1024, lm_head=True),
}

#: light model-zoo file -> catalog architecture it instantiates
LIGHT_MODELS = {
    "light_resnet50.onnx": "resnet50",
    "light_vgg19.onnx": "vgg19",
    "light_densenet121.onnx": "densenet121",
    "light_squeezenet.onnx": "squeezenet1_1",
    "light_inception_v1.onnx": "googlenet",
}


def _assert_matches_table(cost: ModelCost, architecture_id: str) -> None:
    architecture = load_catalog().get_architecture(architecture_id)
    assert math.isclose(cost.gmacs_per_sample, architecture.gmacs, rel_tol=TOLERANCE), (
        architecture_id,
        cost.gmacs_per_sample,
        architecture.gmacs,
    )
    assert math.isclose(cost.params_m, architecture.params_m, rel_tol=TOLERANCE), (
        architecture_id,
        cost.params_m,
        architecture.params_m,
    )
    assert not cost.notes, cost.notes


@pytest.mark.parametrize("file_name", sorted(LIGHT_MODELS))
def test_light_model_zoo_matches_the_architecture_table(file_name: str) -> None:
    cost = analyse_onnx(LIGHT_DIR / file_name)
    _assert_matches_table(cost, LIGHT_MODELS[file_name])
    assert cost.by_class["conv"].flops > 0.95 * cost.flops  # CNNs are convolutions


@pytest.mark.parametrize("architecture_id", sorted(REFERENCE_GRAPHS))
def test_reference_graphs_match_the_architecture_table(architecture_id: str) -> None:
    cost = analyse_onnx(REFERENCE_GRAPHS[architecture_id](), batch_size=2)
    _assert_matches_table(cost, architecture_id)
    dominant: OpClass = "gemm" if architecture_id.startswith(("bert", "gpt")) else "conv"
    classes: tuple[OpClass, ...] = ("gemm", "gemv") if dominant == "gemm" else ("conv", "conv_dw")  # dw: convs too
    share = sum(cost.by_class[c].flops for c in classes) / cost.flops
    assert share > (0.85 if dominant == "gemm" else 0.9), (architecture_id, dominant, share)


def test_table_activation_estimates_come_from_the_graphs() -> None:
    """The activation_mbytes the table records are what modelinfo computes on those graphs (within 1%)."""
    catalog = load_catalog()
    sources = {
        **{arch: analyse_onnx(LIGHT_DIR / name) for name, arch in LIGHT_MODELS.items()},
        **{arch: analyse_onnx(build()) for arch, build in REFERENCE_GRAPHS.items()},
    }
    for architecture_id, cost in sources.items():
        recorded = catalog.get_architecture(architecture_id).activation_mbytes
        assert recorded is not None, architecture_id
        assert math.isclose(cost.activation_bytes / 1e6, recorded, rel_tol=0.01), (architecture_id, recorded)


# --------------------------------------------------------------------------------------------------------------------
# Batch and shape handling
# --------------------------------------------------------------------------------------------------------------------


def test_symbolic_batch_becomes_the_requested_batch() -> None:
    model = REFERENCE_GRAPHS["resnet18"]()
    one, eight = analyse_onnx(model, batch_size=1), analyse_onnx(model, batch_size=8)
    assert eight.input_shapes == {"image": [8, 3, 224, 224]} and eight.batch_size == 8
    assert math.isclose(eight.flops, 8 * one.flops, rel_tol=1e-9)
    assert math.isclose(eight.activation_bytes, 8 * one.activation_bytes, rel_tol=1e-9)
    assert eight.params == one.params and eight.param_bytes == one.param_bytes
    assert analyse_onnx(model).batch_size == 1


def test_fixed_batch_models_are_scaled_with_a_note() -> None:
    one = analyse_onnx(LIGHT_DIR / "light_resnet50.onnx")
    four = analyse_onnx(LIGHT_DIR / "light_resnet50.onnx", batch_size=4)
    assert one.input_shapes["gpu_0/data_0"] == [1, 3, 224, 224]
    assert four.input_shapes["gpu_0/data_0"] == [4, 3, 224, 224]
    assert math.isclose(four.macs, 4 * one.macs) and four.params == one.params
    assert any("fixed batch of 1" in note for note in four.notes)


def test_other_symbolic_dims_come_from_dims_or_are_noted() -> None:
    model = REFERENCE_GRAPHS["bert_base"]()
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "sequence"
    model.graph.input[0].type.tensor_type.shape.dim[1].ClearField("dim_value")
    guessed = analyse_onnx(model)
    assert any("'sequence'" in note and "assumed 1" in note for note in guessed.notes)
    assert guessed.input_shapes["tokens"] == [1, 1]


# --------------------------------------------------------------------------------------------------------------------
# Per-op counting rules on single-node graphs (expected values from the rule's definition)
# --------------------------------------------------------------------------------------------------------------------


def _single_node(
    op_type: str, inputs: dict[str, list[int]], weights: dict[str, list[int]], **attrs: Any
) -> onnx.ModelProto:
    initializers = [numpy_helper.from_array(np.zeros(shape, dtype=np.float32), name) for name, shape in weights.items()]
    node = helper.make_node(op_type, [*inputs, *weights], ["y"], **attrs)
    graph = helper.make_graph(
        [node],
        op_type,
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_conv_counts_two_flops_per_mac_plus_bias() -> None:
    n, cin, cout, size, k, groups = 2, 8, 16, 10, 3, 2
    cost = analyse_onnx(
        _single_node(
            "Conv",
            {"x": [n, cin, size, size]},
            {"w": [cout, cin // groups, k, k], "b": [cout]},
            kernel_shape=[k, k],
            pads=[1, 1, 1, 1],
            group=groups,
        )
    )
    outputs = n * cout * size * size
    assert cost.macs == outputs * (cin // groups) * k * k
    assert cost.flops == 2 * cost.macs + outputs
    assert cost.params == cout * (cin // groups) * k * k + cout
    assert cost.activation_bytes == outputs * 4
    op = cost.ops[0]
    assert op.param_bytes == cost.params * 4 and op.input_bytes == n * cin * size * size * 4
    assert cost.memory_bytes == op.input_bytes + op.output_bytes + op.param_bytes


def test_conv_transpose_counts_scattered_macs() -> None:
    cost = analyse_onnx(
        _single_node("ConvTranspose", {"x": [1, 4, 5, 5]}, {"w": [4, 6, 3, 3]}, kernel_shape=[3, 3], strides=[2, 2])
    )
    assert cost.macs == (1 * 4 * 5 * 5) * (6 * 3 * 3)


def test_gemm_and_batched_matmul() -> None:
    gemm = analyse_onnx(_single_node("Gemm", {"a": [7, 5]}, {"b": [7, 3], "c": [3]}, transA=1))
    assert gemm.macs == 5 * 3 * 7 and gemm.flops == 2 * gemm.macs + 5 * 3
    matmul = analyse_onnx(_single_node("MatMul", {"a": [4, 6, 32, 16], "b": [4, 6, 16, 8]}, {}))
    assert matmul.macs == 4 * 6 * 32 * 8 * 16 and matmul.by_class["gemm"].count == 1


def test_elementwise_norm_and_pool_rules() -> None:
    sum3 = analyse_onnx(_single_node("Sum", {"a": [2, 3], "b": [2, 3], "c": [2, 3]}, {}))
    assert sum3.flops == 2 * 6 and sum3.by_class["elementwise"].count == 1
    bn = analyse_onnx(
        _single_node("BatchNormalization", {"x": [2, 4, 3, 3]}, {name: [4] for name in ("s", "b", "m", "v")})
    )
    assert bn.flops == 2 * 2 * 4 * 3 * 3 and bn.params == 16
    pool = analyse_onnx(_single_node("MaxPool", {"x": [1, 2, 8, 8]}, {}, kernel_shape=[2, 2], strides=[2, 2]))
    assert pool.flops == (1 * 2 * 4 * 4) * 4 and pool.by_class["pool"].count == 1
    gap = analyse_onnx(_single_node("GlobalAveragePool", {"x": [1, 2, 8, 8]}, {}))
    assert gap.flops == 1 * 2 * 8 * 8
    reshape = analyse_onnx(_single_node("Flatten", {"x": [2, 3, 4]}, {}))
    assert reshape.flops == 0 and reshape.by_class["other"].count == 1 and reshape.memory_bytes == 2 * 96


def test_op_classes_cover_the_common_ops() -> None:
    assert op_class("Conv") == "conv" and op_class("MatMul") == "gemm" and op_class("Relu") == "elementwise"
    assert op_class("LayerNormalization") == "norm" and op_class("AveragePool") == "pool"
    assert op_class("Transpose") == "other" and op_class("SomethingNew") == "other"


def test_class_totals_add_up() -> None:
    cost = analyse_onnx(REFERENCE_GRAPHS["mobilenet_v2"]())
    assert set(cost.by_class) == set(OP_CLASSES)
    assert math.isclose(sum(c.flops for c in cost.by_class.values()), cost.flops)
    assert sum(c.count for c in cost.by_class.values()) == len(cost.ops)
    assert math.isclose(sum(c.bytes_moved for c in cost.by_class.values()), cost.memory_bytes)
    assert 0 < cost.arithmetic_intensity < math.inf


def test_large_initializers_and_external_data(tmp_path: Path) -> None:
    """Real weights (over the keep-value limit) count as parameters; external data is never read."""
    model = _single_node("Gemm", {"a": [3, 300]}, {"w": [300, 200], "b": [200]})
    path = tmp_path / "gemm.onnx"
    onnx.save_model(
        model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0
    )
    (tmp_path / "weights.bin").write_bytes(b"")  # truncated data must not matter: only shapes are read
    cost = analyse_onnx(path)
    assert cost.params == 300 * 200 + 200 and cost.macs == 3 * 300 * 200


def test_input_without_shape_is_noted() -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "unshaped",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    cost = analyse_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert cost.flops == 0 and any("'x' has no tensor shape" in note for note in cost.notes)


def test_unknown_domain_ops_are_noted_not_fatal() -> None:
    node = helper.make_node("MyOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    cost = analyse_onnx(model)
    assert cost.flops == 0 and any("com.example.MyOp" in note for note in cost.notes)


# --------------------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------------------


def test_missing_file_is_a_one_line_spec_error(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as raised:
        analyse_onnx(tmp_path / "absent.onnx")
    assert len(raised.value.lines) == 1 and "absent.onnx" in raised.value.lines[0]
    assert raised.value.exit_code == 2


@pytest.mark.parametrize("content", [b"definitely not protobuf \xff\xfe", b""])
def test_malformed_file_is_a_one_line_spec_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(content)
    with pytest.raises(SpecError) as raised:
        analyse_onnx(path)
    assert len(raised.value.lines) == 1 and str(path) in raised.value.lines[0]
    assert "\n" not in raised.value.lines[0]


def test_inconsistent_graph_is_noted_not_fatal() -> None:
    """Shape inference runs non-strict (a graph onnxruntime runs may still trip strict mode): what it cannot resolve
    is counted as 0 FLOPs and named in the notes."""
    cost = analyse_onnx(_single_node("MatMul", {"a": [2, 3], "b": [4, 5]}, {}))
    assert cost.flops == 0 and any("unresolved shapes" in note for note in cost.notes)


def test_bad_batch_size_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match="batch_size"):
        analyse_onnx(REFERENCE_GRAPHS["alexnet"](), batch_size=0)


# --------------------------------------------------------------------------------------------------------------------
# Named architectures and isolation from runtime/
# --------------------------------------------------------------------------------------------------------------------


def test_cost_from_architecture_is_the_same_type_with_the_table_figures() -> None:
    catalog = load_catalog()
    resnet50 = cost_from_architecture(catalog.get_architecture("resnet50"), batch_size=16)
    assert isinstance(resnet50, ModelCost) and resnet50.derived_from == "architecture"
    assert math.isclose(resnet50.gmacs_per_sample, 4.09) and resnet50.flops == 2 * resnet50.macs
    assert resnet50.input_shapes == {"input": [16, 3, 224, 224]} and resnet50.by_class["conv"].flops == resnet50.flops
    assert resnet50.activation_bytes == pytest.approx(150.2e6 * 16)
    bert = cost_from_architecture(catalog.get_architecture("bert_base"))
    assert bert.by_class["gemm"].macs == bert.macs and bert.params == 110_000_000
    no_activations = cost_from_architecture(catalog.get_architecture("inception_v3"))
    assert no_activations.memory_bytes == no_activations.param_bytes
    assert any("no activation estimate" in note for note in no_activations.notes)


def test_graph_and_table_costs_agree_for_the_same_model() -> None:
    catalog = load_catalog()
    from_graph = analyse_onnx(LIGHT_DIR / "light_vgg19.onnx", batch_size=4)
    from_table = cost_from_architecture(catalog.get_architecture("vgg19"), batch_size=4)
    assert math.isclose(from_graph.macs, from_table.macs, rel_tol=TOLERANCE)
    assert math.isclose(from_graph.activation_bytes, from_table.activation_bytes, rel_tol=0.01)


def test_modelinfo_does_not_import_the_runtime() -> None:
    code = (
        "import sys, analysis.modelinfo, optimiser.catalog; "
        "sys.exit(any(m == 'runtime' or m.startswith('runtime.') for m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    assert subprocess.run([sys.executable, "-c", code], env=env, check=False).returncode == 0


def test_a_recurrent_layer_counts_each_steps_products_and_gates() -> None:
    """An LSTM over 5 steps, 8 inputs, hidden 16, batch first: per step 4 gates x 16 x (8 + 16) MACs (it counted 0
    before)."""
    node = helper.make_node("LSTM", ["x", "W", "R"], ["y"], hidden_size=16, layout=1)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 5, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in {"W": (1, 64, 8), "R": (1, 64, 16)}.items()],
    )
    cost = analyse_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), batch_size=2)
    macs = 2 * 5 * 64 * (8 + 16)
    assert cost.macs == macs
    assert cost.flops == 2 * macs + 6 * (2 * 5 * 64)
    assert op_class("GRU") == "gemm" and cost.by_class["gemm"].macs == macs
