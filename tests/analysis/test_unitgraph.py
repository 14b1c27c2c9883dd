"""Cutting ONNX graphs into kernel units: fusions every framework makes, constants folded, shapes per sample."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from analysis.unitgraph import graph_units
from analysis.units import unfuse, unfused
from optimiser.errors import SpecError


def model(nodes, inputs, initializers, opset=17):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones(s, np.float32), n) for n, s in initializers.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_a_residual_block_is_two_convolutions_with_the_bias_activation_and_add_fused():
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c2", "scale"], ["s2"]),
        helper.make_node("Add", ["s2", "x"], ["sum"]),
        helper.make_node("Relu", ["sum"], ["y"]),
    ]
    units = graph_units(
        model(
            nodes, {"x": ["batch", 16, 8, 8]}, {"w1": (16, 16, 3, 3), "b1": (16,), "w2": (16, 16, 3, 3), "scale": (1,)}
        )
    )
    assert [u.kind for u in units] == ["conv", "conv"]
    first, second = units
    assert (first["act"], first["residual"], second["act"], second["residual"]) == (1, 0, 1, 1)
    assert (first["n"], first["cin"], first["cout"], first["oh"], first["kh"]) == (1, 16, 16, 8, 3)


def test_depthwise_convolutions_and_one_row_matrix_products_get_their_own_kinds():
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["d"], group=8, pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("GlobalAveragePool", ["d"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1),
    ]
    units = graph_units(model(nodes, {"x": [1, 8, 16, 16]}, {"dw": (8, 1, 3, 3), "fc": (10, 8), "fb": (10,)}))
    assert [u.kind for u in units] == ["dwconv", "pool", "gemm", "noop"]  # the Flatten: a node, no work
    assert (units[0]["c"], units[0]["stride"], units[0]["oh"]) == (8, 2, 8)
    assert units[3]["nodes"] == 1
    assert (units[2]["m"], units[2]["k"], units[2]["n"], units[2]["init_w"]) == (1, 8, 10, 1)


def test_gelu_is_one_transcendental_element_wise_unit_after_the_matrix_product_that_absorbs_the_bias():
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["h"]),
        helper.make_node("Div", ["h", "sqrt2"], ["d"]),
        helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["e1"]),
        helper.make_node("Mul", ["h", "half"], ["hh"]),
        helper.make_node("Mul", ["hh", "e1"], ["y"]),
    ]
    units = graph_units(
        model(nodes, {"x": ["batch", 4, 32]}, {"w": (32, 64), "b": (64,), "sqrt2": (1,), "one": (1,), "half": (1,)})
    )
    assert [u.kind for u in units] == ["gemm", "eltwise"]
    assert units[0]["m"] == 4 and dict(units[1].dims) == {"elements": 4 * 64, "inputs": 1, "heavy": 1}


def test_a_depthwise_convolution_read_only_by_a_pointwise_one_is_one_separable_unit():
    nodes = [
        helper.make_node("Conv", ["x", "dw"], ["d"], group=8, pads=[1, 1, 1, 1]),
        helper.make_node("Clip", ["d"], ["r"]),
        helper.make_node("Conv", ["r", "pw"], ["p"]),
        helper.make_node("Add", ["p", "x2"], ["y"]),
    ]
    x = {"x": [1, 8, 16, 16], "x2": [1, 32, 16, 16]}
    (unit,) = graph_units(model(nodes, x, {"dw": (8, 1, 3, 3), "pw": (32, 8, 1, 1)}))
    assert unit.kind == "dwpw"
    assert (unit["c"], unit["cout"], unit["dw_act"], unit["act"], unit["residual"]) == (8, 32, 1, 0, 1)
    # a strided or 3x3 second convolution is not pointwise: two units
    nodes[2] = helper.make_node("Conv", ["r", "pw"], ["p"], pads=[1, 1, 1, 1])
    units = graph_units(model(nodes, x, {"dw": (8, 1, 3, 3), "pw": (32, 8, 3, 3)}))
    assert [u.kind for u in units] == ["dwconv", "conv"]


def test_attention_products_of_two_activations_are_batched_matmuls():
    nodes = [
        helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
        helper.make_node("MatMul", ["q", "kt"], ["s"]),
        helper.make_node("Softmax", ["s"], ["y"], axis=-1),
    ]
    units = graph_units(model(nodes, {"q": ["batch", 4, 16, 8], "k": ["batch", 4, 16, 8]}, {}))
    assert [u.kind for u in units] == ["move", "bmm", "softmax"]
    assert (units[1]["b"], units[1]["m"], units[1]["k"], units[1]["n"]) == (4, 16, 8, 16)
    assert (units[2]["rows"], units[2]["cols"]) == (64, 16)


def test_weights_computed_from_constants_fold_away_and_are_marked_as_not_stored():
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["w"], value=numpy_helper.from_array(np.ones(1, np.float32))),
        helper.make_node("Conv", ["x", "w"], ["y"]),
    ]
    graph = model(nodes, {"x": [1, 3, 8, 8]}, {})
    graph.graph.initializer.append(numpy_helper.from_array(np.array([4, 3, 1, 1], np.int64), "shape"))
    units = graph_units(graph)
    assert [u.kind for u in units] == ["conv"] and units[0]["init_w"] == 0


def test_an_unreadable_model_is_one_line_naming_the_file(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not onnx")
    with pytest.raises(SpecError, match=r"bad\.onnx"):
        graph_units(bad)


def test_every_suite_model_is_cut_into_units_that_cover_its_convolutions_and_matrix_products():
    from benchmarks.models import suite

    for suite_model in suite("core") + suite("tiny"):
        proto = suite_model.model()
        units = graph_units(proto)
        heads = sum(1 for n in proto.graph.node if n.op_type in ("Conv", "Gemm", "MatMul"))
        kernels = sum(u.count for u in units if u.kind in ("conv", "dwconv", "gemm", "bmm"))
        assert kernels + 2 * sum(u.count for u in units if u.kind == "dwpw") == heads, suite_model.name


def test_an_element_wise_model_is_one_fused_unit_per_sample():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Sigmoid", ["r"], ["y"])]
    units = graph_units(model(nodes, {"x": ["batch", 3]}, {}))
    assert [(u.kind, dict(u.dims)) for u in units] == [("eltwise", {"elements": 3, "inputs": 1, "heavy": 1})]


def _post_norm_block(extra_reader: bool = False) -> list:
    """A transformer block's output: projection, bias, residual add, layer normalisation."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["h"]),
        helper.make_node("Add", ["h", "x"], ["s"]),
        helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1),
    ]
    if extra_reader:  # a pre-norm block keeps the sum for its next residual
        nodes.append(helper.make_node("Add", ["s", "y"], ["z"]))
    return nodes


