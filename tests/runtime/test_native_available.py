"""The compiled kernels load wherever a C compiler is on PATH (CI installs gcc with scripts/ci-setup): the tests
that need them skip only where none is, so a build that breaks must fail here rather than skip them silently."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime import native


def test_the_compiled_kernels_load_where_a_c_compiler_is_present() -> None:
    if native._compiler() is None and not os.environ.get("APPOPT_NATIVE_LIB"):
        pytest.skip("no C compiler on PATH: the kernels run on NumPy (scripts/ci-setup installs gcc)")
    if not native._wanted():
        pytest.skip("compiled kernels disabled by APPOPT_NATIVE=0")
    assert native.lib() is not None, native.status()


def test_needs_build_is_true_only_until_a_build_for_this_cpu_is_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What a probe asks before its clock starts: a fresh cache needs the ~20 s compile, a cached build does not,
    and neither does a disabled or prebuilt library."""
    cc = native._compiler()
    if cc is None:
        pytest.skip("no C compiler on PATH: nothing is ever built (scripts/ci-setup installs gcc)")
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(native.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    monkeypatch.setattr(native, "_state", {**native._state, "tried": False, "enabled": None})
    monkeypatch.delenv("APPOPT_NATIVE_LIB", raising=False)
    monkeypatch.delenv("APPOPT_NATIVE", raising=False)
    assert native.needs_build()
    built = tmp_path / "cache" / "native" / f"appopt_kernels_{native.target_arch(cc)}_{native.build_key(cc)}.so"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"")
    assert not native.needs_build()
    built.unlink()
    monkeypatch.setenv("APPOPT_NATIVE", "0")
    assert not native.needs_build()
    monkeypatch.delenv("APPOPT_NATIVE")
    monkeypatch.setenv("APPOPT_NATIVE_LIB", str(built))
    assert not native.needs_build()
