"""The catalog's extra install commands (trusted text, never spec text), run in both stages."""

from __future__ import annotations

from dataclasses import dataclass

from builders.primitives import Primitive, Shell


@dataclass(frozen=True)
class ShellSteps:
    """Catalog install steps: they set up the framework, so the final stage needs them as much as the build stage."""

    commands: tuple[str, ...]

    def build(self) -> list[Primitive]:
        return [Shell(self.commands)] if self.commands else []

    def runtime(self, from_stage: str) -> list[Primitive]:
        return self.build()