def test_a_residual_add_read_only_by_a_layer_norm_is_one_skipnorm_unit_with_it():
    init = {"w": (32, 32), "b": (32,), "gamma": (32,), "beta": (32,)}
    units = graph_units(model(_post_norm_block(), {"x": ["batch", 4, 32]}, init))
    assert [u.kind for u in units] == ["gemm", "skipnorm"]
    assert (units[0]["m"], units[0]["k"], units[0]["n"], units[0]["act"]) == (4, 32, 32, 0)
    assert dict(units[1].dims) == {"rows": 4, "cols": 32}

    # the sum read again: the norm reads a tensor that exists anyway, and the product keeps its residual add
    units = graph_units(model(_post_norm_block(extra_reader=True), {"x": ["batch", 4, 32]}, init))
    assert [u.kind for u in units] == ["gemm", "layernorm", "eltwise"]


def test_a_layer_norm_after_an_add_of_a_constant_is_a_plain_layernorm():
    nodes = [
        helper.make_node("Add", ["x", "pos"], ["s"]),
        helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1),
    ]
    units = graph_units(model(nodes, {"x": [1, 4, 32]}, {"pos": (1, 4, 32), "gamma": (32,), "beta": (32,)}))
    assert [u.kind for u in units] == ["eltwise", "layernorm"]


