"""Modules imported when first used: pandas for the plan's start-up.

A plan whose fitted model comes from the disk cache (``perfmodels.fitted.PlanData``) never touches a DataFrame, yet
every module that fits or evaluates needs pandas, and importing it takes a fifth of a second. Those modules bind
``pd = lazy_import("pandas")``: the name is there at once, and pandas is imported the first time one of its
attributes is read (``importlib.util.LazyLoader``). Type checkers see a plain import (``if TYPE_CHECKING``).

Example::

    >>> pd = lazy_import("pandas")        # doctest: +SKIP
    >>> pd.DataFrame({"a": [1]})          # imported here
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType

_LOCK = threading.Lock()


def lazy_import(name: str) -> ModuleType:
    """The module ``name``, executed when one of its attributes is first read (already imported: that module)."""
    with _LOCK:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)
        return module
