"""The strided-copy benchmark runs and prints a ratio per view and per product (its figures are not asserted)."""

from __future__ import annotations

import pytest

from benchmarks import strided_copy
from runtime import native

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")


def test_the_benchmark_prints_ours_against_numpy_and_the_transposed_product_against_the_plain_one() -> None:
    lines = strided_copy.main(["--blocks", "1", "--calls", "10"])
    assert lines[0].startswith("# CPU ")
    copies = [line for line in lines if line.startswith("copy ")]
    products = [line for line in lines if line.startswith("product ")]
    assert len(copies) == len(strided_copy.VIEWS) and len(products) == len(strided_copy.PRODUCTS)
    assert all("ratio " in line for line in copies + products)
