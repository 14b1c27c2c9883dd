"""A wheelhouse: the image's Python requirements downloaded on the host, so the build needs no network.

Air-gapped HPC sites work this way: ``pip download`` on a connected machine for the *image's* Python and CPU (not the
host's), carry the directory over, and the Dockerfile installs with ``pip install --no-index --find-links``.

>>> wheel_platforms("aarch64")
['manylinux_2_28_aarch64', 'manylinux2014_aarch64']
>>> python_version_of("python:3.12-slim")
'3.12'
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from builders.errors import BuildError

#: The Python of Debian 12 (bookworm) and of the catalog's default images, used when the base image does not say.
DEFAULT_PYTHON = "3.11"
#: glibc of the oldest target we promise (RHEL 8 has 2.28); pip also accepts older manylinux tags below it.
DEFAULT_GLIBC = "2_28"
_ARCHES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64", "ppc64le": "ppc64le"}


class WheelhouseError(BuildError):
    """pip could not fetch a requirement for the image's Python and platform; ``lines`` say which and why."""

    default_line = "wheelhouse error"


@dataclass(frozen=True)
class Wheelhouse:
    """A directory of wheels and what it was made for."""

    path: Path
    wheels: tuple[str, ...]
    python_version: str
    platforms: tuple[str, ...]


def wheel_platforms(arch: str, glibc: str = DEFAULT_GLIBC) -> list[str]:
    """pip ``--platform`` tags for a Linux CPU arch (``x86_64``/``amd64``, ``aarch64``/``arm64``, ``ppc64le``)."""
    machine = _ARCHES.get(arch)
    if machine is None:
        raise WheelhouseError(f"arch {arch!r}: no wheel platform known (expected one of {', '.join(sorted(_ARCHES))})")
    return [f"manylinux_{glibc}_{machine}", f"manylinux2014_{machine}"]


def python_version_of(base_image: str) -> str:
    """``3.12`` for ``python:3.12-slim`` and the like; :data:`DEFAULT_PYTHON` when the name does not say."""
    match = re.search(r"python[:\-]?(\d+\.\d+)", base_image)
    return match.group(1) if match else DEFAULT_PYTHON


def list_wheels(path: Path) -> tuple[str, ...]:
    """The wheel file names in ``path`` (empty when it does not exist)."""
    return tuple(sorted(p.name for p in path.glob("*.whl"))) if path.is_dir() else ()


def download_wheelhouse(
    requirements: Sequence[str],
    dest: Path,
    *,
    python_version: str = DEFAULT_PYTHON,
    arch: str = "x86_64",
    on_line: Callable[[str], None] | None = None,
    index_urls: Sequence[str] = (),
) -> Wheelhouse:
    """``pip download`` binary wheels of ``requirements`` (and their dependencies) for the image into ``dest``.

    Only wheels (``--only-binary=:all:``): the build stage must not compile anything it cannot fetch. ``index_urls``
    are searched besides PyPI (and pip's own ``PIP_FIND_LINKS``), as the build stage would (PyTorch's CPU index).
    """
    dest.mkdir(parents=True, exist_ok=True)
    platforms = wheel_platforms(arch)
    if not requirements:
        return Wheelhouse(dest, list_wheels(dest), python_version, tuple(platforms))
    abi = "cp" + python_version.replace(".", "")
    argv = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--only-binary=:all:",
            "--dest", str(dest), "--python-version", python_version, "--implementation", "cp", "--abi", abi]
    for platform in platforms:
        argv += ["--platform", platform]
    bad = [r for r in requirements if r.startswith("-")]
    if bad:
        raise WheelhouseError(f"wheelhouse: {bad[0]!r} is an option, not a requirement")
    for url in index_urls:
        argv += ["--extra-index-url", url]
    argv += list(requirements)
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if on_line:
        for line in proc.stdout.splitlines():
            on_line(line)
    if proc.returncode != 0:
        problems = [ln.strip() for ln in proc.stderr.splitlines() if ln.startswith("ERROR")] or \
            proc.stderr.strip().splitlines()[-1:]
        raise WheelhouseError(
            f"wheelhouse: pip download for Python {python_version} on {platforms[0]} failed: "
            + (problems[0] if problems else f"exit {proc.returncode}")
        )
    return Wheelhouse(dest, list_wheels(dest), python_version, tuple(platforms))


def copy_into_context(source: Path, context_dir: Path, name: str = "wheelhouse") -> Path:
    """Put the wheels of ``source`` at ``context_dir/name`` (hard links where possible) so a build can COPY them."""
    target = context_dir / name
    if source.resolve() == target.resolve():
        return target
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    for wheel in sorted(source.glob("*.whl")):
        try:
            (target / wheel.name).hardlink_to(wheel)
        except OSError:
            shutil.copy2(wheel, target / wheel.name)
    return target
