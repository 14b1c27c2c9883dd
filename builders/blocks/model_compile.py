"""The application directory: model and app files copied in, the model compiled there, the result carried on."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from builders.primitives import Copy, Environment, Primitive, Shell, Workdir


@dataclass(frozen=True)
class ModelCompile:
    """Copy ``model_file`` and ``app_files`` into ``app_dir`` and run ``compile_argv`` there (build stage); the
    final stage copies the whole ``app_dir`` (model, compiled artefacts, app files) and puts it on PYTHONPATH.

    >>> [type(p).__name__ for p in ModelCompile("/opt/app", "model.onnx", (), ("compile",)).build()]
    ['Copy', 'Environment', 'Workdir', 'Shell']
    """

    app_dir: str
    model_file: str | None = None
    app_files: tuple[str, ...] = ()
    compile_argv: tuple[str, ...] | None = None

    @property
    def has_work(self) -> bool:
        return bool(self.model_file or self.app_files or self.compile_argv)

    def copies(self) -> list[tuple[str, str]]:
        """``(source in the build context, destination in the image)`` of the app files and the model.

        >>> ModelCompile("/opt/app", "m.onnx", ("code/apps",)).copies()
        [('code/apps', '/opt/app/apps'), ('m.onnx', '/opt/app/m.onnx')]
        """
        sources = [*self.app_files, *([self.model_file] if self.model_file else [])]
        return [(src, posixpath.join(self.app_dir, posixpath.basename(src.rstrip("/")))) for src in sources]

    def build(self) -> list[Primitive]:
        if not self.has_work:
            return []
        steps: list[Primitive] = [Copy(src, dest) for src, dest in self.copies()]
        steps.append(self._pythonpath(build_time=True))
        if self.compile_argv:
            steps += [Workdir(self.app_dir), Shell.from_argv(self.compile_argv)]
        return steps

    def runtime(self, from_stage: str) -> list[Primitive]:
        if not self.has_work:
            return []
        return [Copy(self.app_dir, self.app_dir, from_stage=from_stage), self._pythonpath(build_time=False)]

    def _pythonpath(self, build_time: bool) -> Environment:
        # A plain value: Charliecloud's Dockerfile parser does not expand ${VAR:+...}, and the base images the
        # catalog names set no PYTHONPATH of their own.
        return Environment((("PYTHONPATH", self.app_dir),), build_time=build_time)
