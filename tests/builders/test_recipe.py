"""The recipe: stages and their order, labels, the single-stage case, validation before anything is built."""

from __future__ import annotations

import dataclasses

import pytest

from builders.errors import RenderError
from builders.primitives import BaseImage, Copy, Entrypoint, Environment, Label, Shell
from builders.recipe import image_labels, recipe_from_deployment
from tests.builders.cases import COMPILE, RUN, gpu_training, local_plain, pbs_arm


def test_build_then_final_stage() -> None:
    recipe = recipe_from_deployment(gpu_training())
    assert recipe.stage_names() == ["build", "final"]
    build, final = recipe.stages
    assert build[0] == BaseImage("nvcr.io/nvidia/pytorch:24.01-py3", "build")
    assert Shell.from_argv(COMPILE) == build[-1]
    assert final[-1] == Entrypoint(RUN)
    assert Copy("/opt/app", "/opt/app", from_stage="build") in final
    assert not any(isinstance(step, Shell) and "pip" in step.commands[0] for step in final)


def test_final_stage_env_and_labels() -> None:
    dep = gpu_training()
    final = recipe_from_deployment(dep).stages[-1]
    assert Environment(dep.env) in final
    (label,) = [step for step in final if isinstance(step, Label)]
    keys = [key for key, _ in label.labels]
    assert keys[:2] == ["org.opencontainers.image.title", "org.opencontainers.image.base.name"]
    assert set(dep.labels) <= set(label.labels)


def test_deployment_labels_override_ours() -> None:
    dep = dataclasses.replace(local_plain(), labels=(("org.opencontainers.image.title", "Custom"),))
    assert dict(image_labels(dep))["org.opencontainers.image.title"] == "Custom"


def test_runtime_image_is_the_final_base() -> None:
    build, final = recipe_from_deployment(pbs_arm()).stages
    assert build[0] == BaseImage("python:3.11", "build")
    assert final[0] == BaseImage("python:3.11-slim", "final")
    assert dict(image_labels(pbs_arm()))["org.opencontainers.image.base.name"] == "python:3.11-slim"


def test_no_entrypoint_without_run_argv_and_one_stage_without_build_work() -> None:
    recipe = recipe_from_deployment(dataclasses.replace(local_plain(), run_argv=()))
    assert recipe.stage_names() == ["final"]
    assert not any(isinstance(step, Entrypoint) for step in recipe.stages[0])


def test_every_problem_is_reported_at_once() -> None:
    dep = dataclasses.replace(
        gpu_training(),
        env=(("BAD NAME", "x"),),
        labels=(("Bad Key", "x"),),
        arch="sparc",
        apt_packages=("x",),
        distro="rocky",
        app_files=("/etc/passwd",),
        wheelhouse="wheel house",
        app_dir="opt/app",
        compile_argv=(),
    )
    with pytest.raises(RenderError) as info:
        recipe_from_deployment(dep)
    fields = [line.split(":")[0] for line in info.value.lines]
    assert fields == [
        "arch",
        "apt_packages",
        "env.BAD NAME",
        "labels.Bad Key",
        "wheelhouse",
        "app_files[0]",
        "app_dir",
        "compile_argv",
    ]
