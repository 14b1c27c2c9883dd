"""Render a planned deployment as container files and a job: Dockerfile, Singularity.def, Slurm/PBS/k8s/run.sh.

Layers, hpccm-style: ``primitives`` (the only code that knows each format's syntax) <- ``blocks`` (compose
primitives, build and runtime steps) <- ``recipe`` (a Deployment as a list of stages) <- ``containers`` and
``jobs`` (text through the Jinja2 layouts in ``templates/``) <- ``render`` (files on disk).

>>> from builders import Deployment, render_dockerfile
>>> render_dockerfile(Deployment(app_name="demo", base_image="debian:12")).count("FROM ")
1
"""

from __future__ import annotations

from builders.containers import render_dockerfile, render_singularity
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.jobs import render_job
from builders.recipe import Recipe, recipe_from_deployment
from builders.render import render_artifacts

__all__ = [
    "Deployment",
    "Recipe",
    "RenderError",
    "recipe_from_deployment",
    "render_artifacts",
    "render_dockerfile",
    "render_job",
    "render_singularity",
]
