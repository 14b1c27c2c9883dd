"""A root file system for another CPU architecture, prepared on this host without running any of its code.

An x86 host without binfmt_misc cannot execute arm64 programs, so a Dockerfile's ``RUN`` steps cannot run for
arm64 here. What can be done on the host instead:

- Debian's packages for the target are downloaded and unpacked (``mmdebstrap --variant=extract``: no maintainer
  scripts run), giving the target's Python and the C/C++ libraries the wheels link against;
- the Python requirements are fetched as binary wheels for the target, their dependencies resolved with the
  target's markers (:func:`builders.wheelhouse.download_for_target`), and unpacked into the root by the host's pip
  (``--target --no-deps``, no code of the wheels runs): an aarch64 PyTorch goes in this way;
- the runtime's compiled kernels are cross-built for a chosen CPU (``runtime.native.cross_build``).

The prepared root is cached under the appopt cache directory, keyed by everything that went into it, so a
second preparation is a directory lookup. ``qemu-aarch64-static -L ROOT`` runs the root's Python on this host
(no binfmt needed); times measured that way are emulated and mean nothing about the target's speed.

>>> emulator_for("arm64")
'qemu-aarch64-static'
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from builders.errors import BuildError
from builders.wheelhouse import (
    DEFAULT_PYTHON,
    WheelhouseError,
    download_for_target,
    wheel_platforms,
)

#: Debian architecture names by the names platforms and compilers use.
DEBIAN_ARCH = {"arm64": "arm64", "aarch64": "arm64", "amd64": "amd64", "x86_64": "amd64"}
#: The machine (``uname -m``) of each Debian architecture.
MACHINE = {"arm64": "aarch64", "amd64": "x86_64"}
#: Debian packages the root needs: Python, and the C++ runtime the onnx wheel links against.
ROOT_PACKAGES = ("python3", "libstdc++6")
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"


class ForeignRootError(BuildError):
    """A foreign root could not be prepared or run (a missing tool, a failed download); one line."""


@dataclass(frozen=True)
class ForeignRoot:
    """A prepared root for ``arch`` (a Debian architecture) with its Python's site-packages filled."""

    path: Path
    arch: str
    python_version: str

    @property
    def python(self) -> Path:
        return self.path / "usr" / "bin" / "python3"

    @property
    def site_packages(self) -> Path:
        return self.path / "usr" / "local" / "lib" / f"python{self.python_version}" / "dist-packages"


def debian_arch(arch: str) -> str:
    """``arm64`` for ``arm64``/``aarch64``/``linux/arm64``; a one-line error for anything else."""
    name = arch.rsplit("/", 1)[-1] if arch.startswith("linux/") else arch
    found = DEBIAN_ARCH.get(name)
    if found is None:
        raise ForeignRootError(f"arch {arch!r}: expected one of {', '.join(sorted(DEBIAN_ARCH))}")
    return found


def emulator_for(arch: str) -> str:
    """The qemu user-mode emulator for a Debian architecture (``qemu-aarch64-static`` for arm64)."""
    return f"qemu-{MACHINE[debian_arch(arch)]}-static"


def host_can_run(arch: str) -> bool:
    """True when this host executes ``arch`` code natively or through a registered binfmt_misc handler."""
    machine = MACHINE[debian_arch(arch)]
    if os.uname().machine == machine:
        return True
    handler = Path("/proc/sys/fs/binfmt_misc") / f"qemu-{machine}"
    try:
        return handler.is_file() and handler.read_text().startswith("enabled")
    except OSError:
        return False


def default_requirements() -> tuple[str, ...]:
    """The runtime's Python requirements, pinned to the versions this host's runtime runs with, so the image
    and the host compute with the same onnx and numpy."""
    from importlib import metadata

    pins = []
    for name in ("numpy", "onnx"):  # as a plan pins them, so tests and builds share one cached root
        try:
            pins.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pins.append(name)
    return tuple(pins)


