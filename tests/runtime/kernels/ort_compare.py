"""Shared by the NN kernel tests: build a one-node model, run it through our runtime and onnxruntime, compare."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from runtime import compile_model

ort = __import__("pytest").importorskip(
    "onnxruntime", reason="onnxruntime: extra not installed (the peer compared with)"
)


def one_node_model(
    op: str,
    inputs: Mapping[str, np.ndarray | None],
    outputs: Sequence[str],
    opset: int,
    domain: str = "",
    **attrs: Any,
) -> onnx.ModelProto:
    """A model whose graph inputs are ``inputs`` (``None`` leaves an optional input out) and whose single node
    is ``op``. Output types are left for shape inference."""
    names = [name if value is not None else "" for name, value in inputs.items()]
    while names and not names[-1]:
        names.pop()
    node = helper.make_node(op, names, list(outputs), domain=domain, **attrs)
    graph_inputs = [
        helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
        for name, value in inputs.items()
        if value is not None
    ]
    graph_outputs = [helper.make_empty_tensor_value_info(o) for o in outputs if o]
    graph = helper.make_graph([node], f"{op.lower()}_test", graph_inputs, graph_outputs)
    opsets = (
        [helper.make_opsetid("", opset)]
        if not domain
        else [helper.make_opsetid("", 21), helper.make_opsetid(domain, 1)]
    )
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    for out in model.graph.output:  # ops inferred through a function body may leave outputs untyped
        if not out.type.tensor_type.HasField("shape") and graph_inputs:
            out.type.CopyFrom(graph_inputs[0].type)  # those tested here keep their first input's type and shape
    return model


def run_ours(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[Any]:
    exe = compile_model(model)
    out = exe.run(dict(feeds))
    return [out[name] for name in exe.output_names]


def run_ort(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> list[Any]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def assert_matches_ort(
    op: str,
    inputs: Mapping[str, np.ndarray | None],
    outputs: Sequence[str] = ("y",),
    opset: int = 21,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    **attrs: Any,
) -> list[Any]:
    """Run ``op`` on ``inputs`` through both runtimes; outputs must agree in dtype, shape and value."""
    model = one_node_model(op, inputs, outputs, opset, **attrs)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    ours = run_ours(model, feeds)
    theirs = run_ort(model, feeds)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a.dtype == b.dtype, f"output {i}: dtype {a.dtype} != onnxruntime {b.dtype}"
        assert a.shape == b.shape, f"output {i}: shape {a.shape} != onnxruntime {b.shape}"
        if a.dtype.kind in "iub":
            np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"output {i}")
    return ours


def rand(rng: np.random.Generator, *shape: int, dtype: Any = np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)
