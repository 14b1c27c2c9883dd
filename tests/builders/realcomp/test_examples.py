"""Each example planned, built on a local base image from a wheelhouse, and run: the image does the example's job.

- BERT (Kubernetes): the image runs BERT-base on PyTorch 2.13 (CPU build, from the wheelhouse) and reports samples/s.
- ResNet-50 (Slurm, A100): its base is NVIDIA's PyTorch image, which cannot be pulled here; the BERT image (Debian
  + the same PyTorch) stands in for it, and the image trains ResNet-50 on CPU for a few steps.
- digits MLP (run.sh): the script takes the container runtime installed here (podman) and runs the model.
- A64FX (PBS, arm64): built for arm64 and run under emulation in test_a64fx_example.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner, Result

from tests.builders.realcomp.conftest import REPO, appopt_app, wheelhouse_for

pytestmark = pytest.mark.slow

BERT_REF = "localhost/appopt-test/bert-serving:ci"


def _plan(example: str, out: Path) -> Path:
    from cli.main import app

    result = CliRunner().invoke(app, ["plan", str(REPO / "examples" / example), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _podman(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def bert_image(debian_image: str, cache_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The BERT example's image (torch from the wheelhouse: PIP_FIND_LINKS's torch-2.13.0+cpu, or the CPU index)."""
    out = _plan("bert-inference-k8s.yaml", tmp_path_factory.mktemp("bert") / "out")
    result = CliRunner().invoke(appopt_app(), ["build", str(out), "--engine", "buildah", "--base-image",
                                               debian_image, "--wheelhouse", str(wheelhouse_for(out, cache_dir)),
                                               "--tag", BERT_REF, "--quiet"])
    assert result.exit_code == 0, result.output[-3000:]
    return out


def test_the_bert_example_image_runs_bert_on_pytorch(bert_image: Path) -> None:
    built = json.loads((bert_image / "build.json").read_text())
    assert "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl" in built["wheels"]
    # the Kubernetes Job runs what the image's entrypoint runs; a short run here (the plan's bf16 kept)
    job = yaml.safe_load((bert_image / "job.k8s.yaml").read_text())
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    entrypoint = json.loads(_podman("image", "inspect", "--format", "{{json .Config.Entrypoint}}", BERT_REF).stdout)
    assert command == entrypoint and command[:4] == ["python3", "/opt/app/apps/infer.py", "--arch", "bert_base"]
    proc = _podman("run", "--rm", BERT_REF, "--samples", "0", "--batches", "1", "--batch-size", "2", "--seq-len", "16")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "infer: bert_base on PyTorch 2.13.0+cpu (cpu, 2 threads), bf16, batch 2" in proc.stdout, proc.stdout
    assert "infer: output (2, 2) bfloat16, finite: True" in proc.stdout
    assert re.search(r"infer: 1 batches in [\d.]+ s: [\d.]+ samples/s", proc.stdout)


def test_the_resnet50_training_example_trains(bert_image: Path, tmp_path: Path,
                                              appopt: Callable[..., Result]) -> None:
    out = _plan("resnet50-gpu-slurm.yaml", tmp_path / "out")
    assert "nvcr.io/nvidia/pytorch" in (out / "Dockerfile").read_text()
    ref = "localhost/appopt-test/resnet50-train:ci"
    result = appopt("build", out, "--engine", "buildah", "--base-image", BERT_REF, "--tag", ref, "--quiet")
    assert result.exit_code == 0, result.output[-3000:]
    job = tmp_path / "job"
    job.mkdir()
    # a few steps at 32x32 (memorising 4 synthetic images); fp32, as this CPU has no bf16 units (the plan's A100 has)
    small = ["--epochs", "4", "--batch-size", "4", "--synthetic-samples", "4", "--image-size", "32", "--precision",
             "fp32"]
    proc = _podman("run", "--rm", "-v", f"{job}:{job}", "-w", str(job), ref, *small)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "train: resnet50 on PyTorch 2.13.0+cpu (cpu), fp32 channels_last, global batch 4 over 1 rank(s), " \
           "data: synthetic" in proc.stdout, proc.stdout
    losses = [float(x) for x in re.findall(r"train: epoch \d+ mean loss ([\d.]+)", proc.stdout)]
    assert len(losses) == 4 and losses[-1] < losses[0], proc.stdout
    assert (job / "checkpoints" / "last.pt").stat().st_size > 0 and (job / "trained-resnet50.pt").is_file()
    # resubmitted after preemption: --resume (in the example's command) continues from the checkpoint
    again = _podman("run", "--rm", "-v", f"{job}:{job}", "-w", str(job), ref, *small, "--epochs", "5")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "train: resumed from checkpoints/last.pt after epoch 4" in again.stdout
    assert re.findall(r"train: epoch (\d+) mean loss", again.stdout) == ["5"]