def _root_key(arch: str, python_version: str, requirements: Sequence[str], mirror: str) -> str:
    text = "\n".join([arch, python_version, SUITE, mirror, *sorted(requirements)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _run(argv: Sequence[str], what: str, timeout: float = 900) -> None:
    tool = argv[0]
    if shutil.which(tool) is None:
        raise ForeignRootError(f"{what}: {tool} not found (scripts/ci-setup installs it)")
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise ForeignRootError(f"{what}: {tool} ran past {timeout:g} s") from None
    if proc.returncode != 0:
        lines = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()
        raise ForeignRootError(f"{what}: {tool} failed: {lines[-1]}")


def prepare_root(
    cache: Path,
    arch: str = "arm64",
    *,
    python_version: str = DEFAULT_PYTHON,
    requirements: Sequence[str] | None = None,
    packages: Sequence[str] = (),
    mirror: str | None = None,
) -> ForeignRoot:
    """The cached root for ``arch`` under ``cache``, prepared now if it is not there yet (~30 s and ~200 MB;
    with PyTorch's 146 MB wheel, ~800 MB).

    ``packages`` are Debian packages beyond Python (a plan's apt packages, e.g. ``libarmnn22``). The root is
    assembled in a temporary directory next to its final place and renamed when complete, so an interrupted
    preparation leaves nothing that looks finished. The wheels it was filled from stay beside it (``wheels/``).
    """
    deb_arch = debian_arch(arch)
    reqs = tuple(requirements) if requirements is not None else default_requirements()
    source = mirror or os.environ.get("APPOPT_DEBIAN_MIRROR") or DEFAULT_MIRROR
    debs = tuple(dict.fromkeys((*ROOT_PACKAGES, *packages)))
    key = _root_key(deb_arch, python_version, (*reqs, *debs), source)
    final = cache / f"root-{deb_arch}-py{python_version}-{key}"
    root = ForeignRoot(final / "rootfs", deb_arch, python_version)
    if (final / ".complete").is_file():
        return root
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=cache))
    try:
        staged = ForeignRoot(work / "rootfs", deb_arch, python_version)
        machine = MACHINE[deb_arch]
        try:  # first, so a requirement with no wheel fails before the root is downloaded
            # markers evaluated for the target's CPU, not this host's (download_for_target says why)
            house = download_for_target(reqs, work / "wheels", python_version=python_version, arch=machine)
        except WheelhouseError as exc:
            raise ForeignRootError(f"Python wheels for {deb_arch}: {exc.lines[0]}") from None
        _run(
            ["mmdebstrap", "--quiet", "--variant=extract", f"--arch={deb_arch}",
             f"--include={','.join(debs)}", SUITE, str(staged.path), source],
            f"arm64 root ({SUITE}, {deb_arch})",
        )  # fmt: skip
        argv = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
                "--no-deps", "--target", str(staged.site_packages), "--only-binary=:all:",
                "--python-version", python_version, "--implementation", "cp"]  # fmt: skip
        for tag in wheel_platforms(machine):
            argv += ["--platform", tag]
        _run([*argv, *(str(house.path / name) for name in house.wheels)], "unpacking the wheels into the root")
        (work / ".complete").write_text("\n".join((*reqs, *debs)) + "\n")
        try:
            os.replace(work, final)
        except OSError:
            if not (final / ".complete").is_file():  # not a concurrent preparation that finished first
                raise
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)
    return root


def run_python(
    root: ForeignRoot,
    args: Sequence[str],
    *,
    cpu: str = "max",
    env: Mapping[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """Run the root's Python with ``args`` under the qemu user-mode emulator for ``cpu`` (``a64fx``,
    ``neoverse-n1``, ``max``). Host paths stay visible to it (``-L`` only redirects what the root holds), so
    ``PYTHONPATH`` may name the host's checkout."""
    emulator = emulator_for(root.arch)
    if shutil.which(emulator) is None:
        raise ForeignRootError(f"{emulator} not found (Debian: qemu-user-static; scripts/ci-setup installs it)")
    child_env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8", **(env or {})}
    argv = [emulator, "-cpu", cpu, "-L", str(root.path), str(root.python), *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=child_env, check=False)
    except subprocess.TimeoutExpired:
        raise ForeignRootError(f"{emulator} -cpu {cpu}: ran past {timeout:g} s") from None
