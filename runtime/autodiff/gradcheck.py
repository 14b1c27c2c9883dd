"""Check gradient rules against central finite differences.

The scalar being differentiated is ``sum(output * seed)`` for a random ``seed``, so every element of the output
gradient is exercised. Run models in float64: differences of float32 values are too noisy to compare.

Example::

    report = check_gradients(proto, {"x": x}, output="y", wrt=["x", "W"])
    assert report.max_error < 1e-6, report
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from runtime.autodiff.reverse import differentiate
from runtime.executor import compile_model
from runtime.ir import Model


def typed_model(proto: onnx.ModelProto) -> Model:
    """The IR of ``proto`` with onnx's inferred dtypes and shapes on every value it can type."""
    inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    return Model.from_onnx(inferred)


def promote_initializers(proto: onnx.ModelProto, names: Sequence[str]) -> onnx.ModelProto:
    """A copy where the named initializers are also graph inputs (so they can be fed), defaults kept."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    declared = {vi.name for vi in out.graph.input}
    for init in out.graph.initializer:
        if init.name in names and init.name not in declared:
            out.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
    return out


@dataclass
class GradCheckReport:
    """Per-tensor largest error ``|analytic - numeric| / max(1, |numeric|)`` and the gradients compared."""

    errors: dict[str, float] = field(default_factory=dict)
    analytic: dict[str, np.ndarray] = field(default_factory=dict)
    numeric: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def max_error(self) -> float:
        return max(self.errors.values(), default=0.0)


def analytic_gradients(
    proto: onnx.ModelProto, feeds: Mapping[str, np.ndarray], output: str, seed: np.ndarray, wrt: Sequence[str]
) -> dict[str, np.ndarray]:
    """Gradients of ``sum(output * seed)`` from the autodiff graph, run by the executor."""
    program = differentiate(typed_model(proto), output, wrt)
    exe = compile_model(program.to_onnx(), passes=())
    result = exe.run({**feeds, program.seed: seed})
    return {name: result[grad] for name, grad in program.gradients.items()}


def numeric_gradients(
    proto: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    output: str,
    seed: np.ndarray,
    wrt: Sequence[str],
    eps: float = 1e-6,
) -> dict[str, np.ndarray]:
    """Central differences of ``sum(output * seed)`` for every element of every ``wrt`` tensor."""
    promoted = promote_initializers(proto, wrt)
    exe = compile_model(promoted, passes=())
    initial = {i.name: onnx.numpy_helper.to_array(i) for i in promoted.graph.initializer}
    base: dict[str, Any] = {**{k: v for k, v in initial.items() if k in wrt}, **feeds}

    def objective(values: dict[str, Any]) -> float:
        return float(np.sum(exe.run(values)[output].astype(np.float64) * seed))

    grads: dict[str, np.ndarray] = {}
    for name in wrt:
        arr = np.array(base[name], copy=True)
        grad = np.zeros(arr.shape, dtype=np.float64)
        for idx in np.ndindex(arr.shape):
            original = arr[idx]
            arr[idx] = original + eps
            plus = objective({**base, name: arr})
            arr[idx] = original - eps
            minus = objective({**base, name: arr})
            arr[idx] = original
            grad[idx] = (plus - minus) / (2 * eps)
        grads[name] = grad
    return grads


def check_gradients(
    proto: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    output: str,
    wrt: Sequence[str],
    *,
    seed: int = 0,
    eps: float = 1e-6,
) -> GradCheckReport:
    """Compare analytic and numeric gradients of ``sum(output * r)`` for a random ``r``."""
    exe = compile_model(proto, passes=())
    y = exe.run(dict(feeds))[output]
    r = np.random.default_rng(seed).standard_normal(y.shape).astype(y.dtype)
    analytic = analytic_gradients(proto, feeds, output, r, wrt)
    numeric = numeric_gradients(proto, feeds, output, r, wrt, eps)
    report = GradCheckReport(analytic=analytic, numeric=numeric)
    for name in wrt:
        n = numeric[name]
        if name not in analytic:  # the autodiff found no path from ``name`` to the output
            report.errors[name] = 0.0 if not n.any() else float("inf")
            continue
        a = np.asarray(analytic[name], dtype=np.float64)
        if a.shape != n.shape:
            report.errors[name] = float("inf")
            continue
        report.errors[name] = float(np.max(np.abs(a - n) / np.maximum(1.0, np.abs(n)), initial=0.0))
    return report
