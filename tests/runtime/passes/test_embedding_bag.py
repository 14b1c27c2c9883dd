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
