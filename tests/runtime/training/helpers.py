"""Builders for the training tests: one-op float64 models for finite-difference checks, and the digits data."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from runtime.autodiff.gradcheck import GradCheckReport, check_gradients
from runtime.training.data import split

D = TensorProto.DOUBLE


def op_model(
    op_type: str,
    fed: Mapping[str, np.ndarray],
    params: Mapping[str, np.ndarray] = (),  # type: ignore[assignment]
    *,
    order: Sequence[str] | None = None,
    outputs: Sequence[str] = ("y",),
    out_types: Sequence[int] | None = None,
    opset: int = 17,
    domain: str = "",
    extra_opsets: Sequence[tuple[str, int]] = (),
    **attrs: Any,
) -> onnx.ModelProto:
    """A model running one ``op_type`` node on ``fed`` inputs and ``params`` initializers (in ``order``)."""
    params = dict(params)
    names = list(order) if order is not None else [*fed, *params]
    node = helper.make_node(op_type, names, list(outputs), domain=domain, **attrs)
    inputs = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in fed.items()
    ]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in params.items()]
    types = list(out_types) if out_types is not None else [D] * len(outputs)
    declared = [helper.make_tensor_value_info(o, t, None) for o, t in zip(outputs, types, strict=True) if o]
    graph = helper.make_graph([node], op_type.lower(), inputs, declared, inits)
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    return helper.make_model(graph, opset_imports=opsets)


def gradcheck(
    proto: onnx.ModelProto, fed: Mapping[str, np.ndarray], wrt: Sequence[str], output: str = "y", tol: float = 1e-6
) -> GradCheckReport:
    """Assert the autodiff gradients of ``output`` w.r.t. ``wrt`` match central differences within ``tol``."""
    report = check_gradients(proto, fed, output, wrt)
    assert set(report.errors) == set(wrt)
    bad = {k: v for k, v in report.errors.items() if not v < tol}
    assert not bad, f"gradient mismatch {bad}"
    return report


def rand(*shape: int, seed: int = 0, low: float | None = None) -> np.ndarray:
    """Seeded float64 normals (``low``: uniform in [low, low + 1] instead, e.g. to stay away from 0)."""
    rng = np.random.default_rng(seed + 7 * len(shape) + sum(shape))
    if low is not None:
        return rng.uniform(low, low + 1.0, shape)
    return rng.standard_normal(shape)


def away_from_zero(*shape: int, seed: int = 0) -> np.ndarray:
    """Normals pushed out of (-0.1, 0.1), so kinks (ReLU) are not inside a finite-difference step."""
    x = rand(*shape, seed=seed)
    return np.where(np.abs(x) < 0.1, np.sign(x) * 0.1 + x, x)


@dataclass(frozen=True)
class Digits:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@cache
def digits() -> Digits:
    """scikit-learn's 8x8 digits, scaled to [0, 1], split 80/20 with a fixed seed (as ``appopt train`` does)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    ds = split((data.data / 16.0).astype(np.float32), data.target.astype(np.int64), 0.2, seed=0)
    assert ds.x_test is not None and ds.y_test is not None
    return Digits(ds.x_train, ds.y_train, ds.x_test, ds.y_test)


def mlp(
    sizes: Sequence[int] = (64, 32, 10), seed: int = 0, *, softmax: bool = False, dropout: float = 0.0
) -> onnx.ModelProto:
    """A ReLU MLP ``input [batch, sizes[0]] -> output``, Gemm weights He-initialised (optionally Softmax/Dropout)."""
    rng = np.random.default_rng(seed)
    nodes, inits, x = [], [], "input"
    for i, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes)):
        w = (rng.standard_normal((fan_in, fan_out)) * np.sqrt(2 / fan_in)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(fan_out, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [x, f"w{i}", f"b{i}"], [f"h{i}"]))
        x = f"h{i}"
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [x], [f"r{i}"]))
            x = f"r{i}"
            if dropout:
                inits.append(numpy_helper.from_array(np.asarray(dropout, np.float32), f"ratio{i}"))
                nodes.append(helper.make_node("Dropout", [x, f"ratio{i}"], [f"d{i}"]))
                x = f"d{i}"
    out = "output"
    last = helper.make_node("Softmax", [x], [out], axis=1) if softmax else helper.make_node("Identity", [x], [out])
    nodes.append(last)
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, ["batch", sizes[-1]])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
