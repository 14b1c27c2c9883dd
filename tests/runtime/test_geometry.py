"""Window geometry is refused before any kernel loops over it (issue 21: segfaults and hangs in the C pools, a
Conv whose kernel_shape disagrees with its weight)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from onnx import helper

from runtime import compile_model, native
from runtime.errors import KernelError, ModelCheckError
from runtime.geometry import MAX_POOL_WORK
from tests.runtime.graphs import F, const, model, vi

INT64_MAX = 2**63 - 1


@pytest.fixture(params=[True, False], ids=["native", "numpy"])
def paths(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Each test runs with the compiled kernels on and off."""
    native.set_enabled(request.param)
    try:
        yield request.param
    finally:
        native.set_enabled(None)


def _pool(op: str, x_shape: list[Any], **attrs: Any) -> Any:
    node = helper.make_node(op, ["x"], ["y"], name="pool", **attrs)
    return model([node], [vi("x", F, x_shape)], [vi("y", F, None)], opset=19)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
@pytest.mark.parametrize(
    "attrs",
    [
        {"strides": [INT64_MAX - 7, INT64_MAX - 7]},
        {"dilations": [INT64_MAX, 1]},
        {"pads": [0, 0, INT64_MAX, 0]},
        {"pads": [-1, 0, 0, 0]},
        {"strides": [0, 1]},
        {"strides": [1, 1, 1]},
        {"kernel_shape": [2, INT64_MAX]},
        {"kernel_shape": [0, 2]},
    ],
)
def test_pool_attributes_out_of_range_are_refused_at_compile(paths: bool, op: str, attrs: dict[str, Any]) -> None:
    attrs = {"kernel_shape": [2, 2], **attrs}
    with pytest.raises(ModelCheckError, match=r"^node 'pool' \(" + op):
        compile_model(_pool(op, [1, 1, 4, 4], **attrs))


def test_the_fuzzers_129_byte_maxpool_is_refused(paths: bool) -> None:
    m = _pool("MaxPool", [1, 1, 4, 4], kernel_shape=[2, 2], strides=[INT64_MAX - 7, INT64_MAX - 7])
    assert len(m.SerializeToString()) < 200
    with pytest.raises(ModelCheckError, match=r"strides .* must hold values from 1 to 2147483647"):
        compile_model(m)


def test_a_pool_window_larger_than_its_padded_input_is_refused_at_run_time(paths: bool) -> None:
    exe = compile_model(_pool("MaxPool", [1, 1, "h", "w"], kernel_shape=[3, 3]))
    with pytest.raises(KernelError, match=r"node 'pool' \(MaxPool\).*larger than the padded input"):
        exe.run({"x": np.zeros((1, 1, 2, 8), np.float32)})


def test_a_pool_with_unbounded_work_is_refused_not_run(paths: bool) -> None:
    """Stride-1 windows of half the input over a large padded input: ~2**44 taps, hours in the C loop."""
    exe = compile_model(_pool("MaxPool", [1, 1, "h", "w"], kernel_shape=[1024, 1024], pads=[1024, 1024, 1024, 1024]))
    with pytest.raises(KernelError, match=f"above the limit of {MAX_POOL_WORK}"):
        exe.run({"x": np.zeros((1, 1, 1024, 1024), np.float32)})


def _conv(kernel_shape: list[int], w_as_input: bool = False) -> Any:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=kernel_shape)
    w = np.ones((4, 3, 3, 3), np.float32)
    if w_as_input:
        return model([node], [vi("x", F, [1, 3, 8, 8]), vi("w", F, ["m", "c", "kh", "kw"])], [vi("y", F, None)])
    return model([node], [vi("x", F, [1, 3, 8, 8])], [vi("y", F, None)], [const("w", w)])


def test_conv_kernel_shape_must_match_the_weight(paths: bool) -> None:
    with pytest.raises(ModelCheckError, match=r"node 'conv' \(Conv\).*kernel_shape \[5, 5\] does not match"):
        compile_model(_conv([5, 5]))


def test_conv_kernel_shape_is_checked_against_a_weight_fed_at_run_time(paths: bool) -> None:
    exe = compile_model(_conv([5, 5], w_as_input=True))
    x = np.zeros((1, 3, 8, 8), np.float32)
    with pytest.raises(KernelError, match=r"node 'conv' \(Conv\).*kernel_shape \[5, 5\] does not match"):
        exe.run({"x": x, "w": np.ones((4, 3, 3, 3), np.float32)})
    assert exe.run({"x": x, "w": np.ones((4, 3, 5, 5), np.float32)})["y"].shape == (1, 4, 4, 4)


def test_a_matching_conv_still_runs(paths: bool) -> None:
    out = compile_model(_conv([3, 3])).run({"x": np.ones((1, 3, 8, 8), np.float32)})["y"]
    np.testing.assert_allclose(out, np.full((1, 4, 6, 6), 27.0, np.float32))


@pytest.mark.parametrize("attrs", [{"strides": [INT64_MAX, 1]}, {"pads": [0, 0, 0, INT64_MAX]}, {"group": 0}])
def test_conv_attributes_out_of_range_are_refused(paths: bool, attrs: dict[str, Any]) -> None:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    m = model([node], [vi("x", F, [1, 3, 8, 8])], [vi("y", F, None)], [const("w", np.ones((4, 3, 3, 3)))])
    with pytest.raises(ModelCheckError, match=r"node 'conv' \(Conv\)"):
        compile_model(m)


def test_a_conv_with_an_unbounded_output_is_refused_not_run(paths: bool) -> None:
    """Pads of 2**20 around a 1x1 image: a 2**42-element output the C loop would fill for hours."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[2**20] * 4)
    m = model([node], [vi("x", F, [1, 1, "h", "w"])], [vi("y", F, None)], [const("w", np.ones((1, 1, 1, 1)))])
    exe = compile_model(m)
    with pytest.raises(KernelError, match=r"node 'conv(_nhwc)?' \((Nhwc)?Conv\).*above the limit of 2147483648"):
        exe.run({"x": np.ones((1, 1, 1, 1), np.float32)})
