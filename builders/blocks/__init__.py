"""Building blocks: each composes primitives for the build stage (``build``) and the final stage (``runtime``).

Like hpccm's building blocks, they never write ``RUN``/``%post`` text themselves, so one block serves every format.
"""

from __future__ import annotations

from typing import Protocol

from builders.blocks.apt_packages import AptPackages
from builders.blocks.model_compile import ModelCompile
from builders.blocks.pip_packages import PipPackages
from builders.blocks.python_runtime import PythonRuntime
from builders.blocks.shell_steps import ShellSteps
from builders.primitives import Primitive


class BuildingBlock(Protocol):
    """What the recipe asks of a block."""

    def build(self) -> list[Primitive]:
        """Steps for the build stage."""
        ...

    def runtime(self, from_stage: str) -> list[Primitive]:
        """The slim steps for the final stage; ``from_stage`` names the build stage to copy results from."""
        ...


__all__ = ["AptPackages", "BuildingBlock", "ModelCompile", "PipPackages", "PythonRuntime", "ShellSteps"]
