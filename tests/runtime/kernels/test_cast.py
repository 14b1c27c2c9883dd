"""Cast, CastLike and BitCast."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from onnx import TensorProto

from runtime.errors import KernelError
from tests.runtime.kernels.backend_cases import backend_cases_test

OPS = ["Cast", "CastLike", "BitCast"]


test_backend_cases_pass = backend_cases_test(OPS)


SPECIAL = np.array([np.inf, -np.inf, np.nan, 1e6, -1e6, 0.3], dtype=np.float32)


@pytest.mark.parametrize(
    ("to", "dtype"),
    [
        (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn),
        (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
        (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2),
        (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz),
    ],
)
def test_float8_saturates_by_default(to, dtype, make_kernel) -> None:
    (out,) = make_kernel("Cast", to=to).run(SPECIAL)
    assert out.dtype == np.dtype(dtype)
    limit = float(ml_dtypes.finfo(dtype).max)
    values = out.astype(np.float32)
    assert values[[0, 3]].tolist() == [limit, limit]
    assert values[[1, 4]].tolist() == [-limit, -limit]
    assert np.isnan(values[2])


def test_float8_without_saturation_follows_the_spec_table(make_kernel) -> None:
    (e4m3,) = make_kernel("Cast", to=TensorProto.FLOAT8E4M3FN, saturate=0).run(SPECIAL)
    (e5m2,) = make_kernel("Cast", to=TensorProto.FLOAT8E5M2, saturate=0).run(SPECIAL)
    assert np.isnan(e4m3.astype(np.float32)[:5]).all()  # no Inf in E4M3FN: Inf and overflow become NaN
    assert e5m2.astype(np.float32)[[0, 1, 3, 4]].tolist() == [np.inf, -np.inf, np.inf, -np.inf]


def test_float8e8m0_rounding_modes(make_kernel) -> None:
    x = np.array([3.0, 2.0, 5.0, np.inf, np.nan], dtype=np.float32)
    results = {}
    for mode in ("up", "down", "nearest"):
        (out,) = make_kernel("Cast", to=TensorProto.FLOAT8E8M0, round_mode=mode).run(x)
        results[mode] = out.astype(np.float32)[:3].tolist()
        assert out.view(np.uint8)[3:].tolist() == [0xFE, 0xFF]  # saturated Inf, NaN
    assert results == {"up": [4.0, 2.0, 8.0], "down": [2.0, 2.0, 4.0], "nearest": [4.0, 2.0, 4.0]}
    (unsaturated,) = make_kernel("Cast", to=TensorProto.FLOAT8E8M0, saturate=0).run(x)
    assert unsaturated.view(np.uint8)[3] == 0xFF


def test_integer_narrowing_wraps_like_twos_complement(make_kernel) -> None:
    (out,) = make_kernel("Cast", to=TensorProto.INT8).run(np.array([200, -129, 127], dtype=np.int16))
    assert out.dtype == np.int8 and out.tolist() == [-56, 127, 127]


def test_bool_and_back(make_kernel) -> None:
    (flags,) = make_kernel("Cast", to=TensorProto.BOOL).run(np.array([0.0, -0.0, 0.1, np.nan], dtype=np.float32))
    assert flags.tolist() == [False, False, True, True]
    (numbers,) = make_kernel("Cast", to=TensorProto.FLOAT).run(flags)
    assert numbers.dtype == np.float32 and numbers.tolist() == [0.0, 0.0, 1.0, 1.0]


def test_strings_parse_numbers_and_special_literals(make_kernel) -> None:
    text = np.array(["3.14", "1e-5", "1E8", "+INF", "-inf", "NaN", " 7 "], dtype=object)
    (out,) = make_kernel("Cast", to=TensorProto.FLOAT).run(text)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out[:5], np.array([3.14, 1e-5, 1e8, np.inf, -np.inf], dtype=np.float32))
    assert np.isnan(out[5]) and out[6] == 7.0
    (ints,) = make_kernel("Cast", to=TensorProto.INT64).run(np.array(["1000", "100.5", "-3"], dtype=object))
    assert ints.tolist() == [1000, 100, -3]


@settings(max_examples=40, deadline=None)
@given(
    x=hnp.arrays(
        np.float32,
        st.integers(1, 6),
        elements=st.floats(width=32, allow_nan=False, allow_infinity=False, allow_subnormal=False),
    )
)
def test_float_text_round_trips_to_eight_digits(x, make_kernel) -> None:
    (text,) = make_kernel("Cast", to=TensorProto.STRING).run(x)
    assert text.dtype == object and all(isinstance(s, str) for s in text)
    (back,) = make_kernel("Cast", to=TensorProto.FLOAT).run(text)
    np.testing.assert_allclose(back, x, rtol=1e-7)


def test_numbers_format_like_onnxruntime(make_kernel) -> None:
    x = np.array([0.1, 1e6, 123456789, 3.0, -0.0, np.nan, np.inf, -np.inf], dtype=np.float32)
    (text,) = make_kernel("Cast", to=TensorProto.STRING).run(x)
    assert text.tolist() == ["0.1", "1000000", "1.2345679e+08", "3", "-0", "NaN", "INF", "-INF"]
    (ints,) = make_kernel("Cast", to=TensorProto.STRING).run(np.array([[2**40, -5]], dtype=np.int64))
    assert ints.shape == (1, 2) and ints.tolist() == [["1099511627776", "-5"]]
    (flags,) = make_kernel("Cast", to=TensorProto.STRING).run(np.array([True, False]))
    assert flags.tolist() == ["1", "0"]


def test_cast_v1_names_the_type(make_kernel) -> None:
    (out,) = make_kernel("Cast", opset=1, to="DOUBLE").run(np.array([1.5], dtype=np.float32))
    assert out.dtype == np.float64


def test_castlike_takes_the_type_of_its_second_input(make_kernel) -> None:
    (out,) = make_kernel("CastLike").run(np.array([1.7, -1.7]), np.zeros(0, dtype=np.int16))
    assert out.dtype == np.int16 and out.tolist() == [1, -1]


def test_bitcast_reinterprets_bits(make_kernel) -> None:
    x = np.array([1.0, -2.0], dtype=np.float32)
    (out,) = make_kernel("BitCast", to=TensorProto.INT32).run(x)
    assert out.tolist() == x.view(np.int32).tolist()
    (nibbles,) = make_kernel("BitCast", to=TensorProto.UINT4).run(np.array([-1, 7], dtype=ml_dtypes.int4))
    assert nibbles.astype(np.int32).tolist() == [15, 7]
    with pytest.raises(KernelError, match="bits"):
        make_kernel("BitCast", to=TensorProto.INT64).run(x)
