"""Campaign specs, slicing, and the rendered Slurm job array (checked with ``bash -n``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.campaign import CampaignError, load_campaign, render_slurm_array, slice_jobs, write_campaign

SPEC = """\
name: sweep
models: [mlp, bert, zoo_squeezenet]
backends: [onnxruntime, appopt-runtime]
threads: [1, 2]
settings: {min_duration_s: 0.0, min_queries: 3}
shard_dir: shards
slurm: {tasks: 5, partition: debug, time: "00:10:00", cpus_per_task: 2, image: "app opt.sif"}
"""


@pytest.fixture
def spec_path(tmp_path: Path) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(SPEC)
    return path


def test_slices_cover_every_job_exactly_once(spec_path):
    spec = load_campaign(spec_path)
    assert len(spec.jobs()) == 12 and spec.task_count() == 5
    labels = [job.label for i in range(5) for job in slice_jobs(spec, i)]
    assert sorted(labels) == sorted(job.label for job in spec.jobs())
    with pytest.raises(CampaignError, match=r"outside 0\.\.4"):
        slice_jobs(spec, 5)


def test_rendered_array_is_valid_bash_with_one_task_per_slice(spec_path, tmp_path):
    spec = load_campaign(spec_path)
    script = write_campaign(spec, spec_path, tmp_path / "out")
    text = script.read_text()
    assert "#SBATCH --array=0-4" in text
    assert "#SBATCH --partition=debug" in text
    assert "singularity exec 'app opt.sif' appopt bench run-slice" in text  # spec strings are quoted
    assert '--slice "${SLURM_ARRAY_TASK_ID}"' in text
    assert "shard-${SLURM_ARRAY_JOB_ID}-${SLURM_ARRAY_TASK_ID}.csv" in text
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert (tmp_path / "shards" / "logs").is_dir()


def test_tasks_never_exceed_jobs(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: one\nmodels: [mlp]\nbackends: [onnxruntime]\nslurm: {tasks: 50}\n")
    spec = load_campaign(path)
    assert spec.task_count() == 1
    assert "#SBATCH --array=0-0" in render_slurm_array(spec, path)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("name: x\nbackends: [tensorflow-lite]\n", "backends: .*unknown backend"),
        ("name: x\nmodels: [resnet51]\n", "models: unknown suite or model"),
        ("name: x\nscenarios: [Marathon]\n", "scenarios: .*unknown scenario"),
        ("name: x\nsettings: {warmup: 3}\n", "settings: .*unknown setting"),
        ("name: x\nslurm: {nodes: 3}\n", "slurm.nodes: Extra inputs"),
        ("name: 'bad name; rm -rf /'\n", "name: String should match"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_spec_errors_name_the_field(tmp_path, body, message):
    path = tmp_path / "c.yaml"
    path.write_text(body)
    with pytest.raises(CampaignError, match=message):
        load_campaign(path)
