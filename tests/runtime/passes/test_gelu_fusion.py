"""GELU written with Erf becomes one node; the NumPy path repeats the pattern's arithmetic bit for bit."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.runtime.graphs import const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

X = {"x": np.linspace(-5, 5, 64, dtype=np.float32).reshape(4, 16)}
IO = ([vi("x", shape=[4, 16])], [vi("y", shape=[4, 16])])
CONSTS = [const("sqrt2", math.sqrt(2.0)), const("half", 0.5), const("one", 1.0), const("inv", 1 / math.sqrt(2.0))]


def _form0(scale_op: str = "Div") -> onnx.ModelProto:
    nodes = [
        helper.make_node(scale_op, ["x", "sqrt2" if scale_op == "Div" else "inv"], ["s"]),
        helper.make_node("Erf", ["s"], ["e"]),
        helper.make_node("Add", ["one", "e"], ["p"]),
        helper.make_node("Mul", ["x", "half"], ["h"]),
        helper.make_node("Mul", ["h", "p"], ["y"]),
    ]
    return model(nodes, *IO, CONSTS)


def _form1() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["s"]),
        helper.make_node("Erf", ["s"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["p"]),
        helper.make_node("Mul", ["x", "p"], ["xp"]),
        helper.make_node("Mul", ["xp", "half"], ["y"]),
    ]
    return model(nodes, *IO, CONSTS)


@pytest.mark.parametrize("build", [_form0, lambda: _form0("Mul"), _form1], ids=["form0", "form0-mul", "form1"])
def test_gelu_patterns_fuse_and_match_exactly_on_numpy(build, numpy_only) -> None:
    exe = compare(build(), X, passes=["gelu_fusion"], exact=True)
    assert ops_of(exe) == ["Gelu"]


def test_gelu_matches_closely_on_the_compiled_kernel() -> None:
    assert ops_of(compare(_form0(), X, passes=["gelu_fusion"], rtol=1e-6)) == ["Gelu"]


def test_wrong_constants_or_shared_intermediates_stay() -> None:
    wrong = _form0()
    wrong.graph.initializer[1].CopyFrom(const("half", 0.6))
    assert ops_of(compare(wrong, X, passes=["gelu_fusion"])) == ["Div", "Erf", "Add", "Mul", "Mul"]
    shared = _form0()
    shared.graph.output.append(vi("e", shape=[4, 16]))  # the Erf output is read outside the pattern
    assert "Gelu" not in ops_of(compare(shared, X, passes=["gelu_fusion"]))
