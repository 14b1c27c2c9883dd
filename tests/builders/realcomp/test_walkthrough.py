"""The README's walkthrough, run as it stands: plan -> build (local base image, wheelhouse) -> run -> push -> submit.

The block after ``<!-- walkthrough -->`` in README.md runs with bash from a fresh directory (``examples`` linked
in), with ``appopt`` on PATH, the fixtures' base image as ``BASE``, their registry as ``REGISTRY``, and their
podman, registry and Slurm configuration in the environment (as a user's own configuration would be).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.builders.realcomp.conftest import REPO, Containers, Registry, Slurm

pytestmark = pytest.mark.slow

RUN_OUTPUT = re.compile(r"output probabilities: float32\[1, 10\].*?latency over 20 run\(s\)", re.DOTALL)


def walkthrough_block(readme: Path = REPO / "README.md") -> str:
    """The shell block that follows the ``<!-- walkthrough -->`` marker."""
    match = re.search(r"<!-- walkthrough -->\n```sh\n(.*?)\n```", readme.read_text(encoding="utf-8"), re.DOTALL)
    assert match, "README.md has no <!-- walkthrough --> block"
    return match.group(1)


def test_the_walkthrough_block_is_the_five_steps() -> None:
    commands = [line.split()[0] for line in walkthrough_block().splitlines() if line and not line.startswith("#")]
    assert commands == ["BASE=${BASE:-localhost/base/debian-python:bookworm}", "REGISTRY=${REGISTRY:-127.0.0.1:5000}",
                        "appopt", "appopt", "(cd", "appopt", "JOB=$(appopt", "appopt", "cat"]


def test_readme_walkthrough_runs_end_to_end(containers: Containers, debian_image: str, registry: Registry,
                                            slurm: Slurm, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "appopt"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m cli "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "fresh"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "BASE": debian_image, "REGISTRY": registry.address}
    env.pop("APPOPT_CONTAINER", None)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", walkthrough_block()], cwd=work, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    out = work / "out" / "digits"
    assert "job: container runtime: podman" in done.stderr  # step 3 took the runtime that is installed
    assert len(RUN_OUTPUT.findall(done.stdout)) == 2, done.stdout  # step 3 here, step 5 on the Slurm node
    built = json.loads((out / "build.json").read_text())
    assert built["base_image"] == debian_image and any(w.startswith("onnxruntime-") for w in built["wheels"])
    pushed = json.loads((out / "push.json").read_text())
    assert pushed["image"] == built["image"]
    with urllib.request.urlopen(f"http://{registry.address}/v2/digits-mlp/tags/list", timeout=10) as answer:
        assert json.load(answer)["tags"] == ["latest"]
    job_outputs = list(out.glob("digits-mlp-*.out"))
    assert len(job_outputs) == 1 and RUN_OUTPUT.search(job_outputs[0].read_text())
    assert "container runtime: podman" in job_outputs[0].read_text()
