"""A benchmark campaign as a real Slurm job array on localhost: every task writes a shard, the shards merge.

Uses the platform's one-node Slurm fixture (tests/builders/realcomp). The tasks run appopt from this checkout
(``python -m cli.bench_cmds``) rather than inside an image: the image path is covered by the
rendered-script tests and the builders' own Slurm tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.campaign import load_campaign, shard_dir, submit_campaign, write_campaign
from perfmodels.results_db import merge, read_results
from tests.builders.realcomp.conftest import Slurm, session_env, slurm  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def _wait_for_array(job_id: str, timeout: float = 300.0) -> str:
    """Poll until no task of the array is pending or running; returns the last ``scontrol`` output."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        done = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
        text = done.stdout
        states = [part.split("=", 1)[1] for part in text.split() if part.startswith("JobState=")]
        if done.returncode != 0 or (states and all(s not in ("PENDING", "RUNNING", "CONFIGURING") for s in states)):
            return text
        time.sleep(1.0)
    raise AssertionError(f"job array {job_id} did not finish in {timeout} s:\n{text}")


def test_campaign_array_writes_one_shard_per_task_and_they_merge(
    slurm: Slurm,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec_path = tmp_path / "campaign.yaml"
    spec_path.write_text(
        "name: ci-sweep\n"
        "models: [mlp, zoo_squeezenet]\n"
        "backends: [onnxruntime]\n"
        "threads: [1]\n"
        "settings: {min_duration_s: 0.0, min_queries: 3}\n"
        "shard_dir: shards\n"
        f"appopt_command: {sys.executable} -m cli.bench_cmds\n"
        "slurm: {tasks: 2, time: '00:10:00', cpus_per_task: 1}\n"
    )
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.chdir(tmp_path)
    spec = load_campaign(spec_path)
    script = write_campaign(spec, spec_path, tmp_path / "out")
    job_id = submit_campaign(script)  # the Slurm module's client, which plans' jobs are submitted with
    state = _wait_for_array(job_id)
    shards = sorted(shard_dir(spec, spec_path).glob("shard-*.csv"))
    logs = "\n".join(p.read_text() for p in (shard_dir(spec, spec_path) / "logs").glob("*.out"))
    assert len(shards) == 2, f"{state}\n{logs}"
    written, dropped = merge(shards, tmp_path / "merged.csv")
    assert written == 2 and dropped == []
    frame = read_results(tmp_path / "merged.csv")
    assert sorted(frame["model"]) == ["mlp", "zoo_squeezenet"]
    assert set(frame["backend"]) == {"onnxruntime"}
