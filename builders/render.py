"""Write the rendered artifacts into an output directory, each file atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from builders.containers import render_dockerfile, render_singularity
from builders.deployment import Deployment
from builders.jobs import job_scheduler


def render_artifacts(dep: Deployment, out_dir: Path) -> list[Path]:
    """Write ``Dockerfile`` and/or ``Singularity.def`` (per ``dep.formats``) and the job file; return their paths.

    Everything is rendered before anything is written, so a RenderError leaves ``out_dir`` as it was; each file is
    written to a temporary name and renamed, so a reader never sees half a file.
    """
    files: list[tuple[str, str, bool]] = []
    if "docker" in dep.formats:
        files.append(("Dockerfile", render_dockerfile(dep), False))
    if "singularity" in dep.formats:
        files.append(("Singularity.def", render_singularity(dep), False))
    scheduler = job_scheduler(dep)
    files.append((scheduler.job_file, scheduler.render(dep), scheduler.executable))  # a script is made executable
    out_dir.mkdir(parents=True, exist_ok=True)
    return [write_atomically(out_dir / name, text, executable) for name, text, executable in files]


def write_atomically(path: Path, text: str, executable: bool = False) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same directory and ``os.replace``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(tmp, 0o755 if executable else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
