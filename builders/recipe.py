"""A deployment as a format-independent recipe: a list of stages, each a list of primitives.

The build stage installs everything and compiles the model; the final stage takes only the blocks' runtime steps
(the venv, the application directory with the compiled model, the runtime packages), then the environment, labels
and entrypoint. When there is nothing to build, the recipe is the final stage alone.

>>> from builders.deployment import Deployment
>>> recipe = recipe_from_deployment(Deployment(app_name="demo", base_image="debian:12", run_argv=("true",)))
>>> recipe.stage_names()
['final']
"""

from __future__ import annotations

from dataclasses import dataclass

from builders.blocks import AptPackages, BuildingBlock, ModelCompile, PipPackages, PythonRuntime, ShellSteps
from builders.deployment import Deployment
from builders.primitives import BaseImage, Comment, Entrypoint, Environment, Label, Primitive
from builders.validate import check_deployment

BUILD_STAGE = "build"
FINAL_STAGE = "final"

Stage = tuple[Primitive, ...]


@dataclass(frozen=True)
class Recipe:
    """Stages in build order; each starts with its :class:`BaseImage`, the last one is the image."""

    stages: tuple[Stage, ...]

    def stage_names(self) -> list[str | None]:
        return [stage[0].stage if isinstance(stage[0], BaseImage) else None for stage in self.stages]


def image_labels(dep: Deployment) -> tuple[tuple[str, str], ...]:
    """OCI labels for the image: title and base from the deployment, then ``dep.labels`` (which win on a clash)."""
    labels = {
        "org.opencontainers.image.title": dep.app_name,
        "org.opencontainers.image.base.name": dep.runtime_image or dep.base_image,
    }
    labels.update(dep.labels)
    return tuple(labels.items())


def recipe_from_deployment(dep: Deployment) -> Recipe:
    """The multi-stage recipe for ``dep`` (raises RenderError naming every field that cannot be rendered)."""
    check_deployment(dep)
    python = PythonRuntime() if dep.pip_packages else None
    app = ModelCompile(dep.app_dir, dep.model_file, dep.app_files, dep.compile_argv)
    # Order matters: system packages, catalog steps, the venv, pip into it, then the app (compiled with all that).
    blocks: list[BuildingBlock] = [AptPackages(dep.apt_packages), ShellSteps(dep.run_steps)]
    if python is not None:
        blocks += [python, PipPackages(dep.pip_packages, python=python.venv_python, wheelhouse=dep.wheelhouse,
                                      index_urls=dep.pip_index_urls)]
    blocks.append(app)

    final: list[Primitive] = [BaseImage(dep.runtime_image or dep.base_image, FINAL_STAGE)]
    stages: list[Stage] = []
    if python is not None or app.has_work:
        build = [
            BaseImage(dep.base_image, BUILD_STAGE),
            Comment(
                "The build stage installs the dependencies and compiles the model."
                if dep.compile_argv
                else "The build stage installs the dependencies and gathers the application's files."
            ),
        ]
        build += [step for block in blocks for step in block.build()]
        stages.append(tuple(build))
        final.append(Comment("The final stage keeps only what the application needs at run time."))
    final += [step for block in blocks for step in block.runtime(BUILD_STAGE)]
    if dep.env:
        final.append(Environment(dep.env))
    final.append(Label(image_labels(dep)))
    if dep.run_argv:
        final.append(Entrypoint(dep.run_argv))
    stages.append(tuple(final))
    return Recipe(tuple(stages))
