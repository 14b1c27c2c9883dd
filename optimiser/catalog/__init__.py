"""The catalog: frameworks, graph compilers, primitive libraries, hardware presets and model architectures.

Typical use::

    >>> from optimiser.catalog import load_catalog
    >>> catalog = load_catalog()
    >>> catalog.get_framework("torch").id            # ids and aliases, case/-/_ insensitive
    'pytorch'
    >>> catalog.get_compiler("xla").modes_with("tensorflow")
    ['training', 'inference']
    >>> catalog.get_hardware("a100").peak("fp16")
    312000000000000.0

Unknown ids raise ``CatalogError`` with a "did you mean"; ``get_hardware("local")`` detects the running machine.
A user catalog (``load_catalog(Path("my-catalog"))``) adds entries or overrides shipped ones field by field.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from optimiser.catalog.loader import SECTIONS, build_catalog, read_catalog, read_raw, shipped_data
from optimiser.catalog.models import (
    Arch,
    Architecture,
    Catalog,
    Compiler,
    Component,
    DeviceKey,
    Framework,
    Hardware,
    Install,
    Layout,
    Library,
    Mode,
    Precision,
    Section,
    Source,
    Speedup,
    Status,
    Vendor,
    did_you_mean,
    install_key,
)
from optimiser.errors import CatalogError

__all__ = [
    "SECTIONS",
    "Arch",
    "Architecture",
    "Catalog",
    "CatalogError",
    "Compiler",
    "Component",
    "DeviceKey",
    "Framework",
    "Hardware",
    "Install",
    "Layout",
    "Library",
    "Mode",
    "Precision",
    "Section",
    "Source",
    "Speedup",
    "Status",
    "Vendor",
    "build_catalog",
    "did_you_mean",
    "install_key",
    "load_catalog",
    "read_catalog",
    "read_raw",
    "shipped_data",
]


def load_catalog(extra: Path | str | None = None) -> Catalog:
    """The shipped catalog, optionally overlaid with a user catalog directory (or file); cached per path.

    Raises ``CatalogError`` (one line per problem: schema errors with file and line, unresolved cross-references)
    when the data is inconsistent. Treat the result as read-only: it is shared between callers.
    """
    key = str(Path(extra).resolve()) if extra is not None else None
    return _load_cached(key)


@lru_cache(maxsize=8)
def _load_cached(extra: str | None) -> Catalog:
    return read_catalog(Path(extra) if extra is not None else None)


load_catalog.cache_clear = _load_cached.cache_clear  # type: ignore[attr-defined]
