"""A wheelhouse: the image's Python requirements downloaded on the host, so the build needs no network.

Air-gapped HPC sites work this way: ``pip download`` on a connected machine for the *image's* Python and CPU (not the
host's), carry the directory over, and the Dockerfile installs with ``pip install --no-index --find-links``.

>>> wheel_platforms("aarch64")
['manylinux_2_28_aarch64', 'manylinux2014_aarch64']
>>> python_version_of("python:3.12-slim")
'3.12'
>>> target_environment("aarch64", "3.11")["platform_machine"]
'aarch64'
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

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
    deps: bool = True,
) -> Wheelhouse:
    """``pip download`` binary wheels of ``requirements`` (and their dependencies) for the image into ``dest``.

    Only wheels (``--only-binary=:all:``): the build stage must not compile anything it cannot fetch. ``index_urls``
    are searched besides PyPI (and pip's own ``PIP_FIND_LINKS``), as the build stage would (PyTorch's CPU index).
    ``deps=False`` fetches only the named requirements (:func:`download_for_target` resolves the rest).
    """
    dest.mkdir(parents=True, exist_ok=True)
    platforms = wheel_platforms(arch)
    if not requirements:
        return Wheelhouse(dest, list_wheels(dest), python_version, tuple(platforms))
    abi = "cp" + python_version.replace(".", "")
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--disable-pip-version-check",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--abi",
        abi,
    ]
    for platform in platforms:
        argv += ["--platform", platform]
    if not deps:
        argv.append("--no-deps")
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
        problems = [
            ln.strip() for ln in proc.stderr.splitlines() if ln.startswith("ERROR")
        ] or proc.stderr.strip().splitlines()[-1:]
        raise WheelhouseError(
            f"wheelhouse: pip download for Python {python_version} on {platforms[0]} failed: "
            + (problems[0] if problems else f"exit {proc.returncode}")
        )
    return Wheelhouse(dest, list_wheels(dest), python_version, tuple(platforms))


def target_environment(arch: str, python_version: str = DEFAULT_PYTHON) -> dict[str, str]:
    """PEP 508 marker values of a CPython ``python_version`` on Linux ``arch``: what the image's pip would see."""
    machine = _ARCHES.get(arch)
    if machine is None:
        raise WheelhouseError(f"arch {arch!r}: no wheel platform known (expected one of {', '.join(sorted(_ARCHES))})")
    return {
        "implementation_name": "cpython", "implementation_version": f"{python_version}.0", "os_name": "posix",
        "platform_machine": machine, "platform_release": "", "platform_system": "Linux", "platform_version": "",
        "python_full_version": f"{python_version}.0", "platform_python_implementation": "CPython",
        "python_version": python_version, "sys_platform": "linux",
    }  # fmt: skip


def _requires_dist(wheel: Path) -> list[Requirement]:
    """The ``Requires-Dist`` entries of a wheel's METADATA (read from the archive; nothing of it runs)."""
    with zipfile.ZipFile(wheel) as archive:
        names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not names:
            raise WheelhouseError(f"wheelhouse: {wheel.name} has no .dist-info/METADATA")
        metadata = HeaderParser().parsestr(archive.read(names[0]).decode("utf-8", "replace"))
    try:
        return [Requirement(line) for line in metadata.get_all("Requires-Dist") or []]
    except InvalidRequirement as exc:
        raise WheelhouseError(f"wheelhouse: {wheel.name}: Requires-Dist {exc}") from None


def _wheel_for(dest: Path, req: Requirement) -> tuple[Version, Path] | None:
    """The newest wheel in ``dest`` that satisfies ``req`` (pip download's choice), or None."""
    found = []
    for wheel in dest.glob("*.whl"):
        name, version, _build, _tags = parse_wheel_filename(wheel.name)
        if name == canonicalize_name(req.name) and req.specifier.contains(version, prereleases=True):
            found.append((version, wheel))
    return max(found) if found else None


def _without_marker(req: Requirement) -> str:
    """``req`` for pip's command line: its marker, already evaluated for the target, left off."""
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    return f"{req.name}{extras} @ {req.url}" if req.url else f"{req.name}{extras}{req.specifier}"


def download_for_target(
    requirements: Sequence[str],
    dest: Path,
    *,
    python_version: str = DEFAULT_PYTHON,
    arch: str = "aarch64",
    on_line: Callable[[str], None] | None = None,
) -> Wheelhouse:
    """Wheels of ``requirements`` and their dependencies for another CPU, with markers evaluated for that CPU.

    ``pip download --platform`` evaluates environment markers for the host, so on x86 an aarch64 ``torch`` asks
    for the x86-only ``nvidia-*`` wheels (``platform_machine == "x86_64"``) and fails. Here each level of the
    dependency tree is fetched with ``--no-deps`` and the next level is read from the wheels' metadata with the
    target's markers (:func:`target_environment`). No backtracking: a dependency that an earlier wheel's pin
    excludes is a one-line error naming both.
    """
    env = target_environment(arch, python_version)
    try:
        pending = [Requirement(text) for text in requirements]
    except InvalidRequirement as exc:
        raise WheelhouseError(f"wheelhouse: {exc}") from None
    pending = [req for req in pending if req.marker is None or req.marker.evaluate({**env, "extra": ""})]
    chosen: dict[str, tuple[Version, Path, set[str]]] = {}
    while pending:
        missing: dict[str, list[Requirement]] = {}
        for req in pending:
            if canonicalize_name(req.name) not in chosen:
                missing.setdefault(canonicalize_name(req.name), []).append(req)
        if missing:
            argv = [_without_marker(req) for reqs in missing.values() for req in reqs]
            download_wheelhouse(argv, dest, python_version=python_version, arch=arch, on_line=on_line, deps=False)
        next_level: list[Requirement] = []
        for req in pending:
            name = canonicalize_name(req.name)
            if name not in chosen:
                found = _wheel_for(dest, req)
                if found is None:
                    raise WheelhouseError(f"wheelhouse: pip download left no wheel for {req} in {dest}")
                chosen[name] = (found[0], found[1], set())
                extras = {""} | set(req.extras)
            elif req.specifier.contains(chosen[name][0], prereleases=True):
                extras = set(req.extras) - chosen[name][2]  # a new extra of a wheel already read
            else:
                raise WheelhouseError(f"wheelhouse: {req} conflicts with {name}=={chosen[name][0]} already chosen")
            if not extras:
                continue
            chosen[name][2].update(extras)
            for dep in _requires_dist(chosen[name][1]):
                if dep.marker is None or any(dep.marker.evaluate({**env, "extra": extra}) for extra in extras):
                    next_level.append(dep)
        pending = next_level
    wheels = tuple(sorted(path.name for _version, path, _extras in chosen.values()))
    return Wheelhouse(dest, wheels, python_version, tuple(wheel_platforms(arch)))


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
