"""Pooling kernels: the ONNX backend cases, and onnxruntime on random shapes and attribute mixes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime import native
from tests.runtime.kernels.backend_cases import backend_cases_test
from tests.runtime.kernels.ort_compare import assert_matches_ort, rand

OPS = ["AveragePool", "MaxPool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "MaxUnpool"]


test_backend_cases_pass = backend_cases_test(OPS)


WINDOWS: list[tuple[tuple[int, ...], dict[str, Any]]] = [
    ((1, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ((2, 2, 9, 10), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ((1, 2, 9, 10), {"kernel_shape": [3, 2], "strides": [2, 3], "pads": [1, 0, 0, 1], "ceil_mode": 1}),
    ((1, 2, 10, 9), {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ((1, 2, 10, 9), {"kernel_shape": [4, 3], "strides": [3, 2], "auto_pad": "SAME_LOWER"}),
    ((1, 2, 11, 11), {"kernel_shape": [3, 3], "strides": [2, 2], "dilations": [2, 2], "ceil_mode": 1}),
    ((2, 3, 13), {"kernel_shape": [4], "strides": [3], "pads": [1, 2]}),
    ((1, 2, 5, 6, 7), {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [0, 1, 1, 1, 0, 0]}),
]


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_max_pool_with_indices_matches_onnxruntime(shape, attrs) -> None:
    x = rand(np.random.default_rng(0), *shape)
    assert_matches_ort("MaxPool", {"x": x}, outputs=("y", "indices"), opset=12, **attrs)


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_max_pool_without_indices_matches_onnxruntime(shape, attrs) -> None:
    """The compiled NCHW kernel (2-d float32 windows) and the NumPy path for the rest."""
    x = rand(np.random.default_rng(4), *shape).astype(np.float32)
    assert_matches_ort("MaxPool", {"x": x}, opset=12, **attrs)


@pytest.mark.parametrize(("shape", "attrs"), WINDOWS[:4])
def test_max_pool_column_major_indices_match_onnxruntime(shape, attrs) -> None:
    x = rand(np.random.default_rng(1), *shape)
    assert_matches_ort("MaxPool", {"x": x}, outputs=("y", "indices"), opset=12, storage_order=1, **attrs)


def test_max_pool_keeps_integer_dtype() -> None:
    x = np.random.default_rng(2).integers(0, 255, (1, 2, 6, 6)).astype(np.uint8)
    (y,) = assert_matches_ort("MaxPool", {"x": x}, opset=12, kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    assert y.dtype == np.uint8


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize(("shape", "attrs"), WINDOWS)
def test_average_pool_matches_onnxruntime(shape, attrs, count_include_pad) -> None:
    x = rand(np.random.default_rng(3), *shape)
    assert_matches_ort("AveragePool", {"x": x}, opset=19, count_include_pad=count_include_pad, **attrs)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize(("shape", "attrs"), [w for w in WINDOWS if "dilations" not in w[1]])
def test_lp_pool_matches_onnxruntime(shape, attrs, p) -> None:
    x = rand(np.random.default_rng(4), *shape)
    assert_matches_ort("LpPool", {"x": x}, opset=18, p=p, **attrs)


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 4, 6, 7), (2, 2, 3, 4, 5)])
def test_global_pools_match_onnxruntime(op: str, shape: tuple[int, ...]) -> None:
    assert_matches_ort(op, {"x": rand(np.random.default_rng(5), *shape)})


def test_max_unpool_inverts_max_pool_indices() -> None:
    x = rand(np.random.default_rng(6), 2, 3, 6, 8)
    attrs: dict[str, Any] = {"kernel_shape": [2, 2], "strides": [2, 2]}
    y, indices = assert_matches_ort("MaxPool", {"x": x}, outputs=("y", "indices"), opset=12, **attrs)
    (restored,) = assert_matches_ort("MaxUnpool", {"x": y, "i": indices}, opset=11, **attrs)
    kept = restored != 0
    np.testing.assert_array_equal(restored[kept], x[kept])
    assert kept.sum() == y.size


@pytest.mark.parametrize("strides", [[1, 1], [2, 2], [3, 2]])
@pytest.mark.parametrize("channels", [1, 3, 20])
def test_max_pool_propagates_nan_the_same_in_compiled_and_numpy_paths(strides: list[int], channels: int) -> None:
    """A window holding a NaN pools to NaN whatever the tap order (the compiled kernels kept or dropped it by
    position before: results depended on APPOPT_NATIVE and the layout)."""
    from onnx import helper

    from runtime import compile_model, native

    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, channels, 9, 9)).astype(np.float32)
    x[rng.random(x.shape) < 0.05] = np.nan
    x[0, 0, 4, 4] = np.inf
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=strides, pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", 1, list(x.shape))], [helper.make_empty_tensor_value_info("y")]
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    view = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))[:, :, :: strides[0], :: strides[1]]
    expected = view.max(axis=(4, 5))  # NumPy's max: NaN wins
    try:
        for enabled in (True, False):
            native.set_enabled(enabled)
            got = compile_model(m).run({"x": x})["y"]
            np.testing.assert_array_equal(got, expected, err_msg=f"compiled kernels {enabled}")
    finally:
        native.set_enabled(None)


@pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")
@pytest.mark.parametrize("shape", [(3, 5, 8, 8), (2, 3, 4, 16), (1, 2, 6, 24)])
def test_a_2x2_max_pool_of_narrow_nchw_planes_is_numpys(shape: tuple[int, int, int, int]) -> None:
    """The compiled 2x2/2 NCHW pool (``runtime.native.training``), called and prebound, against NumPy's maximum,
    with ties, -0.0 and a NaN (which propagates, as np.maximum has it)."""
    from onnx import TensorProto, helper

    from runtime import compile_model
    from runtime.native import rows
    from runtime.native.rows import PoolWindow

    rng = np.random.default_rng(5)
    x = rng.integers(-2, 3, size=shape).astype(np.float32)
    x[0, 0, 0, 3] = np.nan
    x[-1, -1, -1, -1] = -0.0
    _, c, h, w = shape
    want = np.maximum(
        np.maximum(x[:, :, 0::2, 0::2], x[:, :, 0::2, 1::2]), np.maximum(x[:, :, 1::2, 0::2], x[:, :, 1::2, 1::2])
    )
    win = PoolWindow([2, 2], [2, 2], [1, 1], [0, 0, 0, 0], [h // 2, w // 2], 0)
    lib = native.lib()
    np.testing.assert_array_equal(rows.pool(lib, x, win, nchw=True), want)
    out = np.empty_like(want)
    bound = rows.bind_pool(lib, x, win, out, nchw=True)
    assert bound is not None
    bound()
    np.testing.assert_array_equal(out, want)
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )  # fmt: skip
    exe = compile_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), 1, passes=())
    np.testing.assert_array_equal(exe.run({"x": x})["y"], want)
