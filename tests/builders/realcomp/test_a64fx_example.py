"""The A64FX example end to end on this x86 host: planned, built for arm64 without RUN (PyTorch's aarch64 CPU wheel
unpacked into a Debian arm64 root), and its image's entry point run under ``qemu-aarch64-static -cpu a64fx``.

The run is cut down (one image of 32x32 pixels, one thread) so it stays within a couple of minutes under
emulation. Its timing line is emulated time: it means nothing about an A64FX and is not recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from builders.foreign_root import ForeignRoot, run_python
from tests.builders.realcomp.conftest import REPO, Containers, appopt_app
from tests.builders.realcomp.test_arm64 import _buildah, _require_tools

pytestmark = pytest.mark.slow

A64FX_TAG = "localhost/appopt-test/a64fx-resnet18:ci"
#: Appended to the image's entry point (argparse keeps the last value): 1 sample of 32x32, seeded weights.
SMALL = ["--samples", "0", "--batches", "1", "--batch-size", "1", "--image-size", "32", "--threads", "1",
         "--seed", "3"]  # fmt: skip


@pytest.fixture(scope="session")
def a64fx_image(containers: Containers, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``appopt plan examples/a64fx-pbs.yaml`` then ``appopt build OUT --platform linux/arm64`` (the real CLI)."""
    from cli.main import app

    _require_tools()
    out = tmp_path_factory.mktemp("a64fx") / "out"
    planned = CliRunner().invoke(app, ["plan", str(REPO / "examples" / "a64fx-pbs.yaml"), "-o", str(out)])
    assert planned.exit_code == 0, planned.output
    assert not (out / "Dockerfile").exists()  # a Singularity-only plan: the assembly renders its final stage
    built = CliRunner().invoke(appopt_app(), ["build", str(out), "--engine", "buildah", "--platform", "linux/arm64",
                                              "--tag", A64FX_TAG])  # fmt: skip
    assert built.exit_code == 0, built.output[-3000:]
    return out


def test_the_a64fx_image_is_arm64_with_the_plans_labels_and_pytorch(a64fx_image: Path) -> None:
    from builders.image_build import load_deployment

    dep = load_deployment(a64fx_image)
    assert dep is not None and dep.pip_packages == ("torch==2.10.0",)
    dockerfile = (a64fx_image / "build" / "arm64" / "Dockerfile").read_text()
    assert not any(line.startswith("RUN") for line in dockerfile.splitlines())
    assert "COPY code/apps /opt/app/apps" in dockerfile
    config = json.loads(_buildah("inspect", "--type", "image", A64FX_TAG))["OCIv1"]
    assert (config["os"], config["architecture"], config.get("variant")) == ("linux", "arm64", "v8")
    labels = config["config"]["Labels"]
    assert {k: labels.get(k) for k, _ in dep.labels} == dict(dep.labels)
    assert config["config"]["Entrypoint"] == list(dep.run_argv)
    site = a64fx_image / "build" / "arm64" / "rootfs" / "usr" / "local" / "lib" / "python3.11" / "dist-packages"
    assert (site / "torch" / "_C.cpython-311-aarch64-linux-gnu.so").is_file()
    assert not any(site.glob("nvidia*"))  # the CPU build: no CUDA libraries came with it
    record = json.loads((a64fx_image / "build.json").read_text())
    assert record["platform"] == "linux/arm64/v8"
    assert any(name.startswith("torch-2.10.0-cp311-cp311-manylinux_2_28_aarch64") for name in record["wheels"])


def _run_under_a64fx(output: Path) -> subprocess.CompletedProcess[str]:
    """The image's entry point with :data:`SMALL`, its file system and environment, on an emulated A64FX."""
    config = json.loads(_buildah("inspect", "--type", "image", A64FX_TAG))["OCIv1"]["config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    container = _buildah("from", "--pull-never", A64FX_TAG).strip()
    try:
        root = ForeignRoot(Path(_buildah("mount", container).strip()), "arm64", "3.11")
        entry = config["Entrypoint"]
        assert entry[:2] == ["python3", "/opt/app/apps/infer.py"]
        return run_python(root, [*entry[1:], *SMALL, "--save-output", str(output)], cpu="a64fx",
                          env={**env, "OMP_NUM_THREADS": "1"}, timeout=300)  # fmt: skip
    finally:
        subprocess.run(["buildah", "rm", container], capture_output=True, check=False)


def test_the_a64fx_image_runs_resnet18_under_emulation_like_x86(a64fx_image: Path, tmp_path: Path) -> None:
    guest = _run_under_a64fx(tmp_path / "arm64.json")
    assert guest.returncode == 0, guest.stderr[-3000:]
    assert "infer: resnet18 on PyTorch 2.10.0+cpu (cpu, 1 threads), fp32 channels_last, batch 1" in guest.stdout
    assert "infer: output (1, 1000) float32, finite: True" in guest.stdout, guest.stdout
    arm = json.loads((tmp_path / "arm64.json").read_text())
    assert arm["shape"] == [1, 1000]
    # The same script, seed and input on this x86 host (its PyTorch, not the image's).
    if not _host_has_torch():
        pytest.skip("extra not installed: torch on the host, for the x86 side of the comparison")
    env = {**os.environ, "APPOPT_LAYOUT": "NHWC", "APPOPT_PRECISION": "fp32", "OMP_NUM_THREADS": "1"}
    host = subprocess.run([sys.executable, str(REPO / "examples" / "apps" / "infer.py"), "--arch", "resnet18",
                           *SMALL, "--save-output", str(tmp_path / "x86.json")], capture_output=True, text=True,
                          env=env, timeout=300, check=False)  # fmt: skip
    assert host.returncode == 0, host.stderr[-3000:]
    x86 = np.asarray(json.loads((tmp_path / "x86.json").read_text())["values"], dtype=np.float32)
    values = np.asarray(arm["values"], dtype=np.float32)
    # float32 through ~20 layers summed in other orders (Arm Compute Library/OpenBLAS vs oneDNN): seen here, the
    # largest difference was 4.5e-8 on outputs up to 0.095 (PyTorch 2.10.0 emulated vs 2.13.0 on x86)
    np.testing.assert_allclose(values, x86, rtol=1e-4, atol=1e-5 * float(np.abs(x86).max()))
    assert values.argmax() == x86.argmax()


def _host_has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True
