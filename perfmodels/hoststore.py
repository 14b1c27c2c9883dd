"""The per-user store of this host's calibration measurements (``appopt calibrate`` writes it, plans read it).

One result database (``perfmodels.results_db``'s schema and provenance) per host key, in the XDG data directory:
``$XDG_DATA_HOME/appopt/hosts/<host-key>.csv`` (``~/.local/share/appopt/hosts/…`` when unset). The quick probe
that ``appopt plan`` runs on a host without one keeps its rows beside it, in ``<host-key>.quick.csv``. Rows are appended
with ``results_db.append_rows`` (one locked write per row, so a killed run loses at most its last row and a second
run adds to what the first left).

Example::

    >>> host_store_path()                                   # doctest: +SKIP
    PosixPath('/home/me/.local/share/appopt/hosts/intel-r-xeon-r-processor-2c.csv')
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from perfmodels.lazy import lazy_import
from perfmodels.results_db import HEADER_LINE, ResultsSchemaError, read_results
from perfmodels.targets import local_target_key

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)


class HostStoreError(ValueError):
    """The host store cannot be used as it is: the message is one line naming the file and what to do."""


def host_store_dir() -> Path:
    """``$XDG_DATA_HOME/appopt/hosts`` (``~/.local/share/appopt/hosts`` when unset)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "appopt" / "hosts"


def host_store_path(host_key: str | None = None) -> Path:
    """The store of ``host_key`` (default: this machine's target key)."""
    return host_store_dir() / f"{host_key or local_target_key()}.csv"


#: Suffix of the quick probe's store (``appopt plan`` on an uncalibrated host), next to the calibration's.
QUICK_SUFFIX = ".quick.csv"


def quick_store_path(host_key: str | None = None) -> Path:
    """Where ``appopt plan``'s quick probe keeps ``host_key``'s rows (default: this machine's), beside its store."""
    return host_store_dir() / f"{host_key or local_target_key()}{QUICK_SUFFIX}"


def is_quick_store(path: Path) -> bool:
    """Whether ``path`` holds a quick probe's rows rather than ``appopt calibrate``'s."""
    return path.name.endswith(QUICK_SUFFIX)


def plan_store() -> Path | None:
    """The store a plan on this host transfers the shipped models with: the calibration's, else the quick probe's,
    else None."""
    for path in (host_store_path(), quick_store_path()):
        if path.exists():
            return path
    return None


def read_store(path: Path) -> pd.DataFrame | None:
    """The store's rows (None when it does not exist yet); HostStoreError for a file that is not a results
    database of this schema version. Damaged rows are dropped by the reader, never rewritten."""
    if not path.exists():
        return None
    try:
        check_header(path)
        return read_results(path, warn=False)
    except ResultsSchemaError as error:
        raise HostStoreError(f"{error}") from None
    except (OSError, UnicodeError) as error:
        raise HostStoreError(f"{path}: cannot read the host store ({error.__class__.__name__}: {error})") from None


def check_header(path: Path) -> int:
    """The number of lines after the header (rows, damaged ones included) of a store whose first line is this
    schema's header; HostStoreError otherwise. Cheap: nothing is parsed."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline().decode("utf-8", errors="replace")
            rows = sum(1 for _ in handle)
    except OSError as error:
        raise HostStoreError(f"{path}: cannot read the host store ({error.__class__.__name__}: {error})") from None
    if first != HEADER_LINE:
        raise HostStoreError(
            f"{path}: not a results database of this appopt's schema (first line does not match); "
            "move it aside and calibrate again"
        )
    return rows


def check_writable(path: Path) -> None:
    """HostStoreError unless rows could be appended to ``path`` (its directory is created when missing)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise HostStoreError(f"{path.parent}: cannot create the host store's directory ({error.strerror})") from None
    try:
        if path.exists():
            with open(path, "ab"):  # opened for appending, nothing written
                pass
        else:
            with tempfile.TemporaryFile(dir=path.parent):
                pass
    except OSError as error:
        raise HostStoreError(
            f"{path}: not writable ({error.strerror}); pass --db PATH to store the calibration elsewhere"
        ) from None
    read_store(path)  # a damaged or foreign file is refused before anything is measured
