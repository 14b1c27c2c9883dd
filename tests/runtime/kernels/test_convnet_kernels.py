"""The compiled squeeze-excite and embedding-bag kernels (runtime/native/convnets.c) against their NumPy paths, in
both layouts, at odd channel counts (vector tails), batch 1 and more, and every epilogue activation."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime import native
from runtime.errors import KernelError
from runtime.kernels import NodeContext, resolve
from runtime.native.abi import ACTIVATIONS

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")


def _kernel(op: str, **attrs: Any) -> Any:
    node = NodeContext(name=f"test_{op}", op_type=op, domain="com.appopt", opset=1, n_inputs=5)
    return resolve(op, "com.appopt", 1)(node, attrs)


@pytest.mark.parametrize("channels_last", [0, 1])
@pytest.mark.parametrize(("batch", "c", "cr", "h", "w"), [(1, 13, 5, 7, 9), (3, 40, 10, 4, 4), (2, 96, 24, 17, 3)])
def test_squeeze_excite_native_matches_numpy(channels_last: int, batch: int, c: int, cr: int, h: int, w: int) -> None:
    rng = np.random.default_rng(c)
    shape = (batch, h, w, c) if channels_last else (batch, c, h, w)
    x = rng.standard_normal(shape).astype(np.float32)
    w1, b1 = rng.standard_normal((cr, c, 1, 1)).astype(np.float32), rng.standard_normal(cr).astype(np.float32)
    w2, b2 = rng.standard_normal((c, cr, 1, 1)).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    for act1, gate in [("Silu", "Sigmoid"), ("Relu", "HardSigmoid"), ("", "HardSwish"), ("LeakyRelu", "")]:
        lo = 1 / 6 if gate == "HardSigmoid" else 0.0
        k = _kernel("SqueezeExcite", act1=act1, act1_lo=0.1, activation=gate, act_lo=lo, act_hi=0.5,
                    channels_last=channels_last)  # fmt: skip
        got = k.compute(x, w1, b1, w2, b2)
        want = k.compute_numpy(x, w1, b1, w2, b2)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))
    out = np.empty_like(x)
    bound = k.bind(out, x, w1, None, w2, None)
    assert bound is not None
    bound()
    np.testing.assert_allclose(out, k.compute_numpy(x, w1, None, w2, None), rtol=1e-5, atol=1e-5)


def test_every_activation_has_a_numpy_twin() -> None:
    from runtime.native.abi import Epilogue

    y = np.linspace(-9, 9, 37, dtype=np.float32)
    for name in ACTIVATIONS:
        out = Epilogue(name, 0.2, 0.5).apply_numpy(y.copy())
        assert out.shape == y.shape and np.isfinite(out).all()
        if name:
            assert not np.array_equal(out, y), name


@pytest.mark.parametrize(("column", "dtype", "mean"), [(-1, np.int64, 0), (2, np.int32, 0), (0, np.int64, 1)])
@pytest.mark.parametrize("batch", [1, 6])
def test_embedding_bag_native_matches_numpy(column: int, dtype: type, mean: int, batch: int) -> None:
    rng = np.random.default_rng(batch)
    table = rng.standard_normal((40, 21)).astype(np.float32)
    ids = rng.integers(-40, 40, (batch, 5) if column < 0 else (batch, 3, 5)).astype(dtype)
    for keepdims in (0, 1):
        k = _kernel("EmbeddingBag", column=column, mean=mean, keepdims=keepdims)
        want = k.compute_numpy(table, ids)
        np.testing.assert_allclose(k.compute(table, ids), want, rtol=1e-6, atol=1e-6)
        out = np.empty(want.shape, dtype=np.float32)
        bound = k.bind(out, table, ids)
        assert bound is not None
        bound()
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    ids[(-1, -1) if column < 0 else (-1, column, -1)] = -41
    with pytest.raises(KernelError, match="index -41 is out of range"):
        k.compute(table, ids)
