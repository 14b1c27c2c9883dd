"""render_artifacts: which files, their modes, atomic writes, nothing written when rendering fails."""

from __future__ import annotations

import dataclasses
import os
import stat
from pathlib import Path

import pytest

from builders.errors import RenderError
from builders.render import render_artifacts
from tests.builders.cases import cpu_slurm, gpu_training, kubernetes_gpu


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_both_container_files_and_the_job(tmp_path: Path) -> None:
    paths = render_artifacts(gpu_training(), tmp_path / "out")
    assert [p.name for p in paths] == ["Dockerfile", "Singularity.def", "job.slurm"]
    assert _mode(paths[0]) == 0o644 and _mode(paths[2]) == 0o755
    assert paths[2].read_text().startswith("#!/bin/bash\n")
    assert sorted(os.listdir(tmp_path / "out")) == ["Dockerfile", "Singularity.def", "job.slurm"]  # no temp files


def test_formats_choose_the_container_files(tmp_path: Path) -> None:
    assert [p.name for p in render_artifacts(cpu_slurm(), tmp_path)] == ["Singularity.def", "job.slurm"]
    k8s = render_artifacts(kubernetes_gpu(), tmp_path / "k8s")
    assert [p.name for p in k8s] == ["Dockerfile", "job.k8s.yaml"] and _mode(k8s[1]) == 0o644


def test_rewriting_replaces_files_in_place(tmp_path: Path) -> None:
    render_artifacts(gpu_training(), tmp_path)
    render_artifacts(dataclasses.replace(gpu_training(), run_argv=("python3", "other.py")), tmp_path)
    assert '"other.py"' in (tmp_path / "Dockerfile").read_text()


def test_nothing_is_written_when_a_field_is_bad(tmp_path: Path) -> None:
    with pytest.raises(RenderError):
        render_artifacts(dataclasses.replace(gpu_training(), partition="gpu; rm -rf /"), tmp_path)
    assert list(tmp_path.iterdir()) == []
