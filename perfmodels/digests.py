"""Content digests of data files (the keys of every cache fitted from them), hashed once per file version.

A plan needs the shipped database's digest several times (the unit models' cache directory, the fitted model's
cache, the stored held-out figures). Hashing it costs milliseconds each time, so the digest is kept per process,
keyed by what ``stat`` says of the file (size, modification and change times, inode): any write to the file changes
one of them, and the file is hashed again.

Example::

    >>> file_digest(Path("benchmarks/results/default.csv.gz"))[:16]      # doctest: +SKIP
    'c2a74d06451f420c'
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_DIGESTS: dict[tuple[str, int, int, int, int], str] = {}


def _stat_key(path: Path) -> tuple[str, int, int, int, int]:
    st = os.stat(path)
    return (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def file_digest(path: Path) -> str:
    """The SHA-256 (hex) of ``path``'s bytes; OSError when it cannot be read."""
    key = _stat_key(path)
    digest = _DIGESTS.get(key)
    if digest is None:
        with open(path, "rb") as handle:
            digest = hashlib.file_digest(handle, "sha256").hexdigest()
        if _stat_key(path) == key:  # not written while it was read
            _DIGESTS[key] = digest
    return digest
