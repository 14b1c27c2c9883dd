"""Operands the compiled kernels are handed must live until the kernel has read them: a residual that needs a
contiguous copy, and an output buffer the kernel cannot write directly, are the cases that once went wrong.

The lifetime tests run in a child process whose glibc maps every allocation of 64 KiB or more on its own pages
(``MALLOC_MMAP_THRESHOLD_``): a copy freed before the kernel reads it is then unmapped, and the read faults every
time instead of reading stale memory that usually still holds the right numbers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from runtime import native
from runtime.native import ops

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")

ROOT = Path(__file__).resolve().parents[2]


def _run_child(body: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=str(ROOT))
    code = "import numpy as np\nfrom runtime import native\nfrom runtime.native import ops\n"
    code += "lib = native.lib()\nassert lib is not None, native.status()\n" + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.parametrize("depthwise", [False, True])
def test_a_convolution_reads_a_residual_copy_that_is_still_alive(depthwise: bool) -> None:
    # a transposed (non-contiguous) residual of 256 KiB: the kernel reads a contiguous copy of it
    done = _run_child(
        f"""
        rng = np.random.default_rng(0)
        c = 64
        w = rng.standard_normal((c, 1 if {depthwise} else c, 3, 3)).astype(np.float32) * 0.1
        conv = ops.NhwcConv2d(lib, w, None, c if {depthwise} else 1, (1, 1), (1, 1), (1, 1, 1, 1), ops.Epilogue())
        x = rng.standard_normal((1, 32, 32, c)).astype(np.float32)
        res = rng.standard_normal((1, 32, c, 32)).astype(np.float32).transpose(0, 1, 3, 2)
        assert not res.flags.c_contiguous
        got = conv(x, res)
        want = conv(x) + res
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_a_packed_product_reads_a_residual_copy_that_is_still_alive() -> None:
    done = _run_child(
        """
        rng = np.random.default_rng(1)
        b = rng.standard_normal((48, 40)).astype(np.float32)
        mm = ops.PackedMatMul(lib, b, None, ops.Epilogue())
        a = rng.standard_normal((8192, 48)).astype(np.float32)
        res = rng.standard_normal((40, 8192)).astype(np.float32).T
        got = mm(a, res)
        np.testing.assert_allclose(got, a @ b + res, rtol=1e-4, atol=1e-4)
        print("ok")
        """
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])


def test_a_product_refuses_an_operand_of_the_wrong_width() -> None:
    lib = native.lib()
    assert lib is not None
    mm = ops.PackedMatMul(lib, np.ones((4, 8), np.float32), None, ops.Epilogue())
    # 16 floats read as four rows of 4 would write four rows of 8 into an output of two
    with pytest.raises(ValueError, match="last axis must be 4"):
        mm(np.ones((2, 8), np.float32))


def test_kernels_given_an_output_they_cannot_write_directly_fill_it() -> None:
    lib = native.lib()
    assert lib is not None
    rng = np.random.default_rng(2)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    conv = ops.NhwcConv2d(lib, w, None, 1, (1, 1), (1, 1), (1, 1, 1, 1), ops.Epilogue())
    x = rng.standard_normal((2, 6, 7, 3)).astype(np.float32)
    want = conv(x)
    wide = np.zeros((2, 6, 7, 9), dtype=np.float32)
    got = conv(x, out=wide[..., 2:7])  # a channel slice: not contiguous
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(wide[..., 2:7], want)
    assert not wide[..., :2].any() and not wide[..., 7:].any()
    b = rng.standard_normal((3, 5)).astype(np.float32)
    mm = ops.PackedMatMul(lib, b, None, ops.Epilogue())
    a = rng.standard_normal((4, 3)).astype(np.float32)
    into = np.zeros((5, 4), dtype=np.float32).T  # the right shape, transposed strides
    assert mm(a, out=into) is into
    np.testing.assert_allclose(into, a @ b, rtol=1e-5, atol=1e-6)


def test_a_prebound_dynamic_product_refuses_a_residual_it_would_have_to_copy() -> None:
    # a bound call reads its residual at a fixed address on every run: a copy made at binding would go stale
    lib = native.lib()
    assert lib is not None
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((2, 6, 5)).astype(np.float32), rng.standard_normal((2, 5, 7)).astype(np.float32)
    res = rng.standard_normal((2, 7, 6)).astype(np.float32).transpose(0, 2, 1)
    out = np.empty((2, 6, 7), dtype=np.float32)
    product = ops.DynamicMatMul(lib, None, ops.Epilogue())
    assert product.bind(a, b, res, out) is None
    same = np.ascontiguousarray(res)
    bound = product.bind(a, b, same, out)
    assert bound is not None
    same += 1.0  # the residual changes after binding, as a planned buffer does between runs
    bound()
    np.testing.assert_allclose(out, a @ b + same, rtol=1e-5, atol=1e-5)
