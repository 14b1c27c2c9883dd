"""One output directory, one plan: ``appopt plan -o DIR`` owns DIR while it writes, and leaves only its own files.

* **Exclusive.** A planner holds ``DIR/.appopt-lock`` (``flock``, not waiting): a second planner refuses in one line.
* **Built aside.** The plan is written into ``DIR/.appopt-new-*`` first, so a failure leaves DIR as it was; then each
  entry is renamed into place, ``plan.json`` last, and what the previous plan rendered but this one does not (and what
  ``build``, ``push`` and the HPC builds wrote from it: ``build.json``, ``builds``, ``push.json``, ``logs``, images)
  is removed.
* **Only its own files.** ``DIR/.appopt-files`` lists what the plan wrote (a directory planned by an appopt without
  that list is recognised by its plan.json and deployment.json). A directory holding anything else (a job's output, a
  user's file) is refused unless ``force``, which writes the plan beside those files (a file of the same name as one
  the plan writes is replaced).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from builders.schedulers import job_files
from optimiser.errors import AppoptError

LOCK = ".appopt-lock"
MANIFEST = ".appopt-files"
_STAGING, _OLD = ".appopt-new-", ".appopt-old-"
#: Every name appopt keeps in an output directory for itself starts so (a killed planner's leftovers included).
_OURS = ".appopt-"
#: What commands other than ``plan`` write into a plan's directory; a re-plan removes it (it describes the old plan).
LATER_OUTPUTS = frozenset({"build.json", "push.json", "logs", "build", "builds", "wheelhouse"})
LATER_SUFFIXES = (".sqfs", ".sif")
#: What a plan by an appopt without ``MANIFEST`` wrote (recognised when plan.json and deployment.json are there).
_LEGACY_PLAN = frozenset(
    {"plan.json", "plan.md", "deployment.json", "model.onnx", "runtime", "code", "Dockerfile", "Singularity.def",
     *job_files().values()}
)
#: Written last, so that a reader who sees the new plan.json sees the whole new plan.
_LAST = ("plan.md", "plan.json")


class OutputDirError(AppoptError):
    """The output directory is busy, holds files appopt did not write, or cannot be written."""

    exit_code = 1


@contextlib.contextmanager
def exclusive_output_dir(out_dir: Path, force: bool = False) -> Iterator[Path]:
    """Lock ``out_dir`` (created if missing), yield an empty staging directory inside it, then move the staged
    plan into place and remove the previous plan's outputs. Nothing in ``out_dir`` changes if the body raises."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        lock = os.open(out_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise OutputDirError(f"{out_dir}: cannot create output directory: {exc.strerror or exc}") from None
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise OutputDirError(
                f"{out_dir}: another appopt plan is writing this directory now; run again when it has finished"
            ) from None
        previous = _previous_outputs(out_dir)
        foreign = _foreign(out_dir, previous)
        if foreign and not force:
            shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
            raise OutputDirError(
                f"{out_dir}: holds files appopt did not write ({shown}); choose another directory, or pass --force "
                "to write the plan beside them"
            )
        try:
            staging = Path(tempfile.mkdtemp(prefix=_STAGING, dir=out_dir))
        except OSError as exc:
            raise OutputDirError(f"{out_dir}: cannot write the plan: {exc.strerror or exc}") from None
        try:
            try:
                yield staging
                _install(staging, out_dir, previous)
            except OSError as exc:  # a full disk, a file appearing where a directory goes
                raise OutputDirError(f"{out_dir}: cannot write the plan: {exc.strerror or exc}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        os.close(lock)  # releases the lock


def _previous_outputs(out_dir: Path) -> set[str]:
    """Names the previous plan and the commands after it wrote, and leftovers of a planner that was killed."""
    present = set(os.listdir(out_dir))
    try:
        listed = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
        names = {n for n in listed if isinstance(n, str) and n and "/" not in n and n not in (".", "..")}
    except (OSError, ValueError, TypeError):
        names = set(_LEGACY_PLAN & present) if {"plan.json", "deployment.json"} <= present else set()
    later = {n for n in present if n in LATER_OUTPUTS or n.endswith(LATER_SUFFIXES)} if names else set()
    leftovers = {n for n in present if n.startswith(_OURS) and n not in (LOCK, MANIFEST)}
    return (names & present) | later | leftovers


def _foreign(out_dir: Path, previous: set[str]) -> list[str]:
    """Entries of ``out_dir`` that appopt did not write (sorted)."""
    own = previous | {LOCK, MANIFEST}
    return sorted(n for n in os.listdir(out_dir) if n not in own)


def _install(staging: Path, out_dir: Path, previous: set[str]) -> None:
    """Move every staged entry into ``out_dir`` and remove the previous plan's other outputs."""
    new = sorted(os.listdir(staging), key=lambda n: (n in _LAST, _LAST.index(n) if n in _LAST else 0, n))
    _write_manifest(out_dir, set(new) | previous)  # a planner killed from here on leaves nothing unlisted
    for name in sorted(previous - set(new)):
        _remove(out_dir / name, out_dir)
    for name in new:
        target = out_dir / name
        if (target.is_dir() and not target.is_symlink()) or (staging / name).is_dir():
            _remove(target, out_dir)  # os.replace swaps only a file for a file
        os.replace(staging / name, target)
    _write_manifest(out_dir, set(new))


def _remove(path: Path, out_dir: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        aside = Path(tempfile.mkdtemp(prefix=_OLD, dir=out_dir))
        os.replace(path, aside / path.name)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def _write_manifest(out_dir: Path, names: set[str]) -> None:
    text = json.dumps(sorted(n for n in names if not n.startswith(_OURS)), indent=1) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f"{MANIFEST}.", dir=out_dir)
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, out_dir / MANIFEST)
