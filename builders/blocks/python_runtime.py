"""A virtual environment for the application's Python packages, carried whole from the build stage to the final one.

``--system-site-packages`` keeps the framework the base image already has (no second copy of PyTorch), and
``--without-pip`` works on bases without ``ensurepip`` (Debian's python3): the venv's python runs the base image's
pip, which then installs into the venv. The final stage must have the same Python at the same path (the same base,
or a slimmer image of the same Python).
"""

from __future__ import annotations

from dataclasses import dataclass

from builders.primitives import Copy, Environment, Primitive, Shell

VENV = "/opt/appopt/venv"


@dataclass(frozen=True)
class PythonRuntime:
    """Create ``venv`` with ``python`` and put its ``bin`` first on PATH (build and final stage)."""

    python: str = "python3"
    venv: str = VENV

    @property
    def venv_python(self) -> str:
        """The interpreter later blocks install with (``pip`` runs as ``<venv>/bin/python -m pip``)."""
        return f"{self.venv}/bin/python"

    def build(self) -> list[Primitive]:
        create = [self.python, "-m", "venv", "--without-pip", "--system-site-packages", self.venv]
        return [Shell.from_argv(create), self._path(build_time=True)]

    def runtime(self, from_stage: str) -> list[Primitive]:
        return [Copy(self.venv, self.venv, from_stage=from_stage), self._path(build_time=False)]

    def _path(self, build_time: bool) -> Environment:
        return Environment((("PATH", f"{self.venv}/bin:$PATH"),), expand=True, build_time=build_time)
