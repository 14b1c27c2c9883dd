"""Debian/Ubuntu packages in one layer: no recommends, package lists removed afterwards."""

from __future__ import annotations

from dataclasses import dataclass

from builders.primitives import Primitive, Shell
from builders.quoting import shell_join

#: Trusted text: a glob, which an argv list could not express.
CLEAN_APT_LISTS = "rm -rf /var/lib/apt/lists/*"


@dataclass(frozen=True)
class AptPackages:
    """``apt-get install`` of ``packages``; the final stage installs ``runtime_packages`` (default: the same).

    >>> AptPackages(("libgomp1",)).build()[0].commands[1]
    'DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libgomp1'
    """

    packages: tuple[str, ...]
    runtime_packages: tuple[str, ...] | None = None

    def build(self) -> list[Primitive]:
        return self._install(self.packages)

    def runtime(self, from_stage: str) -> list[Primitive]:
        return self._install(self.packages if self.runtime_packages is None else self.runtime_packages)

    @staticmethod
    def _install(packages: tuple[str, ...]) -> list[Primitive]:
        if not packages:
            return []
        install = shell_join(["apt-get", "install", "-y", "--no-install-recommends", *packages])
        return [Shell(("apt-get update", f"DEBIAN_FRONTEND=noninteractive {install}", CLEAN_APT_LISTS))]
