"""Job arrays rendered by the Slurm module (``appopt bench campaign`` uses them): golden text, and no spec string
can start a line of its own (an ``#SBATCH`` directive or a command)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from builders.errors import RenderError
from builders.slurm import ArrayJob, render_array_job


def test_array_job_golden_text() -> None:
    job = ArrayJob(
        name="appopt-bench-sweep",
        tasks=3,
        command='appopt bench run-slice /c.yaml --slice "${SLURM_ARRAY_TASK_ID}"',
        setup=("mkdir -p /shards",),
        comments=("sweep: 6 jobs in 3 slices.",),
        cpus_per_task=2,
        time="00:30:00",
        output="/shards/logs/%x-%A_%a.out",
        partition="debug",
        mem="4G",
        extra=("--exclusive",),
        image="app opt.sif",
    )
    assert render_array_job(job) == (
        "#!/bin/bash\n"
        "#SBATCH --job-name=appopt-bench-sweep\n"
        "#SBATCH --array=0-2\n"
        "#SBATCH --ntasks=1\n"
        "#SBATCH --cpus-per-task=2\n"
        "#SBATCH --time=00:30:00\n"
        "#SBATCH --output=/shards/logs/%x-%A_%a.out\n"
        "#SBATCH --partition=debug\n"
        "#SBATCH --mem=4G\n"
        "#SBATCH --exclusive\n"
        "\n"
        "# sweep: 6 jobs in 3 slices.\n"
        "set -euo pipefail\n"
        "mkdir -p /shards\n"
        "srun --ntasks=1 singularity exec 'app opt.sif' appopt bench run-slice /c.yaml "
        '--slice "${SLURM_ARRAY_TASK_ID}"\n'
    )


def test_a_line_break_in_a_directive_value_is_refused_naming_it() -> None:
    job = ArrayJob(name="x", tasks=1, command="true", partition="debug\n#SBATCH --uid=0", extra=("--a", "b\nc"))
    with pytest.raises(RenderError) as error:
        render_array_job(job)
    assert error.value.lines == ("slurm.partition: must be one line", "slurm.extra[1]: must be one line")


def test_comments_stay_comments(tmp_path: Path) -> None:
    text = render_array_job(ArrayJob(name="x", tasks=1, command="true", comments=("campaign\ntouch /tmp/pwned",)))
    assert "# campaign touch /tmp/pwned\n" in text
    assert not any(line.startswith("touch") for line in text.splitlines())
    script = tmp_path / "job.sh"
    script.write_text(text)
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
