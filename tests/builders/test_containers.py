"""Dockerfile and Singularity.def: golden text per case, read back by BuildKit/Apptainer rules and spython."""

from __future__ import annotations

import dataclasses
import json
import shlex
import subprocess
from pathlib import Path

import pytest

from builders.containers import render_dockerfile, render_singularity
from builders.errors import RenderError
from tests.builders.cases import COMPILE, CONTAINER_CASES, RUN, gpu_training, local_plain, pbs_arm
from tests.builders.golden import assert_golden
from tests.builders.parsers import (
    DOCKER_INSTRUCTIONS,
    docker_pairs,
    docker_unquote,
    dockerfile_instructions,
    section_body,
    singularity_stages,
    spython_recipe,
)


@pytest.mark.parametrize("case", sorted(CONTAINER_CASES))
def test_dockerfile_matches_golden(case: str) -> None:
    assert_golden(f"{case}.Dockerfile", render_dockerfile(CONTAINER_CASES[case]()))


@pytest.mark.parametrize("case", sorted(CONTAINER_CASES))
def test_singularity_matches_golden(case: str) -> None:
    assert_golden(f"{case}.Singularity.def", render_singularity(CONTAINER_CASES[case]()))


def test_dockerfile_is_multi_stage_and_the_final_stage_is_slim() -> None:
    instructions = dockerfile_instructions(render_dockerfile(gpu_training()))
    assert {keyword for keyword, _ in instructions} <= DOCKER_INSTRUCTIONS
    froms = [rest for keyword, rest in instructions if keyword == "FROM"]
    assert froms == ["nvcr.io/nvidia/pytorch:24.01-py3 AS build", "nvcr.io/nvidia/pytorch:24.01-py3 AS final"]
    final = instructions[[i for i, (k, _) in enumerate(instructions) if k == "FROM"][1] :]
    final_runs = [rest for keyword, rest in final if keyword == "RUN"]
    assert all("pip" not in run and "runtime compile" not in run for run in final_runs), final_runs
    assert ("COPY", "--from=build /opt/app /opt/app") in final
    assert ("COPY", "--from=build /opt/appopt/venv /opt/appopt/venv") in final
    entrypoint = [rest for keyword, rest in final if keyword == "ENTRYPOINT"]
    assert [json.loads(rest) for rest in entrypoint] == [list(RUN)]


def test_dockerfile_build_stage_compiles_the_copied_model() -> None:
    instructions = dockerfile_instructions(render_dockerfile(gpu_training()))
    build = instructions[: [k for k, _ in instructions].index("FROM", 1)]
    assert ("COPY", "model.onnx /opt/app/model.onnx") in build
    assert ("COPY", "runtime /opt/app/runtime") in build
    assert ("WORKDIR", "/opt/app") in build
    runs = [shlex.split(rest) for keyword, rest in build if keyword == "RUN"]
    assert list(COMPILE) in runs
    apt = next(run for run in runs if "apt-get" in run)
    assert "--no-install-recommends" in apt and apt[-3:] == ["rm", "-rf", "/var/lib/apt/lists/*"]


def test_dockerfile_labels_and_env_read_back_exactly() -> None:
    dep = gpu_training()
    instructions = dockerfile_instructions(render_dockerfile(dep))
    labels = {
        k: docker_unquote(v) for keyword, rest in instructions if keyword == "LABEL" for k, v in docker_pairs(rest)
    }
    assert labels["org.opencontainers.image.title"] == "resnet50-train"
    assert labels["org.opencontainers.image.base.name"] == dep.base_image
    assert all(labels[key] == value for key, value in dep.labels)
    env = {
        k: v
        for keyword, rest in instructions[-6:]
        if keyword == "ENV" and "PATH" not in rest
        for k, v in docker_pairs(rest)
    }
    assert {k: docker_unquote(v) for k, v in env.items()} == dict(dep.env)


