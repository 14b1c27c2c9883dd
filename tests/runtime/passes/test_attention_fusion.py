"""MatMul -> scale -> mask -> Softmax -> MatMul becomes one FusedAttention reading Q, K and V in place; look-alikes
it cannot handle stay as they are."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from runtime import compile_model
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(7)
PASSES = ["attention_fusion", "dead_node_elimination"]


def _packed_qkv(
    batch: int = 2,
    seq: int = 9,
    heads: int = 3,
    dim: int = 8,
    mask_shape: tuple[int, ...] | None = None,
    scale_op: str = "Mul",
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The breadth suite's attention as torch exports it: one packed QKV tensor, Reshape, Transpose, three
    Gathers, K transposed, scaled scores, an optional additive mask, heads merged by Transpose + Reshape."""
    hidden = heads * dim
    scale = 1.0 / math.sqrt(dim)
    nodes = [
        helper.make_node("Reshape", ["x", "split"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[2, 0, 3, 1, 4]),
        helper.make_node("Gather", ["t", "i0"], ["q"], axis=0),
        helper.make_node("Gather", ["t", "i1"], ["k"], axis=0),
        helper.make_node("Gather", ["t", "i2"], ["v"], axis=0),
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s0"]),
        helper.make_node(scale_op, ["s0", "c"], ["s1"]),
    ]
    inits = [
        const("split", [batch, seq, 3, heads, dim], np.int64),
        *(const(f"i{j}", j, np.int64) for j in range(3)),
        const("c", scale if scale_op == "Mul" else 1.0 / scale),
        const("merge", [batch, seq, hidden], np.int64),
    ]
    inputs = [vi("x", shape=[batch, seq, 3 * hidden])]
    feeds = {"x": rng.standard_normal((batch, seq, 3 * hidden)).astype(np.float32)}
    scores = "s1"
    if mask_shape is not None:
        nodes.append(helper.make_node("Add", ["s1", "mask"], ["s2"]))
        inputs.append(vi("mask", shape=list(mask_shape)))
        keep = rng.random(mask_shape) > 0.3
        feeds["mask"] = np.where(keep, 0.0, -10000.0).astype(np.float32)
        scores = "s2"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=-1),
        helper.make_node("MatMul", ["p", "v"], ["o"]),
        helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "merge"], ["y"]),
    ]
    return model(nodes, inputs, [vi("y", shape=[batch, seq, hidden])], inits), feeds


@pytest.mark.parametrize(
    ("batch", "mask_shape", "scale_op"),
    [
        (1, None, "Mul"),
        (2, (2, 1, 1, 9), "Mul"),  # a padding mask per sequence, broadcast over heads and queries
        (3, (9, 9), "Div"),  # one additive mask for every sequence and head
        (2, (2, 3, 9, 9), "Mul"),  # a full mask
    ],
)
def test_packed_qkv_attention_fuses_into_one_node(
    batch: int, mask_shape: tuple[int, ...] | None, scale_op: str
) -> None:
    m, feeds = _packed_qkv(batch=batch, mask_shape=mask_shape, scale_op=scale_op)
    exe = compare(m, feeds, passes=PASSES)
    assert ops_of(exe) == ["Reshape", "FusedAttention", "Reshape"]
    fused = exe.model.graph.nodes[1]
    assert fused.inputs[:3] == ["r", "r", "r"]  # Q, K and V read in place from the packed tensor
    assert fused.attrs["out_perm"] == [0, 2, 1, 3]


def _where_masked(keep: bool) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """``scores.masked_fill(cond, fill)`` as exported: Where(cond, fill, scores), or Where(cond, scores, fill)."""
    m, feeds = _packed_qkv(batch=2)
    softmax = next(n for n in m.graph.node if n.op_type == "Softmax")
    softmax.input[0] = "s_where"
    branches = ["s1", "fill"] if keep else ["fill", "s1"]
    m.graph.node.append(helper.make_node("Where", ["cond", *branches], ["s_where"]))
    m.graph.input.append(vi("cond", TensorProto.BOOL, [2, 1, 1, 9]))
    m.graph.initializer.append(const("fill", np.finfo(np.float32).min))
    cond = rng.random((2, 1, 1, 9)) > 0.3
    feeds["cond"] = cond if keep else ~cond
    return m, feeds