def test_bert_like_suite_models_have_one_skipnorm_unit_per_residual_norm():
    from benchmarks.models import get_model

    proto = get_model("tiny_bert").model()
    norms = [n for n in proto.graph.node if n.op_type == "LayerNormalization"]
    units = graph_units(proto)
    skipnorms = sum(u.count for u in units if u.kind == "skipnorm")
    assert skipnorms >= 2 and skipnorms + sum(u.count for u in units if u.kind == "layernorm") == len(norms)


@pytest.mark.parametrize(
    ("shape", "perm", "kind", "block"),
    [
        ([1, 64, 2, 64], [0, 2, 1, 3], "permute", 64),  # a transformer's head split: rows of head_dim move
        ([1, 2, 3, 4, 49], [0, 2, 1, 3, 4], "permute", 4 * 49),  # a channel shuffle: whole planes move
        ([1, 2, 64, 64], [0, 1, 3, 2], "move", None),  # the key's transpose: single elements move
        ([64, 48], None, "move", None),  # the default perm reverses every axis
    ],
)
def test_a_transpose_that_keeps_its_last_axes_is_a_permute_of_those_rows(shape, perm, kind, block):
    attrs = {} if perm is None else {"perm": perm}
    units = graph_units(model([helper.make_node("Transpose", ["x"], ["y"], **attrs)], {"x": shape}, {}))
    assert [u.kind for u in units] == [kind]
    assert units[0]["elements"] == int(np.prod(shape))
    if block is not None:
        assert units[0]["block"] == block


def test_bert_like_suite_models_split_and_merge_heads_in_permute_units():
    from benchmarks.models import get_model

    units = graph_units(get_model("tiny_bert").model())
    permutes = [u for u in units if u.kind == "permute"]
    assert permutes and all(u["block"] == 64 for u in permutes)  # head_dim 64: hidden 128, 2 heads
    assert any(u.kind == "move" for u in units)  # the key's transpose moves single elements


def _recurrent(op: str, x_shape: list[object], directions: int, hidden: int, inputs: int, **attrs: object):
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    node = helper.make_node(
        op,
        ["x", "W", "R", "B"],
        ["y"],
        hidden_size=hidden,
        direction=("bidirectional" if directions == 2 else "forward"),
        **attrs,
    )
    weights = {
        "W": (directions, gates * hidden, inputs),
        "R": (directions, gates * hidden, hidden),
        "B": (directions, 2 * gates * hidden),
    }
    return model([node], {"x": x_shape}, weights)


def test_an_lstm_is_one_recurrent_unit_whose_parts_are_its_projection_a_product_per_step_and_the_gates():
    """Every runtime runs a recurrent layer as one loop, each its own way, so the layer is one unit. A route that
    has not measured the kind prices its parts: the input projection of every step at once, per step the hidden state
    by the recurrent weights, and the gates (one element-wise pass over every step's gates)."""
    units = graph_units(_recurrent("LSTM", [5, "batch", 8], 1, 16, 8))
    assert [(u.signature(), u.count) for u in units] == [("recurrent_1_5_8_16_4_1", 1)]
    parts = unfused(units[0])
    assert parts is not None
    assert [(u.signature(), u.count) for u in parts] == [
        ("gemm_5_8_64_0_1", 1),  # the input projection: 5 steps x 8 inputs -> 4 gates x 16
        ("gemm_1_16_64_0_1", 5),  # per step: the hidden state by the recurrent weights
        ("eltwise_320_2_1", 1),  # the gates' activations and the state updates of the 5 steps
    ]
    batched = unfused(units[0].at_batch(4))
    assert batched is not None
    assert [u["m"] for u in batched[:2]] == [20, 4] and batched[2]["elements"] == 1280


def test_a_bidirectional_batch_first_gru_pays_each_step_in_both_directions():
    units = graph_units(_recurrent("GRU", ["batch", 6, 4], 2, 8, 4, layout=1))
    assert [u.signature() for u in units] == ["recurrent_1_6_4_8_3_2"]
    assert [(u.signature(), u.count) for u in unfuse(units * 2, ["recurrent"])] == [
        ("gemm_6_4_24_0_1", 2),
        ("gemm_1_8_24_0_1", 12),
        ("eltwise_144_2_1", 2),
    ] * 2


