"""Engines on the benchmark side: every runtime engine module's record (``runtime.engines.all_engines``) made into
an ``EngineSpec`` with its generic backend, plus the modules of this package, found by scanning it.

Most engines need nothing here: ``runtime/engine_<name>.py`` declares its catalog ids, wheels, extra, image runner and
an in-process compile, and ``RuntimeEngineBackend`` measures it. A module here is for benchmark code of an engine's
own, and exports one of:

- ``BACKENDS = EngineBackends(engine, backends)``: backends added to a runtime engine (``onnxruntime``: optimisation
  levels, dynamic int8, the profiler's reorder time; ``tvm_tuning``: ``tvm-tuned`` with its searches cached per host);
- ``ENGINE = EngineSpec(...)``: a whole engine that has no image runner (``torch_compile``).

Example::

    >>> [spec.name for spec in all_engines()]  # doctest: +SKIP
    ['onnxruntime', 'openvino', 'tvm', 'iree', 'torch-compile', 'jax']
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Callable

from benchmarks.engines.base import Backend, EngineBackends, EngineSpec, RuntimeEngineBackend
from runtime.engine_base import Engine
from runtime.engines import all_engines as runtime_engines
from runtime.engines import image_engine

#: Modules of this package that are not engines.
NOT_ENGINES = frozenset({"base"})


@functools.cache
def _package_modules() -> tuple[tuple[EngineSpec, ...], tuple[EngineBackends, ...]]:
    """The ``ENGINE`` and ``BACKENDS`` records this package's modules export (scanned once)."""
    import benchmarks.engines as package

    engines: list[EngineSpec] = []
    added: list[EngineBackends] = []
    for info in pkgutil.iter_modules(package.__path__):
        if info.ispkg or info.name in NOT_ENGINES:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if isinstance(getattr(module, "ENGINE", None), EngineSpec):
            engines.append(module.ENGINE)
        if isinstance(getattr(module, "BACKENDS", None), EngineBackends):
            added.append(module.BACKENDS)
    return tuple(engines), tuple(added)


def rescan() -> None:
    """Scan this package and the runtime's engine modules again on next use."""
    import runtime.engines

    _package_modules.cache_clear()
    runtime.engines.rescan()


def from_runtime(engine: Engine, added: list[Callable[[], list[Backend]]]) -> EngineSpec:
    """A runtime engine module's record as an ``EngineSpec``: its generic backend (if it declares a benchmark)
    followed by the backends ``added`` by modules of this package."""

    def backends() -> list[Backend]:
        generic: list[Backend] = [RuntimeEngineBackend(engine)] if engine.benchmark is not None else []
        return generic + [backend for make in added for backend in make()]

    return EngineSpec(name=engine.name, framework=engine.framework, compilers=engine.compilers, pip=engine.pip,
                      extra=engine.extra, image_engine=engine.name, backends=backends, order=engine.order)


def all_engines() -> list[EngineSpec]:
    """Every engine's spec, by ``order`` (reading them imports no engine package)."""
    own, added = _package_modules()
    from_runtime_modules = runtime_engines()
    unknown = [extra.engine for extra in added if extra.engine not in from_runtime_modules]
    if unknown:
        raise ValueError(f"benchmarks.engines adds backends to {unknown}, which no runtime engine module declares")
    specs = [from_runtime(engine, [extra.backends for extra in added if extra.engine == name])
             for name, engine in from_runtime_modules.items()]
    return sorted([*specs, *own], key=lambda spec: spec.order)


__all__ = ["EngineBackends", "EngineSpec", "all_engines", "from_runtime", "image_engine", "rescan"]