@pytest.mark.parametrize("keep", [True, False])
def test_a_where_mask_fuses(keep: bool) -> None:
    m, feeds = _where_masked(keep)
    exe = compare(m, feeds, passes=PASSES)
    assert ops_of(exe) == ["Reshape", "FusedAttention", "Reshape"]
    fused = exe.model.graph.nodes[1]
    assert fused.attrs["mask_select"] == 1 and fused.attrs["mask_keep"] == int(keep)


def test_a_where_mask_on_numpy(numpy_only: None) -> None:
    m, feeds = _where_masked(False)
    assert "FusedAttention" in ops_of(compare(m, feeds, passes=PASSES))


def test_the_numpy_path_matches_the_unfused_graph(numpy_only: None) -> None:
    m, feeds = _packed_qkv(batch=2, mask_shape=(2, 1, 1, 9))
    exe = compare(m, feeds, passes=PASSES)
    assert "FusedAttention" in ops_of(exe)


def test_fused_graph_matches_onnx_reference_evaluator() -> None:
    m, feeds = _packed_qkv(batch=2, seq=33, heads=2, dim=40, mask_shape=(2, 1, 1, 33))
    expected = ReferenceEvaluator(m).run(None, feeds)[0]
    exe = compile_model(m, passes=PASSES)
    assert "FusedAttention" in ops_of(exe)
    for _ in range(2):  # the second run takes the memory-planned, prebound path
        np.testing.assert_allclose(exe.run(dict(feeds))["y"], expected, rtol=1e-5, atol=1e-5)