def test_a_transposed_convolution_is_its_column_product_then_col2im():
    """How onnxruntime and appopt-runtime run it: the input by the weights to every tap's column, then the columns
    added into the output. As the convolution computing its gradient it was priced as a blocked NCHWc convolution,
    half what onnxruntime measured (docs/decisions.md, 2026-11-27)."""
    nodes = [
        helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["t"], ["y"]),
    ]
    units = graph_units(model(nodes, {"x": ["batch", 32, 8, 8]}, {"w": (32, 16, 4, 4), "b": (16,)}))
    assert [(u.signature(), u.count) for u in units] == [
        ("gemm_64_32_256_0_1", 1),  # 8x8 input pixels, 32 channels in, 16 out x 4x4 taps
        ("move_16384", 1),  # col2im reads every column
        ("eltwise_4096_1_0", 1),  # the activation over the 16x16x16 output
    ]


def test_a_one_dimensional_convolution_is_its_product_and_keeps_its_residual_add():
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[2, 2], dilations=[2]),
        helper.make_node("Add", ["c", "x"], ["y"]),
    ]
    units = graph_units(model(nodes, {"x": [1, 16, 100]}, {"w": (16, 16, 3)}))
    assert [(u.signature(), u.count) for u in units] == [("gemm_100_48_16_0_1", 1), ("eltwise_1600_2_0", 1)]
    depthwise = [helper.make_node("Conv", ["x", "dw"], ["y"], group=16, pads=[1, 1])]
    assert [u.kind for u in graph_units(model(depthwise, {"x": [1, 16, 100]}, {"dw": (16, 1, 3)}))] == ["dwconv"]


def test_inconsistent_recurrent_and_transposed_layers_are_left_out_not_crashed_on():
    """Hostile graphs (the ONNX fuzzer's kind): a GRU whose weights have fewer rows than its gates, a ConvTranspose
    with more groups than channels. Each is left out of the units, as a node of unknown shape is."""
    assert graph_units(_recurrent("GRU", ["batch", 6, 4], 1, 0, 4)) == []
    nodes = [helper.make_node("ConvTranspose", ["x", "w"], ["y"], group=3)]
    assert graph_units(model(nodes, {"x": [1, 4, 8, 8]}, {"w": (4, 1, 3, 3)})) == []


