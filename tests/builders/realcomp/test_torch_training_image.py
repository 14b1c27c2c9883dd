"""A PyTorch training plan's own image, built and run: with no command in the spec, it trains the spec's ONNX model
in PyTorch (``python -m runtime train --engine torch``; ``torch-inductor`` on the torch.compile route, whose image
installs the C++ compiler inductor builds with) on the data shipped with the plan, in the job's directory.

Built with buildah on the Debian 12 minbase (standing in for ``python:3.11-slim``) from a wheelhouse whose torch is
the CPU wheel in pip's find-links (CI's /opt/wheels): PyPI's torch for this platform is the CUDA build, gigabytes of
GPU libraries, so without the CPU wheel the test is skipped rather than downloading them.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.builders.realcomp.conftest import plan_for, wheelhouse_for

pytestmark = pytest.mark.slow

SPEC = """\
# the digits MLP trained in PyTorch; no command: the image trains it on the shipped data
name: digits-torch-train
application:
  type: training
  model: {onnx: digits_mlp.onnx}
  batch_size: 16
  precision: fp32
  framework: pytorch
  data: {path: data.npz, epochs: 3}
target:
  cpu: {arch: x86_64, model: local}
  scheduler: none
container:
  formats: [docker]
"""


def _torch_cpu_wheel() -> Path | None:
    for directory in os.environ.get("PIP_FIND_LINKS", "").split():
        wheels = sorted(Path(directory).glob("torch-*+cpu-cp311-cp311-*x86_64.whl"))
        if wheels:
            return wheels[-1]
    return None


def _build(spec: str, base: str, ref: str, cache_dir: Path, tmp_path: Path, appopt: Callable[..., Result]) -> Path:
    """The plan's image built on ``base``; returns the plan's directory."""
    from tests.runtime.training.test_runtime_train_cli import _separable_npz

    if _torch_cpu_wheel() is None:
        pytest.skip("torch CPU wheel: extra not installed (no torch-*+cpu-cp311 wheel in PIP_FIND_LINKS)")
    _separable_npz(tmp_path / "data.npz")
    out = plan_for(spec, tmp_path)
    result = appopt("build", out, "--engine", "buildah", "--base-image", base, "--wheelhouse",
                    wheelhouse_for(out, cache_dir), "--tag", ref, "--quiet")
    assert result.exit_code == 0, result.output[-3000:]
    return out


def _run_job(out: Path, ref: str, job: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """The plan's ``run.sh`` in the job directory ``job`` (made if missing), its image ``ref`` run by podman."""
    job.mkdir(exist_ok=True)
    env = {**os.environ, "APPOPT_CONTAINER": "podman", "APPOPT_IMAGE": ref}
    return subprocess.run(["bash", str(out / "run.sh")], cwd=job, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def _losses(stdout: str, epochs: int) -> list[float]:
    """The epoch lines' losses of a training job's output."""
    return [float(x) for x in re.findall(rf"^epoch \d/{epochs}  loss ([\d.]+)", stdout, re.MULTILINE)]


def test_a_pytorch_training_image_trains_the_model_on_the_specs_data(debian_image: str, cache_dir: Path,
                                                                     tmp_path: Path,
                                                                     appopt: Callable[..., Result]) -> None:
    ref = "localhost/appopt-test/digits-torch-train:ci"
    out = _build(SPEC, debian_image, ref, cache_dir, tmp_path, appopt)
    job = tmp_path / "job"
    done = _run_job(out, ref, job)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = _losses(done.stdout, 3)
    assert len(losses) == 3 and losses[-1] < losses[0], done.stdout
    accuracy = float(done.stdout.rsplit("test accuracy ", 1)[1].split("%")[0])
    assert accuracy > 90.0, done.stdout
    assert (job / "trained.onnx").stat().st_size > 0
    assert (job / "checkpoints" / "torch-checkpoint.pt").is_file()
    # the job run again (a preempted job resubmitted) resumes from its checkpoint instead of starting over
    again = _run_job(out, ref, job)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.splitlines()[0] == "resumed from checkpoints at epoch 3", again.stdout


def test_the_torch_compile_routes_image_trains_compiled(debian_image: str, cache_dir: Path, tmp_path: Path,
                                                        appopt: Callable[..., Result]) -> None:
    """The torch.compile route (the plan denied eager PyTorch): the image installs g++ and trains with
    ``--engine torch-inductor``; inductor generates and builds C++ in the container at the first step. The base
    stands in for ``python:3.11-slim``, which ships Python's headers (inductor's C++ includes them), so the Debian
    stand-in gets its python3-dev first."""
    if _torch_cpu_wheel() is None:
        pytest.skip("torch CPU wheel: extra not installed (no torch-*+cpu-cp311 wheel in PIP_FIND_LINKS)")
    base = "localhost/appopt-test/debian-python-dev:bookworm"
    context = tmp_path / "base"
    context.mkdir()
    (context / "Containerfile").write_text(
        f"FROM {debian_image}\nRUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y "
        "--no-install-recommends python3-dev && rm -rf /var/lib/apt/lists/*\n"
    )
    made = subprocess.run(["buildah", "bud", "--quiet", "-t", base, str(context)], capture_output=True, text=True,
                          timeout=900, check=False)
    assert made.returncode == 0, made.stderr[-3000:]
    spec = SPEC.replace("epochs: 3}", "epochs: 2}") + "optimisation: {deny: {compilers: [none]}}\n"
    ref = "localhost/appopt-test/digits-torch-compile-train:ci"
    out = _build(spec, base, ref, cache_dir, tmp_path, appopt)
    assert '"--engine", "torch-inductor"]' in (out / "Dockerfile").read_text()
    job = tmp_path / "job"
    done = _run_job(out, ref, job, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = _losses(done.stdout, 2)
    assert len(losses) == 2 and losses[-1] < losses[0], done.stdout
    assert "recompile_limit" not in done.stderr  # one graph, compiled (not fallen back to eager)
    assert '"engine": "torch-inductor ' in (job / "trained.onnx").read_bytes().decode("latin-1")


def test_the_nhwc_routes_image_trains_a_convolutional_model_channels_last(debian_image: str, cache_dir: Path,
                                                                         tmp_path: Path,
                                                                         appopt: Callable[..., Result]) -> None:
    """PyTorch's NHWC route (the plan allowed no other layout) for a model with convolutions: the image trains it
    with ``--layout NHWC`` (channels-last), and the trained model comes out."""
    import numpy as np
    import onnx

    from runtime.training.models import digits_cnn

    onnx.save(digits_cnn(0), tmp_path / "cnn.onnx")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 1, 8, 8)).astype(np.float32)
    np.savez(tmp_path / "cnn_data.npz", x=x, y=(x[:, 0, :4].sum(axis=(1, 2)) > 0).astype(np.int64))
    spec = (SPEC.replace("digits_mlp.onnx", "cnn.onnx").replace("data.npz", "cnn_data.npz")
            .replace("name: digits-torch-train", "name: cnn-torch-nhwc-train")
            + "optimisation: {allow: {layouts: [NHWC]}, deny: {compilers: [inductor]}}\n")  # fmt: skip
    ref = "localhost/appopt-test/cnn-torch-nhwc-train:ci"
    out = _build(spec, debian_image, ref, cache_dir, tmp_path, appopt)
    assert '"--engine", "torch", "--layout", "NHWC"]' in (out / "Dockerfile").read_text()
    job = tmp_path / "job"
    done = _run_job(out, ref, job)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = _losses(done.stdout, 3)
    assert len(losses) == 3 and losses[-1] < losses[0], done.stdout
    assert (job / "trained.onnx").stat().st_size > 0