def _split_heads_graph(
    kt_perm: list[int], sdpa: bool = False, softmax_axis: int = -1, dtype: int = TensorProto.FLOAT
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """BERT-style heads: separate Q, K, V inputs reshaped and transposed into heads; with ``sdpa`` Q and K^T are
    each scaled by sqrt(scale) before the product (torch's scaled_dot_product_attention export)."""
    b, s, h, d = 2, 17, 4, 16
    np_type = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    nodes = []
    for name, perm in (("q", [0, 2, 1, 3]), ("k", kt_perm), ("v", [0, 2, 1, 3])):
        nodes.append(helper.make_node("Reshape", [f"{name}_in", "heads"], [f"{name}_r"]))
        nodes.append(helper.make_node("Transpose", [f"{name}_r"], [f"{name}_h"], perm=perm))
    q, kt = "q_h", "k_h"
    if kt_perm == [0, 2, 1, 3]:
        nodes.append(helper.make_node("Transpose", ["k_h"], ["k_t"], perm=[0, 1, 3, 2]))
        kt = "k_t"
    if sdpa:
        nodes.append(helper.make_node("Mul", [q, "root"], ["q_s"]))
        nodes.append(helper.make_node("Mul", [kt, "root"], ["k_s"]))
        q, kt = "q_s", "k_s"
    nodes.append(helper.make_node("MatMul", [q, kt], ["s0"]))
    scores = "s0"
    if not sdpa:
        nodes.append(helper.make_node("Div", ["s0", "sqrt_d"], ["s1"]))
        scores = "s1"
    nodes += [
        helper.make_node("Softmax", [scores], ["p"], axis=softmax_axis),
        helper.make_node("MatMul", ["p", "v_h"], ["y"]),
    ]
    inits = [
        const("heads", [b, s, h, d], np.int64),
        const("sqrt_d", math.sqrt(d), np_type),
        const("root", 1.0 / math.sqrt(math.sqrt(d)), np_type),
    ]
    inputs = [vi(f"{n}_in", dtype, [b, s, h * d]) for n in "qkv"]
    feeds = {f"{n}_in": rng.standard_normal((b, s, h * d)).astype(np_type) for n in "qkv"}
    return model(nodes, inputs, [vi("y", dtype, [b, h, s, d])], inits), feeds


@pytest.mark.parametrize(
    ("kt_perm", "sdpa"),
    [([0, 2, 3, 1], False), ([0, 2, 1, 3], False), ([0, 2, 1, 3], True)],
    ids=["k-transposed-once", "k-transposed-twice", "sdpa-scaled-operands"],
)
def test_split_head_attention_reads_heads_in_place(kt_perm: list[int], sdpa: bool) -> None:
    m, feeds = _split_heads_graph(kt_perm, sdpa=sdpa)
    exe = compare(m, feeds, passes=PASSES)
    assert ops_of(exe) == ["Reshape", "Reshape", "Reshape", "FusedAttention"]


def _count(exe: Any, op: str) -> int:
    return ops_of(exe).count(op)


def test_softmax_over_another_axis_is_left_alone() -> None:
    m, feeds = _split_heads_graph([0, 2, 3, 1], softmax_axis=2)
    assert _count(compare(m, feeds, passes=PASSES), "FusedAttention") == 0


def test_double_precision_is_left_alone() -> None:
    m, feeds = _split_heads_graph([0, 2, 3, 1], dtype=TensorProto.DOUBLE)
    assert _count(compare(m, feeds, passes=PASSES), "FusedAttention") == 0


def test_scores_read_elsewhere_are_not_fused() -> None:
    m, feeds = _packed_qkv(mask_shape=(2, 1, 1, 9))
    m.graph.output.append(vi("s1", shape=[2, 3, 9, 9]))  # the scaled scores are also a graph output
    exe = compare(m, feeds, passes=PASSES)
    assert _count(exe, "FusedAttention") == 0 and _count(exe, "Softmax") == 1


def test_probabilities_read_twice_are_not_fused() -> None:
    m, feeds = _packed_qkv()
    m.graph.node.append(helper.make_node("ReduceSum", ["p"], ["psum"], keepdims=0))
    m.graph.output.append(vi("psum"))
    exe = compare(m, feeds, passes=PASSES)
    assert _count(exe, "FusedAttention") == 0


def test_a_scale_from_a_graph_input_is_not_fused() -> None:
    m, feeds = _packed_qkv()
    m.graph.initializer.remove(next(t for t in m.graph.initializer if t.name == "c"))
    m.graph.input.append(vi("c", shape=[]))
    feeds["c"] = np.asarray(0.3, dtype=np.float32)
    exe = compare(m, feeds, passes=PASSES)
    assert _count(exe, "FusedAttention") == 0


def test_a_mask_added_before_the_scale_is_not_fused() -> None:
    m, feeds = _packed_qkv(mask_shape=(2, 1, 1, 9))
    for node in m.graph.node:  # (Q Kt + M) * c: the mask would be scaled too
        if node.op_type == "Mul":
            node.input[0], node.output[0] = "s_masked", "s2"
        elif node.op_type == "Add":
            node.input[0], node.output[0] = "s0", "s_masked"
    exe = compare(m, feeds, passes=PASSES)
    assert _count(exe, "FusedAttention") == 0


def test_values_times_probabilities_is_not_attention() -> None:
    m, feeds = _packed_qkv(seq=8, dim=8)
    for node in m.graph.node:
        if node.op_type == "MatMul" and node.input[0] == "p":
            node.input[0], node.input[1] = "v", "p"  # V @ P: same shapes here, not the attention product
    exe = compare(m, feeds, passes=PASSES)
    assert _count(exe, "FusedAttention") == 0


def test_a_shared_transpose_stays_for_its_other_reader() -> None:
    m, feeds = _packed_qkv()
    m.graph.output.append(vi("t", shape=[3, 2, 3, 9, 8]))  # the head-split tensor is also a graph output
    exe = compare(m, feeds, passes=PASSES)
    assert _count(exe, "FusedAttention") == 1 and _count(exe, "Transpose") == 1 and _count(exe, "Gather") == 0


def _export_x_mask(module: Any, args: tuple[Any, ...]) -> onnx.ModelProto:
    """``module`` exported by TorchScript at opset 17, inputs ``x`` and ``mask`` and output ``y`` batch-dynamic."""
    import io

    import torch

    buf = io.BytesIO()
    torch.onnx.export(
        module,
        args,
        buf,
        dynamo=False,
        input_names=["x", "mask"],
        output_names=["y"],
        opset_version=17,
        dynamic_axes={"x": {0: "batch"}, "mask": {0: "batch"}, "y": {0: "batch"}},
    )
    return onnx.load_from_string(buf.getvalue())


def test_exported_multihead_attention_fuses() -> None:
    """``nn.TransformerEncoderLayer`` exported by torch (scaled_dot_product_attention, with a padding mask)."""
    torch = pytest.importorskip("torch", reason="extra not installed (torch exports the model)")

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 10, 32)
    mask = torch.zeros(2, 10, dtype=torch.bool)
    mask[1, 7:] = True
    # exported with autograd on, as torch's own examples do: under no_grad an eval-mode layer takes its fused fast
    # path (aten::_transformer_encoder_layer_fwd), which the TorchScript exporter cannot write
    m = _export_x_mask(layer, (x, None, mask))
    feeds = {"x": x.detach().numpy(), "mask": mask.numpy()}
    exe = compare(m, feeds)
    assert _count(exe, "FusedAttention") == 1
    assert _count(exe, "Softmax") == 0


