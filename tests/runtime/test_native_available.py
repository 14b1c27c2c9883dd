"""The compiled kernels load wherever a C compiler is on PATH (CI installs gcc with scripts/ci-setup): the tests
that need them skip only where none is, so a build that breaks must fail here rather than skip them silently."""

from __future__ import annotations

import os

import pytest

from runtime import native


def test_the_compiled_kernels_load_where_a_c_compiler_is_present() -> None:
    if native._compiler() is None and not os.environ.get("APPOPT_NATIVE_LIB"):
        pytest.skip("no C compiler on PATH: the kernels run on NumPy (scripts/ci-setup installs gcc)")
    if not native._wanted():
        pytest.skip("compiled kernels disabled by APPOPT_NATIVE=0")
    assert native.lib() is not None, native.status()
