"""The plan's own multi-stage image: the build stage compiles the model, the final image runs it.

Built on a Debian 12 minbase with python3 (standing in for ``python:3.11-slim``, which cannot be pulled here), with
the Python requirements installed only from a wheelhouse made by ``pip download`` on the host.
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
from typer.testing import Result

from builders.engines import DockerEngine, get_engine
from tests.builders.realcomp import servers
from tests.builders.realcomp.conftest import BuiltImage, plan_for, wheelhouse_for

pytestmark = pytest.mark.slow

#: What ``python -m runtime run`` prints for the digits MLP: its output tensor and a latency line.
RUN_OUTPUT = re.compile(r"output probabilities: float32\[1, 10\].*latency over 20 run\(s\)", re.DOTALL)


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300, check=False)


def test_image_runs_the_compiled_model(runtime_image: BuiltImage) -> None:
    proc = _podman("run", "--rm", runtime_image.ref)
    assert proc.returncode == 0, proc.stderr
    assert "model: /opt/app/compiled" in proc.stdout
    assert RUN_OUTPUT.search(proc.stdout), proc.stdout


def test_the_applications_own_code_ships_and_uses_the_runtime(runtime_image: BuiltImage) -> None:
    proc = _podman("run", "--rm", "--entrypoint", "python3", runtime_image.ref, "/opt/app/classify.py")
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(r"classify\.py: class \d of 10\n", proc.stdout), proc.stdout


ORT_SPEC = """\
# the digits MLP on the onnxruntime route (no graph compiler, whichever this host ranks first): the image runs it
# with the runtime's runner, --engine onnxruntime
name: digits-ort
application:
  type: inference
  model: {onnx: digits_mlp.onnx}
  framework: onnxruntime
target:
  cpu: {arch: x86_64, model: local}
  scheduler: none
container:
  formats: [docker]
optimisation:
  allow: {compilers: [none]}
"""


def test_an_onnxruntime_plan_image_runs_the_model_with_onnxruntime(debian_image: str, cache_dir: Path,
                                                                    tmp_path: Path,
                                                                    appopt: Callable[..., Result]) -> None:
    out = plan_for(ORT_SPEC, tmp_path)
    ref = "localhost/appopt-test/digits-ort:ci"
    result = appopt("build", out, "--engine", "buildah", "--base-image", debian_image, "--wheelhouse",
                    wheelhouse_for(out, cache_dir), "--tag", ref, "--quiet")
    assert result.exit_code == 0, result.output[-3000:]
    proc = _podman("run", "--rm", ref)
    assert proc.returncode == 0, proc.stderr
    assert "engine: onnxruntime (CPUExecutionProvider)" in proc.stdout
    assert RUN_OUTPUT.search(proc.stdout), proc.stdout


TRAIN_SPEC = """\
# training the digits MLP with appopt's runtime in its image; the data sits in the job's directory
name: digits-train
application:
  type: training
  model: {{onnx: digits_mlp.onnx}}
  batch_size: 16
  framework: appopt-runtime
  data: {{path: {data}, epochs: 2}}
target:
  cpu: {{arch: x86_64, model: local}}
  scheduler: none
container:
  formats: [docker]
"""


def test_a_training_plan_image_trains_in_the_job_directory(debian_image: str, cache_dir: Path, tmp_path: Path,
                                                           appopt: Callable[..., Result]) -> None:
    from tests.runtime.training.test_runtime_train_cli import _separable_npz

    job = tmp_path / "job"
    job.mkdir()
    data = _separable_npz(job / "data.npz")
    out = plan_for(TRAIN_SPEC.format(data=data), tmp_path)
    ref = "localhost/appopt-test/digits-train:ci"
    result = appopt("build", out, "--engine", "buildah", "--base-image", debian_image, "--wheelhouse",
                    wheelhouse_for(out, cache_dir), "--tag", ref, "--quiet")
    assert result.exit_code == 0, result.output[-3000:]
    env = {**os.environ, "APPOPT_CONTAINER": "podman", "APPOPT_IMAGE": ref}
    done = subprocess.run(["bash", str(out / "run.sh")], cwd=job, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "epoch 2/2" in done.stdout and "test accuracy" in done.stdout
    assert (job / "trained.onnx").stat().st_size > 0 and (job / "checkpoints").is_dir()


def test_build_stage_compiled_and_final_stage_is_slim(runtime_image: BuiltImage) -> None:
    listing = _podman("run", "--rm", "--entrypoint", "ls", runtime_image.ref, "/opt/app/compiled", "/tmp")
    assert listing.returncode == 0, listing.stderr
    assert "manifest.json" in listing.stdout  # written by `runtime compile` in the build stage
    assert "appopt-wheelhouse" not in listing.stdout  # the wheels stayed in the build stage
    built = json.loads((runtime_image.out / "build.json").read_text())
    assert built["wheels"] and any(w.startswith("numpy-") for w in built["wheels"])
    log = (runtime_image.out / built["log"]).read_text()
    assert "--no-index" in log and "compiled -> /opt/app/compiled" in log


def test_image_labels_describe_the_plan(runtime_image: BuiltImage) -> None:
    plan = json.loads((runtime_image.out / "plan.json").read_text())
    labels = json.loads(_podman("image", "inspect", "--format", "{{json .Labels}}", runtime_image.ref).stdout)
    assert labels["io.appopt.spec-sha256"] == plan["spec_sha256"]
    choice = plan["choice"]
    assert labels["io.appopt.route"].startswith(f"{choice['framework']}/{choice['compiler']}/")
    assert float(labels["io.appopt.predicted-step-seconds"]) == pytest.approx(plan["predicted"]["step_seconds"],
                                                                              rel=1e-4)
    assert labels["io.appopt.version"] == plan["appopt_version"]
    assert labels["org.opencontainers.image.revision"]
    assert labels["org.opencontainers.image.base.name"] == "localhost/appopt-test/debian-python:bookworm"


def test_docker_sdk_builds_and_runs_the_plan_image(plan_out: Path, debian_image: str, wheelhouse: Path,
                                                    podman_service: str, appopt: Callable[..., Result],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", podman_service)
    ref = "localhost/appopt-test/digits-mlp:docker"
    result = appopt("build", plan_out, "--engine", "auto", "--base-image", debian_image, "--wheelhouse", wheelhouse,
                    "--tag", ref, "--quiet")
    assert result.exit_code == 0, result.output[-3000:]
    assert f"with docker ({podman_service})" in result.output  # auto picked the Docker API and said so
    engine = get_engine("docker")
    assert isinstance(engine, DockerEngine)
    assert engine.labels(ref)["io.appopt.route"].startswith("appopt-runtime/")
    output = servers.run_container(engine.client, ref).decode()
    assert RUN_OUTPUT.search(output), output


def test_wheelhouse_is_downloaded_when_empty(plan_out: Path, debian_image: str, tmp_path: Path,
                                             appopt: Callable[..., Result]) -> None:
    """An empty --wheelhouse is filled by pip download for the image's Python, then used offline."""
    empty = tmp_path / "wheels"
    result = appopt("build", plan_out, "--engine", "buildah", "--base-image", debian_image, "--wheelhouse", empty,
                    "--tag", "localhost/appopt-test/digits-mlp:fresh-wheels")
    assert result.exit_code == 0, result.output[-3000:]
    assert "is empty: pip download" in result.output
    assert any(p.name.startswith("onnx-") and "cp311" in p.name for p in empty.glob("*.whl"))
    shutil.rmtree(empty)