def test_wheelhouse_installs_offline_and_final_stage_uses_the_runtime_image() -> None:
    text = render_dockerfile(pbs_arm())
    instructions = dockerfile_instructions(text)
    assert ("COPY", "wheelhouse /opt/appopt/wheelhouse") in instructions
    pip = next(shlex.split(rest) for keyword, rest in instructions if keyword == "RUN" and "-m pip" in rest)
    assert pip[pip.index("install") :][:6] == [
        "install",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--no-index",
        "--find-links",
        "/opt/appopt/wheelhouse",
    ]
    assert [rest for keyword, rest in instructions if keyword == "FROM"][-1] == "python:3.11-slim AS final"
    singularity = singularity_stages(render_singularity(pbs_arm()))
    assert singularity[-1]["header"][1] == "From: python:3.11-slim"
    assert "wheelhouse /opt/appopt/wheelhouse" in section_body(singularity[0], "%files")


def test_nothing_to_build_gives_one_stage() -> None:
    assert [k for k, _ in dockerfile_instructions(render_dockerfile(local_plain()))] == ["FROM", "LABEL", "ENTRYPOINT"]
    assert len(singularity_stages(render_singularity(local_plain()))) == 1


@pytest.mark.parametrize("case", sorted(CONTAINER_CASES))
def test_singularity_parses_with_spython(case: str, tmp_path: Path) -> None:
    dep = CONTAINER_CASES[case]()
    parsed = spython_recipe(render_singularity(dep), tmp_path)
    multi_stage = dep.pip_packages or dep.compile_argv or dep.model_file
    assert list(parsed) == (["build", "final"] if multi_stage else ["final"])
    final = parsed["final"]
    assert final["fromHeader"] == (dep.runtime_image or dep.base_image)
    assert final["cmd"] == f'exec {shlex.join(dep.run_argv)} "$@"'
    assert f"org.opencontainers.image.title {dep.app_name}" in final["labels"]
    for key, value in dep.env:
        assert f"{key}={shlex.quote(value)}" in final["environ"]
    if multi_stage:
        build = parsed["build"]
        assert build["fromHeader"] == dep.base_image
        assert final["layer_files"]["build"] == ["/opt/appopt/venv /opt/appopt/venv", "/opt/app /opt/app"]
        assert shlex.join(COMPILE) in build["install"]
        assert "model.onnx /opt/app/model.onnx" in build["files"]


@pytest.mark.parametrize("case", sorted(CONTAINER_CASES))
def test_singularity_sections_follow_apptainer_rules(case: str) -> None:
    """Every stage has a Bootstrap/From/Stage header, known sections once each, and %post is valid sh."""
    stages = singularity_stages(render_singularity(CONTAINER_CASES[case]()))
    known = {"%files", "%files from build", "%environment", "%post", "%labels", "%runscript"}
    for stage in stages:
        assert stage["header"][0] == "Bootstrap: docker" and stage["header"][1].startswith("From: ")
        names = [name for name, _ in stage["sections"]]
        assert set(names) <= known and len(names) == len(set(names)), names
        for shell_section in ("%post", "%environment", "%runscript"):
            script = section_body(stage, shell_section)
            subprocess.run(["sh", "-n", "-c", script], check=True)
    assert stages[-1]["header"][2] == "Stage: final"


def test_environment_section_sets_the_exact_values() -> None:
    dep = dataclasses.replace(gpu_training(), env=(("GREETING", 'it\'s $HOME `id` "quoted"'), ("EMPTY", "")))
    final = singularity_stages(render_singularity(dep))[-1]
    script = section_body(final, "%environment") + '\nprintf "%s|%s" "$GREETING" "$EMPTY"'
    out = subprocess.run(["sh", "-c", script], check=True, capture_output=True, text=True).stdout
    assert out == 'it\'s $HOME `id` "quoted"|'


def test_a_bad_field_is_one_clear_line() -> None:
    dep = dataclasses.replace(gpu_training(), base_image="nvcr.io/nvidia/pytorch:24.01 ; rm -rf /", model_file="../x")
    with pytest.raises(RenderError) as info:
        render_dockerfile(dep)
    assert [line.split(":")[0] for line in info.value.lines] == ["base_image", "model_file"]
