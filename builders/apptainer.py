"""Build the plan's ``Singularity.def`` into a SIF with ``apptainer build`` (or ``singularity build``).

Where neither binary exists the result says so (``available=False`` and the reason) instead of failing: the
definition file is still useful, and is built on the cluster where Apptainer is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from builders.engines import EngineError, LineSink, stream_command
from builders.errors import BuildError

BINARIES = ("apptainer", "singularity")
NOT_AVAILABLE = "no apptainer/singularity binary on this machine"


@dataclass(frozen=True)
class SifBuild:
    """A SIF build's outcome: built (with path and time), or not available here (with the reason)."""

    available: bool
    reason: str | None = None
    binary: str | None = None
    sif: Path | None = None
    seconds: float = 0.0


class ApptainerError(BuildError):
    """The binary exists but the build failed; one line with the log's path."""

    default_line = "apptainer build failed"


def find_binary(env: Mapping[str, str] | None = None) -> str | None:
    """The first of ``apptainer``/``singularity`` on PATH, or None."""
    path = (os.environ if env is None else env).get("PATH")
    return next((name for name in BINARIES if shutil.which(name, path=path)), None)


def build_sif(
    out_dir: Path,
    sif_name: str | None = None,
    *,
    definition: str = "Singularity.def",
    fakeroot: bool | None = None,
    on_line: LineSink | None = None,
    env: Mapping[str, str] | None = None,
) -> SifBuild:
    """Build ``OUT/<definition>`` into ``OUT/<sif_name>`` (default: the definition's stem + ``.sif``).

    Runs in ``out_dir`` so the definition's ``%files`` paths (relative to the build context) resolve. ``fakeroot``
    defaults to True when not running as root (unprivileged builds need ``--fakeroot``).
    """
    binary = find_binary(env)
    if binary is None:
        return SifBuild(available=False, reason=NOT_AVAILABLE)
    definition_path = out_dir / definition
    if not definition_path.is_file():
        raise ApptainerError(f"{definition_path}: missing (container.formats must include singularity)")
    sif = out_dir / (sif_name or f"{definition_path.stem}.sif")
    argv = [binary, "build", "--force"]
    if fakeroot if fakeroot is not None else os.geteuid() != 0:
        argv.append("--fakeroot")
    argv += [sif.name, definition_path.name]
    log_path = out_dir / "logs" / f"build-{binary}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        stream_command(argv, dict(os.environ if env is None else env), log_path, on_line, cwd=out_dir)
    except EngineError as exc:
        raise ApptainerError(*exc.lines) from None
    return SifBuild(available=True, binary=binary, sif=sif, seconds=time.monotonic() - started)


def inspect_labels(sif: Path, env: Mapping[str, str] | None = None) -> str:
    """``apptainer inspect --labels`` of a built SIF (text), for checks."""
    binary = find_binary(env)
    if binary is None:
        raise ApptainerError(NOT_AVAILABLE)
    proc = subprocess.run([binary, "inspect", "--labels", str(sif)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ApptainerError(f"{binary} inspect {sif}: {proc.stderr.strip() or proc.returncode}")
    return proc.stdout
