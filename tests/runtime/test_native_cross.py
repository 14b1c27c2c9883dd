"""Kernels for another platform: cross flags never say -march=native, the cache key names the target
architecture, prebuilt kernels load from APPOPT_NATIVE_LIB, and the aarch64 builds really are aarch64 code."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import native

REPO = Path(__file__).resolve().parents[2]


def test_cross_flags_name_the_cpu_never_native() -> None:
    a64fx = native.cross_flags(cpu="a64fx")
    assert "-mcpu=a64fx" in a64fx and "-msve-vector-bits=512" in a64fx
    assert "-march=native" not in a64fx and "-march=native" not in native.cross_flags(cpu="neoverse-n1")
    assert native.cross_flags(march="armv8.2-a+sve")[-1] == "-march=armv8.2-a+sve"
    with pytest.raises(ValueError, match="exactly one"):
        native.cross_flags()


def test_target_arch_comes_from_the_compiler_name() -> None:
    assert native.target_arch("/usr/bin/aarch64-linux-gnu-gcc") == "aarch64"
    assert native.target_arch("cc") == os.uname().machine


def test_unknown_cross_target_is_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="no cross compiler known for 'sparc'"):
        native.cross_build("sparc", tmp_path / "k.so", cpu="v9")


def test_a_prebuilt_library_that_cannot_load_is_reported_not_raised(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-library.so"
    bad.write_text("nothing")
    code = "from runtime import native; print(native.lib() is None); print(native.status())"
    env = {**os.environ, "APPOPT_NATIVE_LIB": str(bad), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] == "True"
    assert out.splitlines()[1].startswith(f"APPOPT_NATIVE_LIB={bad}: OSError")


def _elf_machine(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[18:20], "little")


@pytest.mark.slow
@pytest.mark.parametrize(("cpu", "march"), [("neoverse-n1", ""), ("a64fx", ""), ("", "armv8.2-a+sve")])
def test_kernels_cross_build_for_aarch64(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cpu: str, march: str) -> None:
    if shutil.which(native.CROSS_COMPILERS["aarch64"]) is None:
        pytest.skip("extra not installed: gcc-aarch64-linux-gnu (scripts/ci-setup)")
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    out = native.cross_build("aarch64", tmp_path / "k.so", cpu=cpu, march=march)
    assert _elf_machine(out) == 183  # EM_AARCH64
    cached = list((tmp_path / "cache" / "native-cross").glob("*.so"))
    assert len(cached) == 1 and cached[0].name.startswith("appopt_kernels_aarch64_")
    if shutil.which("aarch64-linux-gnu-objdump"):
        text = subprocess.run(["aarch64-linux-gnu-objdump", "-d", str(out)], capture_output=True, text=True).stdout
        uses_sve = " z0." in text or "\tz0." in text or "ptrue" in text
        assert uses_sve == (cpu != "neoverse-n1"), "SVE code exactly in the SVE builds"
