"""Gather + ReduceSum (an embedding bag) becomes one EmbeddingBag op, the ``ids[:, i]`` Gather included."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from runtime import compile_model
from runtime.errors import KernelError
from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(3)
V, D, F, L = 50, 19, 3, 4  # odd row width: the kernel's vector tail
INIT = [
    *(const(f"t{i}", rng.standard_normal((V, D))) for i in range(F)),
    *(const(f"i{i}", i, np.int64) for i in range(F)),
    const("ax1", [1], np.int64),
    const("ax2", [2], np.int64),
]


def bags(reduce: str = "ReduceSum", keepdims: int = 0, axes: str = "ax1") -> list[onnx.NodeProto]:
    """DLRM's sparse features: for each table, ``table(ids[:, i]).sum(1)``, concatenated."""
    nodes = []
    for i in range(F):
        nodes.append(helper.make_node("Gather", ["ids", f"i{i}"], [f"col{i}"], axis=1))
        nodes.append(helper.make_node("Gather", [f"t{i}", f"col{i}"], [f"e{i}"], axis=0))
        if reduce == "ReduceSum":
            nodes.append(helper.make_node("ReduceSum", [f"e{i}", axes], [f"s{i}"], keepdims=keepdims))
        else:
            nodes.append(helper.make_node("ReduceMean", [f"e{i}"], [f"s{i}"], axes=[1], keepdims=keepdims))
    nodes.append(helper.make_node("Concat", [f"s{i}" for i in range(F)], ["out"], axis=-1))
    return nodes


def _m(nodes: list[onnx.NodeProto], elem: int = TensorProto.INT64) -> onnx.ModelProto:
    return model(nodes, [vi("ids", elem, ["n", F, L])], [vi("out")], INIT)


def _ids(batch: int, dtype: type = np.int64) -> dict[str, np.ndarray]:
    return {"ids": rng.integers(-V, V, (batch, F, L)).astype(dtype)}  # negative ids count from the end


@pytest.mark.parametrize(("reduce", "keepdims"), [("ReduceSum", 0), ("ReduceMean", 1)])
def test_bags_fuse_exactly_on_numpy(reduce: str, keepdims: int, numpy_only: None) -> None:
    exe = compare(_m(bags(reduce, keepdims)), _ids(2), passes=["embedding_bag"], exact=True)
    assert ops_of(exe) == ["EmbeddingBag"] * F + ["Concat"]


@pytest.mark.parametrize("batch", [1, 5])
@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_bags_on_the_compiled_kernel(batch: int, dtype: type) -> None:
    elem = TensorProto.INT64 if dtype is np.int64 else TensorProto.INT32
    exe = compare(_m(bags(), elem), _ids(batch, dtype), rtol=1e-6)
    assert ops_of(exe).count("EmbeddingBag") == F and "Gather" not in ops_of(exe)


@pytest.mark.parametrize("native_on", [True, False])
def test_an_id_out_of_range_names_the_node(native_on: bool) -> None:
    from runtime import native

    native.set_enabled(native_on)
    try:
        exe = compile_model(_m(bags()))
        feeds = _ids(2)
        feeds["ids"][1, 2, 3] = V
        for _ in range(2):  # the first run and the planned (prebound) one
            with pytest.raises(KernelError, match=r"EmbeddingBag"):
                exe.run(dict(feeds))
    finally:
        native.set_enabled(None)


def test_look_alikes_are_left_alone() -> None:
    # summing over the embedding axis is not a bag
    assert "EmbeddingBag" not in ops_of(compile_model(_m(bags(axes="ax2"))))
    # the gathered rows are also read elsewhere
    nodes = [*bags(), helper.make_node("Identity", ["e0"], ["rows"])]
    m = model(nodes, [vi("ids", TensorProto.INT64, ["n", F, L])], [vi("out"), vi("rows")], INIT)
    assert ops_of(compile_model(m)).count("EmbeddingBag") == F - 1


