"""arm64 under emulation: a root prepared on this x86 host (Debian arm64 packages extracted, aarch64 wheels, the
runtime's kernels cross-built) runs our runtime with ``qemu-aarch64-static``, and its results match the host's.

Only correctness is checked here; times under emulation mean nothing about an ARM machine and are not recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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


ARM_SPEC = """\
# the digits MLP on our runtime for Graviton3-class arm64 machines, built on this x86 host
name: digits-arm64
application:
  type: inference
  model: {onnx: digits_mlp.onnx}
  batch_size: 1
  framework: appopt-runtime
target:
  platform: cloud
  cpu: {arch: aarch64, model: graviton3}
  scheduler: none
container:
  formats: [docker]
"""
ARM_TAG = "localhost/appopt-test/digits-arm64:ci"


@pytest.fixture(scope="session")
def arm64_image(containers: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``appopt build OUT --platform linux/arm64`` of the digits plan, on this host without binfmt."""
    from tests.builders.realcomp.conftest import appopt_app, plan_for

    _require_tools()
    out = plan_for(ARM_SPEC, tmp_path_factory.mktemp("arm64-plan"))
    from typer.testing import CliRunner

    result = CliRunner().invoke(appopt_app(), ["build", str(out), "--engine", "buildah", "--platform", "linux/arm64",
                                               "--tag", ARM_TAG])  # fmt: skip
    assert result.exit_code == 0, result.output[-3000:]
    return out


def _buildah(*args: str) -> str:
    proc = subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_arm64_image_is_assembled_without_run_and_carries_the_plans_labels(arm64_image: Path) -> None:
    from builders.image_build import load_deployment

    dockerfile = (arm64_image / "build" / "arm64" / "Dockerfile").read_text()
    assert not any(line.startswith("RUN") for line in dockerfile.splitlines())
    info = json.loads(_buildah("inspect", "--type", "image", ARM_TAG))
    config = info["OCIv1"]
    assert (config["os"], config["architecture"], config.get("variant")) == ("linux", "arm64", "v8")
    dep = load_deployment(arm64_image)
    assert dep is not None
    labels = config["config"]["Labels"]
    assert {k: labels.get(k) for k, _ in dep.labels} == dict(dep.labels)
    assert config["config"]["Entrypoint"] == list(dep.run_argv)
    record = json.loads((arm64_image / "build.json").read_text())
    assert record["platform"] == "linux/arm64/v8" and record["image"] == ARM_TAG


@pytest.mark.slow
def test_arm64_image_runs_its_model_under_emulation_like_x86(arm64_image: Path, tmp_path: Path) -> None:
    """The image's own file system, entry point and environment, run with qemu; outputs equal the host's."""
    info = json.loads(_buildah("inspect", "--type", "image", ARM_TAG))["OCIv1"]["config"]
    env = dict(item.split("=", 1) for item in info["Env"])
    container = _buildah("from", "--pull-never", ARM_TAG).strip()
    try:
        mnt = Path(_buildah("mount", container).strip())
        root = ForeignRoot(mnt, "arm64", "3.11")
        entry = info["Entrypoint"]
        assert entry[0] == "python3"
        run = run_python(
            root, entry[1:], cpu="max", env=env
        )  # qemu 7.2 has no neoverse-v1 model; its latency line is emulated: not recorded
        assert run.returncode == 0, run.stderr[-2000:]
        assert "output probabilities: float32[1, 10]" in run.stdout
        feeds = {"input": np.random.default_rng(3).standard_normal((1, 64)).astype(np.float32)}
        np.savez(tmp_path / "in.npz", **feeds)  # type: ignore[arg-type]
        guest_env = {**env, "PYTHONPATH": f"{env['PYTHONPATH']}:{REPO}"}  # the image's runtime, our runner
        proc = run_python(root, ["-m", "benchmarks.emulated", "outputs", "/opt/app/compiled", str(tmp_path / "in.npz"),
                                 str(tmp_path / "out.npz")], cpu="max", env=guest_env)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "kernels: loaded appopt_kernels_arm64-neoverse-v1.so (prebuilt)" in proc.stdout
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)
    host = compile_model(str(arm64_image / "build" / "arm64" / "compiled")).run(feeds)
    with np.load(tmp_path / "out.npz") as guest:
        np.testing.assert_allclose(guest["probabilities"], host["probabilities"], rtol=1e-5, atol=1e-6)
