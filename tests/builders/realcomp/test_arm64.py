"""arm64 under emulation: a root prepared on this x86 host (Debian arm64 packages extracted, aarch64 wheels, the
runtime's kernels cross-built) runs our runtime with ``qemu-aarch64-static``, and its results match the host's.

Only correctness is checked here; times under emulation mean nothing about an ARM machine and are not recorded.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from benchmarks.emulated import export_cases
from builders.foreign_root import ForeignRoot, prepare_root, run_python
from runtime import compile_model, native
from tests.runtime.test_conformance import LIGHT_MODEL_OPS

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "digits_mlp.onnx"
TOOLS = ("mmdebstrap", "qemu-aarch64-static", "aarch64-linux-gnu-gcc")


def _require_tools() -> None:
    if os.geteuid() != 0:
        pytest.skip("real-component tests run as root (as CI does)")
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"extra not installed: {', '.join(missing)} (scripts/ci-setup)")


@pytest.fixture(scope="session")
def arm_root(cache_dir: Path) -> ForeignRoot:
    _require_tools()
    return prepare_root(cache_dir / "foreign")


@pytest.fixture(scope="session")
def kernels(cache_dir: Path) -> Callable[[str], Path]:
    """The kernels cross-built for a CPU (cached by ``runtime.native`` across runs)."""

    def build(cpu: str) -> Path:
        return native.cross_build("aarch64", cache_dir / "foreign" / f"kernels-{cpu}.so", cpu=cpu)

    return build


def _guest_env(kernels: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(REPO), "APPOPT_NATIVE_LIB": str(kernels)}


@pytest.mark.slow
def test_the_example_model_under_a64fx_matches_the_x86_run(
    arm_root: ForeignRoot, kernels: Callable[[str], Path], tmp_path: Path
) -> None:
    feeds = {"input": np.random.default_rng(7).standard_normal((1, 64)).astype(np.float32)}
    np.savez(tmp_path / "in.npz", **feeds)  # type: ignore[arg-type]
    exe = compile_model(str(EXAMPLE))
    host = exe.run(feeds)
    lib = kernels("a64fx")
    proc = run_python(
        arm_root,
        ["-m", "benchmarks.emulated", "outputs", str(EXAMPLE), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
        cpu="a64fx",
        env=_guest_env(lib),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"kernels: loaded {lib.name} (prebuilt)" in proc.stdout
    with np.load(tmp_path / "out.npz") as guest:
        assert sorted(guest.files) == sorted(exe.output_names)
        for name in exe.output_names:
            assert guest[name].dtype == np.float32
            np.testing.assert_allclose(guest[name], host[name], rtol=1e-5, atol=1e-6)
    # The runtime's own command line runs there too (its latency line is emulated time: not recorded).
    cli = run_python(arm_root, ["-m", "runtime", "run", str(EXAMPLE), "--random"], cpu="a64fx", env=_guest_env(lib))
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert "output probabilities: float32[1, 10]" in cli.stdout


@pytest.fixture(scope="session")
def exported_cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The node-suite cases of every op the light zoo and the suite models use, written once on the host."""
    from benchmarks.models import suite

    ops = set(LIGHT_MODEL_OPS)
    for model in suite("tiny") + suite("core"):
        ops |= {node.op_type for node in model.model().graph.node}
    dest = tmp_path_factory.mktemp("cases")
    assert len(export_cases(sorted(ops), dest)) > 150
    return dest


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["a64fx", "neoverse-n1"])  # the SVE build and the NEON build
def test_conformance_subset_passes_under_emulation(
    arm_root: ForeignRoot, kernels: Callable[[str], Path], exported_cases: Path, cpu: str
) -> None:
    lib = kernels(cpu)
    proc = run_python(arm_root, ["-m", "benchmarks.emulated", "conformance", str(exported_cases)], cpu=cpu,
                      env=_guest_env(lib))  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[0] == f"kernels: loaded {lib.name} (prebuilt)", proc.stderr[-2000:]
    total = len([p for p in exported_cases.iterdir() if p.is_dir()])
    assert lines[-1] == f"{total} passed, 0 failed", "\n".join(lines[-20:])
    assert proc.returncode == 0
