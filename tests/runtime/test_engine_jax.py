"""``--engine jax``: the ONNX graph translated to JAX and jitted by XLA matches onnxruntime; shapes are static."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import helper

from runtime import RuntimeModelError
from runtime.tools import run_model
from tests.runtime.graphs import I64, F, const, model, vi

pytestmark = pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="extra not installed")

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "digits_mlp.onnx"
RNG = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    return (RNG.standard_normal(shape) * 0.3).astype(np.float32)


def _onnxruntime(proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed (the peer compared with)")
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return [np.asarray(v) for v in session.run(None, feeds)]


def _jax(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], threads: int | None = None) -> list[np.ndarray]:
    from runtime.engine_jax import JaxGraph

    return JaxGraph(proto, threads).run_list(feeds)


def _small_cnn() -> onnx.ModelProto:
    """Conv (grouped, dilated, asymmetric pads), BN, pools with ceil_mode and pads, ConvTranspose, Resize, Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 0, 2, 1], strides=[2, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"], epsilon=1e-3),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], group=4, dilations=[2, 2], pads=[2, 2, 2, 2]),
        helper.make_node("Clip", ["c2", "lo", "hi"], ["k2"]),
        helper.make_node("MaxPool", ["k2"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
        helper.make_node("AveragePool", ["p1"], ["p2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         count_include_pad=0),
        helper.make_node("ConvTranspose", ["p2", "wt", "bt"], ["u1"], strides=[2, 2], pads=[1, 1, 1, 1],
                         output_padding=[1, 1], group=2),
        helper.make_node("Resize", ["u1", "", "scales"], ["u2"], mode="linear"),
        helper.make_node("Resize", ["u1", "", "scales"], ["u3"], mode="nearest"),
        helper.make_node("Add", ["u2", "u3"], ["u4"]),
        helper.make_node("Erf", ["u4"], ["e1"]),
        helper.make_node("GlobalAveragePool", ["e1"], ["g1"]),
        helper.make_node("Flatten", ["g1"], ["f1"]),
        helper.make_node("Gemm", ["f1", "wf", "bf"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["y"]),
    ]
    inits = [
        const("w1", _w(8, 3, 3, 3)), const("b1", _w(8)),
        const("s", 1 + _w(8)), const("bb", _w(8)), const("m", _w(8)), const("v", np.abs(_w(8)) + 0.5),
        const("w2", _w(8, 2, 3, 3)), const("lo", -1.0), const("hi", 1.5),
        const("wt", _w(8, 3, 3, 3)), const("bt", _w(6)),
        const("scales", [1, 1, 2, 2]), const("wf", _w(5, 6)), const("bf", _w(5)),
    ]
    return model(nodes, [vi("x", F, ["batch", 3, 17, 15])], [vi("y", F, ["batch", 5])], inits)


@pytest.mark.parametrize("weights", ["initializers", "inputs"])
def test_a_small_cnn_matches_onnxruntime(weights: str) -> None:
    """Initializer weights are packed at load into the layouts XLA reads; weights fed as inputs are not."""
    proto = _small_cnn()
    x = RNG.standard_normal((2, 3, 17, 15)).astype(np.float32)
    feeds = {"x": x}
    if weights == "inputs":
        for name in ("w1", "w2", "wt", "wf"):
            init = next(i for i in proto.graph.initializer if i.name == name)
            feeds[name] = onnx.numpy_helper.to_array(init)
            proto.graph.initializer.remove(init)
            proto.graph.input.append(vi(name, F, list(feeds[name].shape)))
    np.testing.assert_allclose(_jax(proto, feeds)[0], _onnxruntime(proto, feeds)[0], rtol=1e-4, atol=1e-5)


def test_the_mlp_file_runs_through_the_runner_cli() -> None:
    from runtime.engine_jax import JaxRunner

    assert len(JaxRunner(MLP, 1)._compiled) == 1  # compiled when loaded, so no timed run pays for it
    report = run_model(MLP, random=True, repeat=2, engine="jax", threads=1)
    assert report.engine.startswith("jax (jax ") and len(report.latencies_s) == 2
    assert report.outputs[0].shape == [1, 10] and report.outputs[0].mean == pytest.approx(0.1, rel=1e-4)


def test_shape_arithmetic_is_static_and_each_batch_gets_its_own_compile() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape (what torch.onnx exports for a dynamic batch) folds to
    ints at trace time; a transformer-ish tail (MatMul, LayerNorm, Gelu, Where, Equal, Cast) runs on them."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axis0"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["r"]),
        helper.make_node("MatMul", ["r", "w"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "gamma", "beta"], ["ln"], axis=-1, epsilon=1e-5),
        helper.make_node("Gelu", ["ln"], ["g"]),
        helper.make_node("Equal", ["ids", "zero"], ["is_pad"]),
        helper.make_node("Unsqueeze", ["is_pad", "axis2"], ["pad3"]),
        helper.make_node("Where", ["pad3", "neg", "g"], ["masked"]),
        helper.make_node("Cast", ["ids"], ["idsf"], to=F),
        helper.make_node("ReduceSum", ["idsf", "axis1"], ["count"], keepdims=1),
        helper.make_node("Transpose", ["masked"], ["t"], perm=[0, 2, 1]),
        helper.make_node("ReduceMean", ["t", "axis2"], ["mean"], keepdims=0),
        helper.make_node("Add", ["mean", "count"], ["y"]),
    ]
    inits = [
        const("zero", 0, np.int64), const("axis0", [0], np.int64), const("axis1", [1], np.int64),
        const("axis2", [2], np.int64), const("rest", [4, 6], np.int64), const("w", _w(6, 8)),
        const("gamma", 1 + _w(8)), const("beta", _w(8)), const("neg", -5.0),
    ]
    proto = model(nodes, [vi("x", F, ["b", 24]), vi("ids", I64, ["b", 4])], [vi("y", F, ["b", 8])], inits,
                  opset=20)  # Gelu
    from runtime.engine_jax import JaxGraph

    graph = JaxGraph(proto)
    for batch in (1, 3):
        feeds = {"x": RNG.standard_normal((batch, 24)).astype(np.float32),
                 "ids": RNG.integers(0, 3, (batch, 4)).astype(np.int64)}
        np.testing.assert_allclose(graph.run_list(feeds)[0], _onnxruntime(proto, feeds)[0], rtol=1e-4, atol=1e-5)
    assert len(graph._compiled) == 2 and graph.compile_ms is not None and graph.compile_ms > 0


def test_an_unsupported_op_is_one_error_naming_op_and_node() -> None:
    proto = model([helper.make_node("Relu", ["x"], ["r"], name="ok"),
                   helper.make_node("NonMaxSuppression", ["r", "r"], ["y"], name="nms_7")],
                  [vi("x", F, [2, 3])], [vi("y", I64, [1, 3])])
    with pytest.raises(RuntimeModelError, match=r"^jax: NonMaxSuppression node nms_7: op not supported"):
        _jax(proto, {"x": np.zeros((2, 3), np.float32)})


def test_a_reshape_target_computed_from_data_is_refused_naming_the_node() -> None:
    proto = model([helper.make_node("Reshape", ["x", "dims"], ["y"], name="dyn")],
                  [vi("x", F, [2, 3]), vi("dims", I64, [2])], [vi("y", F, [3, 2])])
    with pytest.raises(RuntimeModelError, match=r"Reshape node dyn: the target shape is computed from the model's "
                                                r"input data"):
        _jax(proto, {"x": np.zeros((2, 3), np.float32), "dims": np.array([3, 2], np.int64)})


def test_threads_confine_xla_pool_to_that_many_cpus() -> None:
    """XLA's pool keeps a thread per CPU of the process; threads=1 confines them all to one CPU, None frees them."""
    import os

    from runtime.engine_jax import JaxGraph, allowed_cpus, check_threads, pool_tids

    proto = onnx.load(str(MLP))
    x = np.zeros((1, 64), np.float32)
    JaxGraph(proto, 1).run_list({"input": x})
    assert pool_tids() and all(os.sched_getaffinity(tid) == {allowed_cpus()[0]} for tid in pool_tids())
    JaxGraph(proto, None).run_list({"input": x})
    assert all(os.sched_getaffinity(tid) == set(allowed_cpus()) for tid in pool_tids())
    with pytest.raises(RuntimeModelError, match=r"threads must be 1 to \d+ \(the CPUs this process may use\)"):
        check_threads(len(allowed_cpus()) + 1)
