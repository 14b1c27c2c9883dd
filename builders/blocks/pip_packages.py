"""pip requirements, from an index or (air-gapped sites) only from a wheelhouse directory in the build context."""

from __future__ import annotations

from dataclasses import dataclass

from builders.primitives import Copy, Primitive, Shell

#: Where the wheelhouse is copied in the build stage (never reaches the final stage).
#: Outside /tmp: Charliecloud mounts the host's /tmp over the image's during RUN.
WHEELHOUSE_IN_IMAGE = "/opt/appopt/wheelhouse"


@dataclass(frozen=True)
class PipPackages:
    """``python -m pip install`` of ``packages`` from PyPI and ``index_urls``; with ``wheelhouse`` set: only from it
    (``--no-index --find-links``).

    >>> PipPackages(("torch==2.13.0",), index_urls=("https://download.pytorch.org/whl/cpu",)).build()[0].commands[0]
    ... # doctest: +ELLIPSIS
    '... --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0'

    Install into a venv made by :class:`PythonRuntime` (pass its ``venv_python``): the final stage gets the packages
    by copying that venv, so this block has no runtime steps of its own.
    """

    packages: tuple[str, ...]
    python: str = "python3"
    wheelhouse: str | None = None
    index_urls: tuple[str, ...] = ()

    def build(self) -> list[Primitive]:
        if not self.packages:
            return []
        argv = [self.python, "-m", "pip", "install", "--no-cache-dir", "--disable-pip-version-check"]
        if self.wheelhouse is None:
            indexes = [word for url in self.index_urls for word in ("--extra-index-url", url)]
            return [Shell.from_argv([*argv, *indexes, *self.packages])]
        install = [*argv, "--no-index", "--find-links", WHEELHOUSE_IN_IMAGE, *self.packages]
        return [
            Copy(self.wheelhouse, WHEELHOUSE_IN_IMAGE),
            Shell.from_argv(install, ["rm", "-rf", WHEELHOUSE_IN_IMAGE]),
        ]

    def runtime(self, from_stage: str) -> list[Primitive]:
        return []
