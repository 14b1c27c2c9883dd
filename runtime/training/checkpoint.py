"""Atomic training checkpoints: one ``checkpoint.npz`` per directory, replaced whole or not at all.

The arrays and a JSON header go to a temporary file in the same directory, which is flushed, fsynced and then
``os.replace``d over the previous checkpoint (atomic on POSIX), and the directory entry is fsynced. A run killed
at any moment leaves either the old or the new checkpoint, never a torn one; stale temporary files are ignored.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from runtime.atomic import write_atomic
from runtime.training.config import TrainingError

CHECKPOINT_FILE = "checkpoint.npz"
FORMAT_VERSION = 1
_HEADER = "__header__"


def checkpoint_path(directory: str | os.PathLike[str]) -> Path:
    return Path(directory) / CHECKPOINT_FILE


def save_checkpoint(
    directory: str | os.PathLike[str], arrays: Mapping[str, np.ndarray], header: Mapping[str, Any]
) -> Path:
    """Write ``arrays`` (names are free text) and a JSON-serialisable ``header`` atomically; return the path."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    names = list(arrays)
    meta = {**header, "format": FORMAT_VERSION, "arrays": names}
    payload: dict[str, np.ndarray] = {f"a{i}": np.asarray(arrays[name]) for i, name in enumerate(names)}
    payload[_HEADER] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    final = write_atomic(folder / CHECKPOINT_FILE, lambda f: np.savez(f, **payload))  # type: ignore[arg-type]
    _fsync_dir(folder)
    return final


def load_checkpoint(directory: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(arrays, header)`` of the checkpoint in ``directory``; TrainingError when missing or unreadable."""
    path = checkpoint_path(directory)
    if not path.is_file():
        raise TrainingError(f"no checkpoint in {str(directory)!r} (expected {CHECKPOINT_FILE})")
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(bytes(data[_HEADER]).decode("utf-8"))
            arrays = {name: data[f"a{i}"] for i, name in enumerate(meta["arrays"])}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise TrainingError(f"checkpoint {str(path)!r} is unreadable: {type(exc).__name__}: {exc}") from None
    if meta.get("format") != FORMAT_VERSION:
        raise TrainingError(f"checkpoint {str(path)!r} has format {meta.get('format')}, expected {FORMAT_VERSION}")
    return arrays, meta


def has_checkpoint(directory: str | os.PathLike[str] | None) -> bool:
    return directory is not None and checkpoint_path(directory).is_file()


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
