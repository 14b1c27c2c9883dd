"""Tensor-creating kernels: every Constant attribute form, Range arithmetic, EyeLike, and the random ops (whose
values cannot be compared, so their shape, dtype, range, seeding and statistics are checked)."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel


def kernel(op: str, opset: int = 21, **attrs: Any) -> Kernel:
    return resolve(op, "", opset)(NodeContext(name=f"test_{op}", op_type=op, opset=opset), attrs)


@pytest.mark.parametrize(
    ("attr", "value", "dtype", "expected"),
    [
        ("value", np.array([[1, 2]], np.int8), np.int8, [[1, 2]]),
        ("sparse_value", np.array([0, 0, 5.0], np.float32), np.float32, [0, 0, 5]),
        ("value_float", 1.5, np.float32, 1.5),
        ("value_floats", [1.0, 2.5], np.float32, [1.0, 2.5]),
        ("value_int", 7, np.int64, 7),
        ("value_ints", [3, -1], np.int64, [3, -1]),
        ("value_string", "hi", object, "hi"),
        ("value_strings", ["a", "b"], object, ["a", "b"]),
    ],
)
def test_constant_every_attribute_form(attr: str, value: Any, dtype: Any, expected: Any) -> None:
    (out,) = kernel("Constant", **{attr: value}).run()
    assert out.dtype == np.dtype(dtype)
    assert out.tolist() == expected


def test_constant_value_is_read_only_so_no_consumer_can_corrupt_later_runs() -> None:
    (out,) = kernel("Constant", value_ints=[1, 2]).run()
    with pytest.raises(ValueError, match="read-only"):
        out[0] = 5


def test_constant_of_shape_uses_the_value_dtype_and_defaults_to_float_zero() -> None:
    (out,) = kernel("ConstantOfShape", value=np.array([3], np.int32)).run(np.array([2, 1], np.int64))
    assert out.dtype == np.int32 and out.tolist() == [[3], [3]]
    (zeros,) = kernel("ConstantOfShape").run(np.array([0, 4], np.int64))
    assert zeros.dtype == np.float32 and zeros.shape == (0, 4)


@pytest.mark.parametrize(
    ("start", "limit", "delta", "dtype"),
    [
        (0, 10, 3, np.int32),
        (10, 4, -2, np.int64),
        (5, 5, 1, np.int16),
        (1, 0, 1, np.int64),
        (0.5, 2.0, 0.25, np.float32),
        (1.0, -1.0, -0.5, np.float64),
        (0.0, 1.0, 0.125, np.float16),
    ],
)
def test_range_matches_numpy_arange(start, limit, delta, dtype) -> None:
    args = [np.array(v, dtype=dtype) for v in (start, limit, delta)]
    (out,) = kernel("Range").run(*args)
    expected = np.arange(start, limit, delta).astype(dtype)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out, expected)


def test_range_accepts_one_element_tensors_and_bfloat16() -> None:
    bf = ml_dtypes.bfloat16
    (out,) = kernel("Range").run(np.array([1], bf), np.array([4], bf), np.array([1], bf))
    assert out.dtype == bf and out.astype(np.float32).tolist() == [1, 2, 3]


def test_eye_like_offsets_the_diagonal_and_casts() -> None:
    (out,) = kernel("EyeLike", k=-1, dtype=TensorProto.INT32).run(np.zeros((3, 2), np.float32))
    assert out.dtype == np.int32
    assert out.tolist() == [[0, 0], [1, 0], [0, 1]]


@pytest.mark.parametrize(
    ("op", "attrs", "inputs"),
    [
        ("RandomUniform", {"shape": [2, 3], "low": -2.0, "high": -1.0}, []),
        ("RandomNormal", {"shape": [4], "dtype": TensorProto.DOUBLE}, []),
        ("RandomUniformLike", {"dtype": TensorProto.FLOAT16}, [np.zeros((2, 2), np.float32)]),
        ("RandomNormalLike", {}, [np.zeros((3, 1), np.float64)]),
        ("Bernoulli", {}, [np.full((5,), 0.5, np.float32)]),
    ],
)
def test_random_ops_shape_dtype_and_seeding(op: str, attrs: dict[str, Any], inputs: list[np.ndarray]) -> None:
    (a,) = kernel(op, seed=3.0, **attrs).run(*inputs)
    (b,) = kernel(op, seed=3.0, **attrs).run(*inputs)
    np.testing.assert_array_equal(a, b)  # same seed, same draws
    expected_dtype = {TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16}.get(
        attrs.get("dtype", -1), inputs[0].dtype if inputs else np.float32
    )
    assert a.dtype == expected_dtype
    assert a.shape == (tuple(attrs["shape"]) if "shape" in attrs else inputs[0].shape)
    if op == "RandomUniform":
        assert ((a >= -2) & (a < -1)).all()
    if op == "Bernoulli":
        assert set(np.unique(a).tolist()) <= {0.0, 1.0}


def test_uniform_and_bernoulli_statistics() -> None:
    (u,) = kernel("RandomUniformLike", seed=1.0).run(np.zeros(20000, np.float32))
    assert abs(float(u.mean()) - 0.5) < 0.02
    (b,) = kernel("Bernoulli", seed=1.0).run(np.full(20000, 0.2))
    assert abs(float(b.mean()) - 0.2) < 0.02


def test_multinomial_samples_follow_the_log_probabilities() -> None:
    logits = np.log(np.array([[0.1, 0.0001, 0.9], [1.0, 1e-6, 1e-6]], np.float32))
    (draws,) = kernel("Multinomial", seed=0.0, sample_size=5000).run(logits)
    assert draws.shape == (2, 5000) and draws.dtype == np.int32
    frequencies = np.bincount(draws[0], minlength=3) / 5000
    np.testing.assert_allclose(frequencies, [0.1, 0.0, 0.9], atol=0.02)
    assert (draws[1] == 0).mean() > 0.99
