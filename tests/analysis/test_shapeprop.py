"""analysis.shapeprop: exporter-style shape arithmetic resolves, so transformer blocks count their FLOPs.

The graphs are written the way PyTorch's TorchScript exporter writes them: every reshape target is arithmetic on
``Shape`` (``Shape -> Gather -> Div -> Cast -> Unsqueeze -> Concat -> Reshape``), ``chunk`` is ``Slice`` (or
``Split``) with computed sizes, and the attention mask is ``ConstantOfShape``/``Range``/``Expand`` of computed
shapes. The expected FLOPs are counted by hand from ``modelinfo``'s rules (2 per multiply-add, one per elementwise
output, 5 per softmax output), so a node left at 0 FLOPs shows up as a shortfall.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from analysis.modelinfo import NONDETERMINISTIC_OPS, analyse_onnx
from analysis.shapeprop import propagate_shapes

HIDDEN, HEADS = 16, 2
HEAD_DIM = HIDDEN // HEADS


class _Graph:
    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def op(self, op_type: str, *inputs: str, **attrs: object) -> str:
        return self.ops(op_type, *inputs, outputs=1, **attrs)[0]

    def ops(self, op_type: str, *inputs: str, outputs: int, **attrs: object) -> list[str]:
        self._count += 1
        names = [f"{op_type}_{self._count}_{i}" for i in range(outputs)]
        node = helper.make_node(op_type, list(inputs), names, name=f"{op_type}_{self._count}")
        node.attribute.extend(helper.make_attribute(key, value) for key, value in attrs.items())
        self.nodes.append(node)
        return names

    def const(self, value: object, dtype: type = np.int64) -> str:
        """A ``Constant`` node, as the exporter writes its scalars and axes."""
        self._count += 1
        name = f"c_{self._count}"
        tensor = numpy_helper.from_array(np.array(value, dtype=dtype), name)
        self.nodes.append(helper.make_node("Constant", [], [name], value=tensor))
        return name

    def weight(self, *shape: int) -> str:
        name = f"w_{len(self.initializers)}"
        data = np.random.default_rng(len(self.initializers)).standard_normal(shape).astype(np.float32)
        self.initializers.append(numpy_helper.from_array(data, name))
        return name

    def dim(self, tensor: str, axis: int) -> str:
        """``x.size(axis)`` as the exporter writes it: a 0-d int64 from Shape -> Gather."""
        return self.op("Gather", self.op("Shape", tensor), self.const(axis), axis=0)

    def unsqueeze(self, scalar: str) -> str:
        return self.op("Unsqueeze", scalar, self.const([0]))


def exporter_style_attention(chunk: str) -> onnx.ModelProto:
    """One self-attention block over ``x: [batch, seq, HIDDEN]`` with symbolic batch and sequence axes.

    ``chunk``: ``"slice"`` (``torch.chunk`` as three Slices with ends from ``Shape``) or ``"split"`` (``Split`` whose
    sizes are computed from ``Shape``).
    """
    g = _Graph()
    qkv = g.op("Add", g.op("MatMul", "x", g.weight(HIDDEN, 3 * HIDDEN)), g.weight(3 * HIDDEN))
    batch, seq = g.dim("x", 0), g.dim("x", 1)
    width = g.op("Gather", g.op("Shape", qkv), g.const([2]), axis=0)  # 1-d, as Slice's ends want
    third = g.op("Div", width, g.const([3]))
    if chunk == "slice":
        ends = [g.op("Mul", third, g.const([k])) for k in (1, 2, 3)]
        starts = [g.const([0]), ends[0], ends[1]]
        parts = [g.op("Slice", qkv, s, e, g.const([2])) for s, e in zip(starts, ends, strict=True)]
    else:
        sizes = g.op("Concat", third, third, third, axis=0)
        parts = g.ops("Split", qkv, sizes, outputs=3, axis=2)
    head_dim = g.op("Cast", g.op("Div", g.dim(parts[0], 2), g.const(HEADS)), to=TensorProto.INT64)
    heads_shape = g.op("Concat", g.unsqueeze(batch), g.unsqueeze(seq), g.const([HEADS]), g.unsqueeze(head_dim), axis=0)
    q, k, v = (g.op("Transpose", g.op("Reshape", p, heads_shape), perm=[0, 2, 1, 3]) for p in parts)
    scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    scaled = g.op("Mul", scores, g.const(HEAD_DIM**-0.5, np.float32))
    # a causal mask of computed shape: Range(seq) compared with itself, expanded to [batch, heads, seq, seq]
    positions = g.op("Range", g.const(0), seq, g.const(1))
    causal = g.op("Less", g.op("Unsqueeze", positions, g.const([0])), g.op("Unsqueeze", positions, g.const([1])))
    fill = g.op("ConstantOfShape", g.op("Shape", causal), value=numpy_helper.from_array(np.array([-1e4], np.float32)))
    zeros = g.op("ConstantOfShape", g.op("Shape", causal), value=numpy_helper.from_array(np.array([0], np.float32)))
    mask_shape = g.op("Concat", g.unsqueeze(batch), g.const([HEADS]), g.unsqueeze(seq), g.unsqueeze(seq), axis=0)
    mask = g.op("Expand", g.op("Where", causal, fill, zeros), mask_shape)
    probs = g.op("Softmax", g.op("Add", scaled, mask), axis=-1)
    context = g.op("Transpose", g.op("MatMul", probs, v), perm=[0, 2, 1, 3])
    merged_shape = g.op("Concat", g.unsqueeze(batch), g.unsqueeze(seq), g.const([HIDDEN]), axis=0)
    g.op("MatMul", g.op("Reshape", context, merged_shape), g.weight(HIDDEN, HIDDEN))
    g.nodes[-1].output[0] = "y"
    graph = helper.make_graph(
        g.nodes,
        "attention",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", HIDDEN])],
        g.initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def attention_flops(batch: int, seq: int, chunk: str) -> dict[str, float]:
    """FLOPs of ``exporter_style_attention`` by op class, counted by hand."""
    projections = 2 * batch * seq * HIDDEN * 3 * HIDDEN + 2 * batch * seq * HIDDEN * HIDDEN
    attention = 2 * (2 * batch * HEADS * seq * seq * HEAD_DIM)
    scores = batch * HEADS * seq * seq
    # qkv bias; scale and mask add; softmax (5 each); Less and Where on [seq, seq]
    elementwise = batch * seq * 3 * HIDDEN + 2 * scores + 5 * scores + 2 * seq * seq
    # the shape arithmetic runs too, one FLOP per element: Div for a third (and three Muls for the Slice ends),
    # Div for the head width
    elementwise += 1 + (3 if chunk == "slice" else 0) + 1
    return {"gemm": projections + attention, "elementwise": elementwise}


@pytest.mark.parametrize("chunk", ["slice", "split"])
@pytest.mark.parametrize(("batch", "seq"), [(1, 8), (3, 5)])
def test_exporter_style_attention_counts_every_product(chunk: str, batch: int, seq: int) -> None:
    cost = analyse_onnx(exporter_style_attention(chunk), batch_size=batch, dims={"seq": seq})
    expected = attention_flops(batch, seq, chunk)
    assert cost.unresolved_nodes == []
    assert cost.by_class["gemm"].flops == expected["gemm"]
    assert cost.by_class["elementwise"].flops == expected["elementwise"]
    assert cost.flops == expected["gemm"] + expected["elementwise"]
    # the output of the final Reshape -> MatMul chain is known: [batch, seq, HIDDEN] floats
    assert cost.ops[-1].output_bytes == batch * seq * HIDDEN * 4


def test_propagation_fills_what_whole_graph_inference_leaves_open() -> None:
    """The Reshape after a Div on shapes is where ``infer_shapes(data_prop=True)`` stops; propagation resolves it."""
    model = exporter_style_attention("slice")
    model.graph.input[0].CopyFrom(helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, HIDDEN]))
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    known = {
        v.name for v in inferred.graph.value_info if all(d.HasField("dim_value") for d in v.type.tensor_type.shape.dim)
    }
    reshapes = [n.output[0] for n in model.graph.node if n.op_type == "Reshape"]
    assert any(name not in known for name in reshapes)  # the gap this module exists for

    shapes = {"x": (2, 4, HIDDEN)} | {t.name: tuple(t.dims) for t in model.graph.initializer}
    types = {"x": TensorProto.FLOAT} | {t.name: t.data_type for t in model.graph.initializer}
    initializers = {t.name: t for t in model.graph.initializer}
    added = propagate_shapes(model, shapes, types, initializers, never_evaluated=NONDETERMINISTIC_OPS)
    assert added > 0
    assert [shapes[name] for name in reshapes] == [(2, 4, HEADS, HEAD_DIM)] * 3 + [(2, 4, HIDDEN)]
    assert shapes["y"] == (2, 4, HIDDEN)


def test_an_op_without_an_inference_rule_leaves_its_outputs_open_and_is_reported() -> None:
    g = _Graph()
    hidden = g.op("MatMul", "x", g.weight(HIDDEN, HIDDEN))
    g.nodes.append(helper.make_node("Mystery", [hidden], ["m"], domain="example.custom", name="mystery"))
    g.nodes.append(helper.make_node("MatMul", ["m", g.weight(HIDDEN, HIDDEN)], ["y"], name="after"))
    graph = helper.make_graph(
        g.nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", HIDDEN])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        g.initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)]
    )
    cost = analyse_onnx(model, batch_size=4)
    assert cost.unresolved_nodes == ["after"]
    assert any("unresolved shapes" in note and "after" in note for note in cost.notes)


def test_torch_exported_attention_block_counts_its_matrix_products() -> None:
    torch = pytest.importorskip("torch", reason="torch: extra not installed")
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
            self.proj = nn.Linear(HIDDEN, HIDDEN)

        def forward(self, x: Any) -> Any:
            b, s, h = x.shape
            q, k, v = (t.reshape(b, s, HEADS, h // HEADS).transpose(1, 2) for t in self.qkv(x).chunk(3, dim=-1))
            scores = (q @ k.transpose(-2, -1)) / (h // HEADS) ** 0.5
            context = scores.softmax(-1) @ v
            return self.proj(context.transpose(1, 2).reshape(b, s, h))

    torch.manual_seed(0)
    buffer = io.BytesIO()
    torch.onnx.export(
        Block().eval(),
        (torch.zeros(2, 6, HIDDEN),),
        buffer,
        dynamo=False,
        opset_version=17,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}},
    )
    batch, seq = 3, 10
    cost = analyse_onnx(onnx.load_from_string(buffer.getvalue()), batch_size=batch, dims={"seq": seq})
    assert cost.unresolved_nodes == []
    products = 2 * batch * seq * HIDDEN * 4 * HIDDEN + 2 * (2 * batch * HEADS * seq * seq * HEAD_DIM)
    assert cost.by_class["gemm"].flops == products
    assert cost.by_class["norm"].flops == 0
    assert cost.flops >= products + 5 * batch * HEADS * seq * seq  # + softmax, biases and the scale


def test_exporter_style_attention_cuts_into_its_matrix_product_units() -> None:
    """``graph_units`` reads the same resolved shapes: both attention products and both projections are units."""
    from analysis.unitgraph import graph_units

    seq = 8
    units = graph_units(exporter_style_attention("split"), {"seq": seq})
    bmm = [u.dims for u in units if u.kind == "bmm"]
    gemm = sorted((u.dims["m"], u.dims["k"], u.dims["n"]) for u in units if u.kind == "gemm")
    assert bmm == [{"b": HEADS, "m": seq, "k": HEAD_DIM, "n": seq}, {"b": HEADS, "m": seq, "k": seq, "n": HEAD_DIM}]
    assert gemm == [(seq, HIDDEN, HIDDEN), (seq, HIDDEN, 3 * HIDDEN)]
