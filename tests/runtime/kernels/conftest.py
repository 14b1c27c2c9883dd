"""Fixtures for kernel tests: the ONNX backend node cases of one op, and kernels built straight from the registry.

The backend cases come from the ``onnx`` wheel's generators (``onnx.backend.test.case.node``). Importing only the
generator module of the op under test takes well under a second, where collecting all 1,884 cases takes ~8 s.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from onnx.backend.test.runner import Runner

from runtime import compile_model
from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel

LATEST_OPSET = onnx.defs.onnx_opset_version()


def _generator_module(op_type: str) -> str | None:
    """The onnx generator module of ``op_type`` (``ReduceLogSum``: ``reduce_log_sum``, ``And``: ``and_``)."""
    import onnx.backend.test.case.node as node_cases

    wanted = op_type.lower()
    for info in pkgutil.iter_modules(node_cases.__path__):
        if info.name.replace("_", "").lower() == wanted:
            return f"{node_cases.__name__}.{info.name}"
    return None


def load_backend_cases(op_type: str) -> list[Any]:
    """The single-node backend cases whose node is ``op_type``."""
    import onnx.backend.test.case.node as node_cases

    module = _generator_module(op_type)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if module is None or not hasattr(node_cases, "_NodeTestCases"):
            cases = node_cases.collect_testcases()
        else:
            importlib.import_module(module)  # its exporters append to the package's case list on import
            cases = node_cases._NodeTestCases
    return [
        c
        for c in cases
        if c.model is not None and len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type == op_type
    ]


def _as_array(value: Any) -> Any:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_as_array(v) for v in value]
    return value


def run_backend_case(case: Any) -> str | None:
    """Run one case through ``compile_model``; ``None`` when every data set matches, else the reason."""
    try:
        exe = compile_model(case.model)
        for inputs, expected in case.data_sets:
            feeds = {vi.name: _as_array(x) for vi, x in zip(case.model.graph.input, inputs, strict=False)}
            got = exe.run(feeds)
            outputs = [got[name] for name in exe.output_names]
            Runner.assert_similar_outputs([_as_array(e) for e in expected], outputs, case.rtol, case.atol)
    except Exception as exc:  # report, do not stop: one op's test lists all its failing cases
        return f"{case.name}: {type(exc).__name__}: {str(exc)[:300]}"
    return None


@pytest.fixture(scope="session")
def backend_failures() -> Callable[[str], tuple[int, list[str]]]:
    """``check(op)`` -> (number of backend cases for ``op``, failure reasons)."""

    def check(op_type: str) -> tuple[int, list[str]]:
        cases = load_backend_cases(op_type)
        failures = [reason for reason in map(run_backend_case, cases) if reason]
        return len(cases), failures

    return check


@pytest.fixture(scope="session")
def make_kernel() -> Callable[..., Kernel]:
    """``make_kernel(op, opset=LATEST_OPSET, **attrs)``: the registered kernel for ``op`` at ``opset``."""

    def build(op_type: str, opset: int = LATEST_OPSET, n_inputs: int = 1, **attrs: Any) -> Kernel:
        cls = resolve(op_type, "", opset)
        node = NodeContext(name=f"test_{op_type}", op_type=op_type, opset=opset, n_inputs=n_inputs)
        return cls(node, attrs)

    return build
