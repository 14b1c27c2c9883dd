"""What a spec ships from this machine: ``application.code`` and a local ``application.data.path``.

They follow Docker's build-context rule: a path resolves against the spec file's directory and must stay inside it
(symlinks resolved), unless ``allow_outside`` (``--allow-outside-spec-dir``) says otherwise; only regular files and
directories are shipped (no devices, fifos or sockets, no symlinked directories); and the total has a size cap.
``check_app_files`` runs every check before anything is copied, and ``appopt validate`` runs it as ``plan`` does;
``copy_app_files`` then copies exactly the files it listed, never more bytes than it counted.

A relative ``application.data.path`` is shipped next to the model (``OUT/data/NAME``, ``/opt/app/data/NAME`` in the
image); an absolute one names a file on the target and is left to the job.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from optimiser.errors import SpecError
from optimiser.spec import AppSpec

#: Caps on what ``application.code`` may ship (all entries together) and on a local ``application.data.path``.
MAX_CODE_BYTES = 1 << 30
MAX_DATA_BYTES = 8 << 30
MAX_FILES = 100_000
#: Where the plan's output directory (and the image's app directory) hold the code and the data.
CODE_DIR = "code"
DATA_DIR = "data"
#: What is never shipped from a code directory.
IGNORED = ("__pycache__", "*.pyc", ".git")
_FLAG = "--allow-outside-spec-dir"


@dataclass(frozen=True)
class ShippedFile:
    """One regular file to copy: its resolved source, its place under the plan's output directory, its size."""

    source: Path
    dest: PurePosixPath
    size: int
    mode: int


@dataclass(frozen=True)
class ShippedFiles:
    """Everything ``check_app_files`` accepted: directories to create and files to copy, under the output dir."""

    dirs: tuple[PurePosixPath, ...] = ()
    files: tuple[ShippedFile, ...] = ()


def local_data_path(spec: AppSpec) -> Path | None:
    """The spec's ``application.data.path`` resolved against the spec's directory, when it is relative."""
    data = spec.application.data
    if data is None or not data.path or Path(data.path).is_absolute():
        return None
    return spec.base_dir / data.path


def shipped_data(spec: AppSpec) -> str | None:
    """Where the shipped data file is relative to the plan's output (and the image's app) directory: ``data/NAME``."""
    local = local_data_path(spec)
    return None if local is None else f"{DATA_DIR}/{local.name}"


def check_app_files(spec: AppSpec, allow_outside: bool = False) -> ShippedFiles:
    """Check ``application.code`` and a local ``application.data.path``; raise SpecError, one line per problem."""
    base = spec.base_dir.resolve()
    problems: list[str] = []
    dirs: list[PurePosixPath] = []
    files: list[ShippedFile] = []
    code_budget = _Budget("application.code", MAX_CODE_BYTES)
    for i, given in enumerate(spec.application.code):
        _collect(
            f"application.code.{i}", str(given), spec.base_dir / given, PurePosixPath(CODE_DIR, given.name),
            base, allow_outside, code_budget, dirs, files, problems,
        )
    data_path = local_data_path(spec)
    if data_path is not None:
        name = data_path.name
        data_given = spec.application.data.path if spec.application.data is not None else None
        _collect(
            "application.data.path", str(data_given), data_path,
            PurePosixPath(DATA_DIR, name), base, allow_outside, _Budget("application.data.path", MAX_DATA_BYTES),
            dirs, files, problems,
        )
        if DATA_DIR in {p.name for p in spec.application.code}:
            problems.append(f"application.code: {DATA_DIR!r} would share the image's {DATA_DIR}/ with the data file")
    if problems:
        raise SpecError(*problems)
    return ShippedFiles(tuple(dirs), tuple(files))


@dataclass
class _Budget:
    """Bytes and files left for one group of entries; ``spend`` returns an error line once a cap is passed."""

    what: str
    max_bytes: int
    used_bytes: int = 0
    used_files: int = 0

    def spend(self, size: int, where: str) -> str | None:
        self.used_bytes += size
        self.used_files += 1
        if self.used_bytes > self.max_bytes:
            return f"{self.what}: more than {_size(self.max_bytes)} to ship (reached at {where}); ship less"
        if self.used_files > MAX_FILES:
            return f"{self.what}: more than {MAX_FILES:,} files to ship (reached at {where}); ship less"
        return None


