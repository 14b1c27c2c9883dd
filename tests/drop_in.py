"""A module dropped into one of our packages for one test: written to a folder added to the package's path, so the
package's scan finds it as a newcomer's module would be found, and removed afterwards."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType


@contextmanager
def dropped_module(package: ModuleType, name: str, text: str, folder: Path,
                   rescan: Callable[[], None]) -> Iterator[None]:
    """``package.name`` from ``text`` (in ``folder``) while the block runs; ``rescan`` clears the package's scan."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(text, encoding="utf-8")
    saved = list(package.__path__)
    package.__path__ = [*saved, str(folder)]
    rescan()
    try:
        yield
    finally:
        package.__path__ = saved
        sys.modules.pop(f"{package.__name__}.{name}", None)
        rescan()
