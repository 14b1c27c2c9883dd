"""Dockerfile and Singularity/Apptainer definition, both rendered from the same recipe."""

from __future__ import annotations

from builders.context import RenderContext
from builders.deployment import ContainerFormat, Deployment
from builders.primitives import layout_stage
from builders.recipe import Recipe, recipe_from_deployment
from builders.templating import render_template

TEMPLATES: dict[ContainerFormat, str] = {"docker": "Dockerfile.j2", "singularity": "Singularity.def.j2"}


def render_recipe(recipe: Recipe, ctx: RenderContext) -> str:
    """The container file for ``ctx.format``: each stage's primitives rendered in order, laid out by the template."""
    stages = [layout_stage([step.render(ctx) for step in stage], ctx) for stage in recipe.stages]
    return render_template(TEMPLATES[ctx.format], stages=stages)


def render_container(dep: Deployment, fmt: ContainerFormat) -> str:
    """The container file for ``dep`` in ``fmt`` ("docker" or "singularity")."""
    return render_recipe(recipe_from_deployment(dep), RenderContext(fmt, distro=dep.distro, arch=dep.arch))


def render_dockerfile(dep: Deployment) -> str:
    """A multi-stage Dockerfile (build it from the output directory: ``docker build -t IMAGE .``).

    >>> print(render_dockerfile(Deployment(app_name="demo", base_image="debian:12", run_argv=("echo", "hi"))))
    ... # doctest: +ELLIPSIS
    # Dockerfile rendered by appopt...
    FROM debian:12 AS final
    LABEL org.opencontainers.image.title="demo" \\
        org.opencontainers.image.base.name="debian:12"
    ENTRYPOINT ["echo", "hi"]
    <BLANKLINE>
    """
    return render_container(dep, "docker")


def render_singularity(dep: Deployment) -> str:
    """The Singularity/Apptainer definition (``apptainer build IMAGE.sif Singularity.def`` in the output directory)."""
    return render_container(dep, "singularity")