def _collect(
    field: str, given: str, path: Path, dest: PurePosixPath, base: Path, allow_outside: bool, budget: _Budget,
    dirs: list[PurePosixPath], files: list[ShippedFile], problems: list[str],
) -> None:
    """Check one entry (a file, or a directory walked without following links) and list what it ships."""
    try:
        resolved = path.resolve(strict=True)
        info = os.stat(resolved)
    except FileNotFoundError:
        problems.append(f"{field}: {given!r} does not exist (looked for {path.resolve()})")
        return
    except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop
        problems.append(f"{field}: {given!r} cannot be read: {getattr(exc, 'strerror', None) or exc}")
        return
    outside = _outside(resolved, base, allow_outside, field, given)
    if outside:
        problems.append(outside)
        return
    if stat.S_ISREG(info.st_mode):
        error = budget.spend(info.st_size, repr(given))
        if error:
            problems.append(error)
            return
        files.append(ShippedFile(resolved, dest, info.st_size, stat.S_IMODE(info.st_mode)))
        return
    if not stat.S_ISDIR(info.st_mode):
        problems.append(f"{field}: {given!r} is {_kind(info.st_mode)}, not a regular file or directory")
        return
    dirs.append(dest)
    for top, subdirs, names in os.walk(resolved, followlinks=False, onerror=lambda e: problems.append(
        f"{field}: {given!r}: cannot read {e.filename}: {e.strerror}"
    )):
        subdirs[:] = sorted(d for d in subdirs if not _ignored(d))
        relative_top = Path(top).relative_to(resolved)
        for name in sorted(subdirs) + sorted(n for n in names if not _ignored(n)):
            entry = Path(top) / name
            shown = f"{given}/{relative_top / name}" if str(relative_top) != "." else f"{given}/{name}"
            problem = _entry(field, shown, entry, dest / relative_top / name, base, allow_outside, budget, dirs, files)
            if problem:
                problems.append(problem)
                return


def _entry(
    field: str, shown: str, entry: Path, dest: PurePosixPath, base: Path, allow_outside: bool, budget: _Budget,
    dirs: list[PurePosixPath], files: list[ShippedFile],
) -> str | None:
    """Check one entry found inside a shipped directory; an error line, or None when it was listed."""
    try:
        info = os.lstat(entry)
        source = entry
        if stat.S_ISLNK(info.st_mode):
            source = entry.resolve(strict=True)
            outside = _outside(source, base, allow_outside, field, shown)
            if outside:
                return outside
            info = os.stat(source)
            if stat.S_ISDIR(info.st_mode):
                return f"{field}: {shown!r} is a symlink to a directory; ship the directory itself"
    except FileNotFoundError:
        return f"{field}: {shown!r} is a broken symlink"
    except (OSError, RuntimeError) as exc:
        return f"{field}: {shown!r} cannot be read: {getattr(exc, 'strerror', None) or exc}"
    if stat.S_ISDIR(info.st_mode):
        dirs.append(dest)
        return None
    if not stat.S_ISREG(info.st_mode):
        return f"{field}: {shown!r} is {_kind(info.st_mode)}, not a regular file or directory"
    error = budget.spend(info.st_size, repr(shown))
    if error:
        return error
    files.append(ShippedFile(source, dest, info.st_size, stat.S_IMODE(info.st_mode)))
    return None


def _outside(resolved: Path, base: Path, allow_outside: bool, field: str, given: str) -> str | None:
    if allow_outside or resolved.is_relative_to(base):
        return None
    return (
        f"{field}: {given!r} resolves to {resolved}, outside the spec's directory {base}; "
        f"move it inside, or pass {_FLAG}"
    )


def _ignored(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in IGNORED)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a fifo"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _size(count: int) -> str:
    for unit, name in ((1 << 30, "GiB"), (1 << 20, "MiB")):
        if count >= unit:
            return f"{count / unit:g} {name}"
    return f"{count} bytes"


def copy_app_files(shipped: ShippedFiles, out_dir: Path) -> list[Path]:
    """Copy what ``check_app_files`` listed into ``out_dir``; returns the top-level paths written.

    Each file is opened without following a last symlink and must still be a regular file; no more bytes are copied
    than were counted (a file that grew since the check is cut there, a special file swapped in is refused).
    """
    for directory in shipped.dirs:
        (out_dir / directory).mkdir(parents=True, exist_ok=True)
    for item in shipped.files:
        target = out_dir / item.dest
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            _copy_bounded(item, target)
        except OSError as exc:
            raise SpecError(f"{item.dest.parts[0]}: cannot copy {str(item.source)!r}: {exc.strerror or exc}") from None
    tops = dict.fromkeys(PurePosixPath(*p.parts[:2]) for p in (*shipped.dirs, *(f.dest for f in shipped.files)))
    return [out_dir / top for top in tops]


def _copy_bounded(item: ShippedFile, target: Path) -> None:
    source = os.open(item.source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(source).st_mode):
            raise OSError(f"{item.source} is no longer a regular file")
        with open(target, "wb") as out:
            left = item.size
            while left > 0:
                chunk = os.read(source, min(left, 1 << 20))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
        os.chmod(target, item.mode & 0o777)
    finally:
        os.close(source)