def test_shape_arithmetic_and_views_are_dispatched_nodes_not_data_moves():
    """PyTorch writes ``x.reshape(b, -1)`` as Shape -> Gather -> Unsqueeze -> Concat -> Reshape on a dynamic batch.
    As ``move`` units of one or two elements each was priced below a kernel call (a sweep's smallest move is far
    larger); onnxruntime dispatches every one of them, so they are one ``noop`` unit of their count."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
        helper.make_node("Unsqueeze", ["b", "axes"], ["b1"]),
        helper.make_node("Concat", ["b1", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),
        helper.make_node("Relu", ["flat"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
            numpy_helper.from_array(np.array([0], np.int64), "axes"),
            numpy_helper.from_array(np.array([-1], np.int64), "minus_one"),
        ],
    )
    units = graph_units(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [(u.signature(), u.count) for u in units] == [("eltwise_32_1_0", 1), ("noop_5", 1)]


def _bags_loop(bags: int) -> object:
    """``nn.EmbeddingBag`` as PyTorch exports it: a Loop over the bags whose body slices one bag's ids, gathers its
    rows and sums them (a scan output per bag)."""
    body = helper.make_graph(
        [
            helper.make_node("Gather", ["starts", "i"], ["start"], axis=0),
            helper.make_node("Gather", ["ends", "i"], ["end"], axis=0),
            helper.make_node("Constant", [], ["zero_axis"], value=numpy_helper.from_array(np.array([0], np.int64))),
            helper.make_node("Unsqueeze", ["start", "zero_axis"], ["s1"]),
            helper.make_node("Unsqueeze", ["end", "zero_axis"], ["e1"]),
            helper.make_node("Slice", ["ids", "s1", "e1", "zero_axis"], ["bag"]),
            helper.make_node("Gather", ["table", "bag"], ["rows"], axis=0),
            helper.make_node("ReduceSum", ["rows", "zero_axis"], ["sum"], keepdims=0),
            helper.make_node("Identity", ["cond"], ["cond_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("sum", TensorProto.FLOAT, [6]),
        ],
    )
    loop = helper.make_node("Loop", ["trips", "true"], ["bags"], body=body)
    graph = helper.make_graph(
        [loop],
        "g",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [bags * 3])],
        [helper.make_tensor_value_info("bags", TensorProto.FLOAT, [bags, 6])],
        [
            numpy_helper.from_array(np.array(bags, np.int64), "trips"),
            numpy_helper.from_array(np.array(True), "true"),
            numpy_helper.from_array(np.arange(0, bags * 3, 3, dtype=np.int64), "starts"),
            numpy_helper.from_array(np.arange(3, bags * 3 + 3, 3, dtype=np.int64), "ends"),
            numpy_helper.from_array(np.ones((50, 6), np.float32), "table"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("bags", [1, 4])
def test_a_loop_dispatches_its_body_once_per_iteration(bags):
    """The held-out DLRM's six bag Loops were one move of their output each, so onnxruntime's run of it was
    predicted at a third of its time: onnxruntime runs the body node by node, every iteration. Seven of the body's
    nine nodes dispatch (the Constant folds, the Identity is removed): seven per bag."""
    units = graph_units(_bags_loop(bags))
    assert [(u.signature(), u.count) for u in units] == [(f"move_{bags * 6}", 1), (f"noop_{7 * bags}", 1)]


def _accumulating_body(step: onnx.NodeProto, initializers: list[onnx.TensorProto] | None = None) -> onnx.GraphProto:
    """A Loop body of no scan output: ``step`` takes the carried (4,) ``acc`` to ``next``; the condition passes
    through an Identity."""
    return helper.make_graph(
        [step, helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc", TensorProto.FLOAT, [4]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("next", TensorProto.FLOAT, [4]),
        ],
        initializers or [],
    )


def test_a_loop_without_scan_outputs_takes_its_constant_trip_count_and_a_hostile_one_counts_once():
    """No scan output to count the iterations by: the trip count when it is a constant, one iteration when it is
    not a positive one (a fuzzer's -5), never a crash."""
    body = _accumulating_body(helper.make_node("Add", ["acc", "one"], ["next"]),
                              [numpy_helper.from_array(np.ones(4, np.float32), "one")])  # fmt: skip

    def units(trips: int) -> list[tuple[str, int]]:
        loop = helper.make_node("Loop", ["trips", "true", "x"], ["y"], body=body)
        graph = helper.make_graph(
            [loop],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
            [
                numpy_helper.from_array(np.array(trips, np.int64), "trips"),
                numpy_helper.from_array(np.array(True), "true"),
            ],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return [(u.signature(), u.count) for u in graph_units(model)]

    assert units(3) == [("move_4", 1), ("noop_3", 1)]  # the body's Add, three times (its Identity is removed)
    assert units(-5) == [("move_4", 1), ("noop_1", 1)]


def test_a_loop_trip_count_written_as_a_constant_node_of_any_dense_form_is_read():
    """``Constant(value_int=...)`` as well as ``Constant(value=tensor)`` (``shapeprop._constant_value`` reads both)."""
    body = _accumulating_body(helper.make_node("Neg", ["acc"], ["next"]))
    nodes = [
        helper.make_node("Constant", [], ["trips"], value_int=5),
        helper.make_node("Loop", ["trips", "true", "x"], ["y"], body=body),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(True), "true")],
    )
    units = graph_units(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert [(u.signature(), u.count) for u in units] == [("move_4", 1), ("noop_5", 1)]
