"""The frozen render context passed to every primitive (never a global "current format", unlike hpccm)."""

from __future__ import annotations

from dataclasses import dataclass

from builders.deployment import FORMATS, ContainerFormat


@dataclass(frozen=True)
class RenderContext:
    """What a primitive needs to know to write itself: the container file format, the distro and CPU arch.

    >>> RenderContext("docker").format
    'docker'
    """

    format: ContainerFormat
    distro: str = "debian"
    arch: str = "x86_64"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"unknown container format {self.format!r}; expected one of {', '.join(FORMATS)}")
