"""Engines as plugins: one module per engine, each exporting an ``EngineSpec`` named ``ENGINE``.

Adding an engine means adding its module here (and to ``ENGINE_MODULES``) with its test: the module holds its catalog
ids, the wheels it needs and the extra that installs them, the benchmark ``Backend``s that load, compile and run a
model, and the ``python -m runtime run --engine`` value an image runs it with. ``benchmarks.backends`` builds its
registry from these.

Example::

    >>> [spec.name for spec in all_engines()]  # doctest: +SKIP
    ['onnxruntime', 'openvino']
"""

from __future__ import annotations

import importlib

from benchmarks.engines.base import EngineSpec

#: Engine modules under ``benchmarks.engines``, in registry order.
ENGINE_MODULES = ("onnxruntime", "openvino", "tvm", "iree", "torch_compile", "jax_xla")


def all_engines() -> list[EngineSpec]:
    """Every engine's spec (importing an engine module never imports the engine itself)."""
    return [importlib.import_module(f"benchmarks.engines.{name}").ENGINE for name in ENGINE_MODULES]


def image_engine(framework: str, compiler: str) -> str | None:
    """The ``python -m runtime run --engine`` value an image of the route ``framework`` + ``compiler`` runs an ONNX
    model with, or None when no engine module offers one (``compiler`` "none" or "" for the framework alone)."""
    wanted = compiler or "none"
    for spec in all_engines():
        if spec.framework == framework and wanted in spec.compilers and spec.image_engine is not None:
            return spec.image_engine
    return None


__all__ = ["ENGINE_MODULES", "EngineSpec", "all_engines", "image_engine"]