def test_exported_hugging_face_style_masked_attention_fuses() -> None:
    """DistilBERT as Hugging Face writes it: Q divided by sqrt(d) first, scores.masked_fill(mask, finfo.min)."""
    torch = pytest.importorskip("torch", reason="extra not installed (torch exports the model)")

    class HfAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))

        def forward(self, x: Any, mask: Any) -> Any:
            b, n, _ = x.shape

            def heads(t: Any) -> Any:
                return t.view(b, -1, 4, 8).transpose(1, 2)

            q = heads(self.q(x)) / math.sqrt(8)
            scores = torch.matmul(q, heads(self.k(x)).transpose(2, 3))
            masked = (mask == 0).view(b, 1, 1, n).expand_as(scores)
            scores = scores.masked_fill(masked, torch.tensor(torch.finfo(scores.dtype).min))
            context = torch.matmul(torch.softmax(scores, dim=-1), heads(self.v(x)))
            return context.transpose(1, 2).reshape(b, -1, 32)

    torch.manual_seed(0)
    x = torch.randn(2, 12, 32)
    mask = torch.ones(2, 12, dtype=torch.int64)
    mask[1, 9:] = 0
    with torch.no_grad():
        m = _export_x_mask(HfAttention().eval(), (x, mask))
    exe = compare(m, {"x": x.numpy(), "mask": mask.numpy()})
    assert _count(exe, "FusedAttention") == 1 and _count(exe, "Softmax") == 0


def test_exported_unbind_of_packed_qkv_is_read_in_place() -> None:
    """timm's ViT attention: ``q, k, v = qkv.reshape(b, n, 3, h, d).permute(2, 0, 3, 1, 4).unbind(0)``, which
    torch writes as Split + Squeeze; with torch's own scaled_dot_product_attention."""
    torch = pytest.importorskip("torch", reason="extra not installed (torch exports the model)")
    import io

    class TimmAttention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv, self.proj = torch.nn.Linear(48, 144), torch.nn.Linear(48, 48)

        def forward(self, x: Any) -> Any:
            b, n, c = x.shape
            q, k, v = self.qkv(x).reshape(b, n, 3, 4, 12).permute(2, 0, 3, 1, 4).unbind(0)
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            return self.proj(y.transpose(1, 2).reshape(b, n, c))

    torch.manual_seed(0)
    x = torch.randn(2, 17, 48)
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(
            TimmAttention().eval(),
            (x,),
            buf,
            dynamo=False,
            input_names=["x"],
            output_names=["y"],
            opset_version=17,
            dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
        )
    exe = compare(onnx.load_from_string(buf.getvalue()), {"x": x.numpy()})
    assert _count(exe, "FusedAttention") == 1
    assert _count(exe, "Split") == 0 and _count(exe, "Squeeze") == 0 and _count(exe, "Softmax") == 0