def test_the_digits_example_runs_with_the_runtime_installed_here(debian_image: str, cache_dir: Path, tmp_path: Path,
                                                                 appopt: Callable[..., Result]) -> None:
    out = _plan("onnx-mlp-local.yaml", tmp_path / "out")
    result = appopt("build", out, "--engine", "buildah", "--base-image", debian_image, "--wheelhouse",
                    wheelhouse_for(out, cache_dir), "--quiet")
    assert result.exit_code == 0, result.output[-3000:]
    env = {key: value for key, value in os.environ.items() if key != "APPOPT_CONTAINER"}
    done = subprocess.run(["bash", str(out / "run.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "run.sh: container runtime: podman (the first found of: podman docker" in done.stderr
    assert re.search(r"output probabilities: float32\[1, 10\].*latency over 20 run\(s\)", done.stdout, re.DOTALL)


def test_without_a_container_run_sh_names_what_python_lacks(tmp_path: Path) -> None:
    """APPOPT_CONTAINER=none with the system's python3 (no onnx): one line saying what to install, no traceback."""
    out = _plan("onnx-mlp-local.yaml", tmp_path / "out")
    bare = shutil.which("python3", path="/usr/bin")
    assert bare, "Debian's python3 is part of the CI image"
    probe = subprocess.run([bare, "-c", "import onnx"], capture_output=True, check=False)
    if probe.returncode == 0:
        pytest.fail("/usr/bin/python3 has onnx: this test needs a Python without it")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "APPOPT_CONTAINER": "none"}
    done = subprocess.run(["bash", str(out / "run.sh")], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 3 and "Traceback" not in done.stderr
    # The engine is whichever this host ranks first; the line names that engine's modules and pinned packages.
    said = re.search(r"run\.sh: without a container this needs a Python that imports ([\w, ]+); none of .+ does: "
                     r"pip install (.+) into one and set APPOPT_PYTHON", done.stderr)
    assert said, done.stderr
    modules, pins = said[1].split(", "), said[2].split()
    assert {"numpy", "onnx"} <= set(modules) and all(re.fullmatch(r"[\w.-]+==[\w.+-]+", pin) for pin in pins)
    assert f"REQUIREMENTS=({said[2]})" in (out / "run.sh").read_text()


def test_offline_the_default_base_image_fails_with_a_pointer_to_base_image(containers: object, tmp_path: Path,
                                                                          appopt: Callable[..., Result]) -> None:
    """No registry is reachable here: buildah cannot pull python:3.11-slim, and the error says what to do."""
    out = _plan("onnx-mlp-local.yaml", tmp_path / "out")
    result = appopt("build", out, "--engine", "buildah", "--quiet")
    assert result.exit_code == 4, result.output[-3000:]
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: buildah build failed") and "python:3.11-slim" in lines[0]
    assert lines[-1].startswith("error: the base image (python:3.11-slim) could not be pulled (offline, or no "
                                "registry reachable): build on one this engine already has with --base-image IMAGE")
