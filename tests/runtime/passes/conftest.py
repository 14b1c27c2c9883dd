"""Pass tests run with the structural verifier after every pass, and compare each rewrite with the plain graph."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import onnx
import pytest

from runtime import Executable, compile_model, native
from runtime.passes import pipeline


@pytest.fixture(autouse=True)
def _verify_after_each_pass(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    seen: list[str] = []

    def verify(graph, name):
        pipeline.verify_graph(graph, name)
        seen.append(name)

    monkeypatch.setattr(pipeline, "verifier", verify)
    yield seen


@pytest.fixture
def numpy_only() -> Iterator[None]:
    """The compiled kernels off: fused ops take their NumPy paths, which repeat the unfused arithmetic."""
    native.set_enabled(False)
    try:
        yield
    finally:
        native.set_enabled(None)


def ops_of(exe: Executable) -> list[str]:
    return [n.op_type for n in exe.model.graph.nodes]


def compare(
    m: onnx.ModelProto,
    feeds: Mapping[str, np.ndarray],
    passes: Sequence[str] | None = None,
    exact: bool = False,
    rtol: float = 1e-5,
    layout: str = "auto",
) -> Executable:
    """Compile with no passes and with ``passes``; outputs must match (bit for bit when ``exact``)."""
    plain = compile_model(m, passes=[])
    optimised = compile_model(m, passes=passes, layout=layout)
    a, b = plain.run(dict(feeds)), optimised.run(dict(feeds))
    assert a.keys() == b.keys()
    for name in a:
        if exact:
            np.testing.assert_array_equal(a[name], b[name])
        else:
            scale = float(np.abs(a[name]).max()) if a[name].size else 1.0
            np.testing.assert_allclose(b[name], a[name], rtol=rtol, atol=rtol * max(scale, 1e-6))
    # a second run goes through the static memory plan: same answers
    again = optimised.run(dict(feeds))
    for name in a:
        np.testing.assert_array_equal(again[name], b[name])
    return optimised