def loop_bags(weighted: bool = False, reduce: str = "ReduceSum", from_ids: bool = False) -> onnx.ModelProto:
    """``nn.EmbeddingBag`` as PyTorch exports it: a Loop over bags slicing ``idx[starts[i]:ends[i]]``; with
    ``from_ids`` the ranges come from a 2-d ``ids`` input the way PyTorch computes them."""
    c = helper.make_tensor
    body_nodes = [
        helper.make_node("Constant", [], ["zero"], value=c("zero_t", TensorProto.INT64, [1], [0])),
        helper.make_node("Gather", ["starts", "i"], ["s"], axis=0),
        helper.make_node("Gather", ["ends", "i"], ["e"], axis=0),
        helper.make_node("Unsqueeze", ["s", "zero"], ["su"]),
        helper.make_node("Unsqueeze", ["e", "zero"], ["eu"]),
        helper.make_node("Slice", ["idx", "su", "eu", "zero"], ["row"]),
        helper.make_node("Gather", ["t0", "row"], ["emb"], axis=0),
    ]
    if weighted:
        body_nodes.append(helper.make_node("Mul", ["emb", "half"], ["emb_w"]))
    last = "emb_w" if weighted else "emb"
    body_nodes += [
        helper.make_node(reduce, [last, "zero"], ["bag"], keepdims=0),
        helper.make_node("Cast", ["true"], ["cond_out"], to=TensorProto.BOOL),
    ]
    body = helper.make_graph(
        body_nodes,
        "body",
        [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, [])],
        [vi("cond_out", TensorProto.BOOL, []), vi("bag", TensorProto.FLOAT, [D])],
    )
    loop = helper.make_node("Loop", ["m", "true"], ["out"], body=body)
    init = [*INIT, const("true", True, np.bool_), const("half", 0.5)]
    inputs = [vi("idx", TensorProto.INT64, ["t"]), vi("starts", TensorProto.INT64, ["b"]),
              vi("ends", TensorProto.INT64, ["b"]), vi("m", TensorProto.INT64, [])]  # fmt: skip
    if not from_ids:
        return model([loop], inputs, [vi("out", TensorProto.FLOAT, ["b", D])], init, opset=18)
    n = helper.make_node
    ranges = [
        n("Shape", ["ids"], ["sh0"]), n("ReduceProd", ["sh0"], ["numel"], keepdims=0),
        n("Shape", ["ids"], ["sh1"]), n("Gather", ["sh1", "one"], ["width"], axis=0),
        n("Cast", ["numel"], ["numel_i"], to=TensorProto.INT64),
        n("Cast", ["width"], ["width_i"], to=TensorProto.INT64),
        n("Range", ["nought", "numel_i", "width_i"], ["offsets"]),
        n("Reshape", ["ids", "flat"], ["idx"]), n("Shape", ["idx"], ["sh2"]),
        n("Gather", ["sh2", "nought"], ["count"], axis=0), n("Unsqueeze", ["count", "axis0"], ["count1"]),
        n("Concat", ["offsets", "count1"], ["starts"], axis=0),
        n("Slice", ["starts", "one1", "huge", "axis0", "one1"], ["ends"]),
        n("Shape", ["ends"], ["sh3"]), n("Gather", ["sh3", "nought"], ["m"], axis=0),
    ]  # fmt: skip
    init += [const("one", 1, np.int64), const("nought", 0, np.int64), const("flat", [-1], np.int64)]
    init += [const("axis0", [0], np.int64), const("one1", [1], np.int64), const("huge", [2**63 - 1], np.int64)]
    ids = vi("ids", TensorProto.INT64, ["b", L])
    return model([*ranges, loop], [ids], [vi("out", TensorProto.FLOAT, ["b", D])], init, opset=18)


def _ranges(bags: int) -> dict[str, np.ndarray]:
    idx = rng.integers(-V, V, 4 * bags + 3).astype(np.int64)
    starts = np.sort(rng.integers(0, idx.size, bags)).astype(np.int64)
    ends = np.minimum(starts + rng.integers(0, 6, bags), idx.size).astype(np.int64)
    ends[0] = starts[0]  # an empty bag sums to zeros
    return {"idx": idx, "starts": starts, "ends": ends, "m": np.array(bags, dtype=np.int64)}


def test_embedding_bag_loop_fuses_exactly_on_numpy(numpy_only: None) -> None:
    exe = compare(loop_bags(), _ranges(5), passes=["embedding_bag"], exact=True)
    assert ops_of(exe) == ["EmbeddingBagRanges"]


@pytest.mark.parametrize("bags", [1, 7])
@pytest.mark.parametrize("reduce", ["ReduceSum", "ReduceMean"])
def test_embedding_bag_loop_on_the_compiled_kernel(bags: int, reduce: str) -> None:
    feeds = _ranges(bags)
    if reduce == "ReduceMean":
        feeds["ends"][0] += 1  # no empty bag: its mean is NaN on both paths
    assert ops_of(compare(loop_bags(reduce=reduce), feeds, rtol=1e-6)) == ["EmbeddingBagRanges"]


def test_embedding_bag_loop_errors_and_look_alikes() -> None:
    exe = compile_model(loop_bags())
    feeds = _ranges(3)
    feeds["idx"][feeds["starts"][2]] = V + 1
    feeds["ends"][2] = feeds["starts"][2] + 1
    with pytest.raises(KernelError, match="EmbeddingBagRanges"):
        exe.run(dict(feeds))
    # per-sample weights (a Mul in the body) are not a plain bag
    assert ops_of(compile_model(loop_bags(weighted=True))) == ["Loop"]


@pytest.mark.parametrize("batch", [1, 6])
def test_embedding_bag_module_over_2d_ids_becomes_the_plain_bag(batch: int) -> None:
    feeds = {"ids": rng.integers(-V, V, (batch, L)).astype(np.int64)}
    assert ops_of(compare(loop_bags(from_ids=True), feeds, rtol=1e-6)) == ["EmbeddingBag"]
