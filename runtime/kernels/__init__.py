"""All kernels: every module in this package registers its ops on import."""

from __future__ import annotations

import importlib
import pkgutil

from runtime.kernels.base import REGISTRY, Kernel, NodeContext, register, resolve, supported_ops

for _info in pkgutil.iter_modules(__path__):
    if _info.name != "base":
        importlib.import_module(f"{__name__}.{_info.name}")

__all__ = ["REGISTRY", "Kernel", "NodeContext", "register", "resolve", "supported_ops"]
