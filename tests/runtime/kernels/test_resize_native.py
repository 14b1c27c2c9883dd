"""Resize on the compiled kernel (runtime/native/upsample.c ``ap_resize2d``), NCHW and NHWC, against onnx's
reference evaluator and the NumPy path: nearest, linear and cubic in every coordinate mode they take, odd sizes,
up and down, batch 1 and 3, scales and sizes inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

from runtime import native
from runtime.kernels import NodeContext, resize_native, resolve
from runtime.kernels.base import Kernel
from tests.runtime.graphs import model, vi
from tests.runtime.kernels.test_resize import MODES as NUMPY_MODES

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")

#: The NumPy path's modes, and cubic with exclude_outside at align_corners.
MODES: list[dict[str, Any]] = [
    *NUMPY_MODES,
    {"mode": "cubic", "coordinate_transformation_mode": "align_corners", "exclude_outside": 1},
]
#: (NCHW input shape, output H, W): odd sizes, up and down, one axis unchanged, batch > 1.
SHAPES = [((1, 3, 5, 7), (10, 14)), ((3, 17, 4, 3), (9, 3)), ((2, 5, 9, 6), (4, 5)), ((1, 1, 1, 2), (3, 5))]


def _kernel(op: str, attrs: dict[str, Any]) -> Kernel:
    domain = "com.appopt" if op == "NhwcResize" else ""
    ctx = NodeContext(name="rs", op_type=op, domain=domain, opset=19 if not domain else 1, n_inputs=4)
    return resolve(op, domain, 19 if not domain else 1)(ctx, attrs)


def _reference(x: np.ndarray, sizes: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)
    m = model([node], [vi("x", shape=list(x.shape)), vi("sizes", 7, [4])], [vi("y")], opset=19)
    return ReferenceEvaluator(m).run(None, {"x": x, "sizes": sizes})[0]


@pytest.fixture
def native_calls(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records every compiled Resize the kernels bind."""
    calls: list[bool] = []
    real = resize_native.bind_resize

    def counting(*args: Any, **kwargs: Any) -> Any:
        bound = real(*args, **kwargs)
        calls.append(bound is not None)
        return bound

    monkeypatch.setattr(resize_native, "bind_resize", counting)
    return calls


@pytest.mark.parametrize("attrs", MODES, ids=lambda a: "-".join(str(v) for v in a.values()))
@pytest.mark.parametrize(("shape", "out_hw"), SHAPES)
def test_both_layouts_match_the_reference(attrs, shape, out_hw, native_calls) -> None:
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    sizes = np.array([shape[0], shape[1], *out_hw], dtype=np.int64)
    want = _reference(x, sizes, attrs)
    nchw = _kernel("Resize", attrs).compute(x, None, None, sizes)
    nhwc = _kernel("NhwcResize", attrs).compute(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), None, None, sizes)
    assert native_calls == [True, True]
    np.testing.assert_allclose(nchw, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), want, rtol=1e-5, atol=1e-5)
    if attrs["mode"] == "nearest":  # copies: exact
        np.testing.assert_array_equal(nchw, want)


@pytest.mark.parametrize("scales", [[1, 1, 2, 2], [1, 1, 0.5, 1.5], [1, 1, 3, 1]])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_scales_input_matches_the_numpy_path(scales, mode, native_calls) -> None:
    attrs = {"mode": mode, "coordinate_transformation_mode": "pytorch_half_pixel" if mode == "linear" else "asymmetric"}
    x = np.random.default_rng(5).standard_normal((2, 6, 7, 5)).astype(np.float32)
    s = np.array(scales, dtype=np.float32)
    got = _kernel("Resize", attrs).compute(x, None, s)
    got_nhwc = _kernel("NhwcResize", attrs).compute(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), None, s)
    assert native_calls == [True, True]
    native.set_enabled(False)
    try:
        want = _kernel("Resize", attrs).compute(x, None, s)
    finally:
        native.set_enabled(None)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_nhwc.transpose(0, 3, 1, 2), want, rtol=1e-6, atol=1e-6)


def test_other_axes_and_crop_modes_take_the_numpy_path(native_calls) -> None:
    x = np.random.default_rng(1).standard_normal((1, 4, 6, 6)).astype(np.float32)
    channels = _kernel("Resize", {"mode": "linear"}).compute(x, None, np.array([1, 0.5, 1, 1], np.float32))
    assert channels.shape == (1, 2, 6, 6)
    crop = {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 9.0}
    roi = np.array([0, 0, -0.2, 0, 1, 1, 1.2, 1], dtype=np.float32)
    sizes = np.array([1, 4, 8, 8], dtype=np.int64)
    got = _kernel("NhwcResize", crop).compute(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), roi, None, sizes)
    want = _kernel("Resize", crop).compute(x, roi, None, sizes)
    assert native_calls == []
    np.testing.assert_allclose(got.transpose(0, 3, 1, 2), want, rtol=1e-6)
    assert (want == 9.0).any()


@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
def test_planned_runs_follow_scales_that_change_value(layout: str) -> None:
    """Scales from a graph input: same input shapes, other values (same output size, or another) between runs."""
    from onnx import TensorProto

    from runtime import compile_model
    from tests.runtime.graphs import const

    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Resize", ["c", "", "scales"], ["r"], mode="linear"),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    w = np.random.default_rng(2).standard_normal((4, 3, 3, 3))
    m = model(
        nodes, [vi("x", shape=[1, 3, 4, 4]), vi("scales", TensorProto.FLOAT, [4])], [vi("y")], [const("w", w)], 19
    )
    exe = compile_model(m, layout=layout)
    plain = compile_model(m, passes=[])
    x = np.random.default_rng(3).standard_normal((1, 3, 4, 4)).astype(np.float32)
    for factor in (2.0, 2.0, 2.1, 2.0, 3.0, 2.0):
        feeds = {"x": x, "scales": np.array([1, 1, factor, factor], np.float32)}
        got, want = exe.run(feeds)["y"], plain.run(feeds)["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
