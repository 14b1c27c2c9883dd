"""Engines ``python -m runtime run`` can run a model with: this runtime (``appopt``) and every engine module
``runtime/engine_<name>.py`` that exports an ``ENGINE`` record (onnxruntime, and the graph compilers OpenVINO, TVM,
IREE and XLA through JAX, for the plans that chose them).

An image built for another engine's route carries this package too, so it runs the model the same way (inputs from
files or seeded random data, output summaries, latency) with ``--engine X``. Each engine's runner is a
``ModelRunner``: declared inputs, output names, ``run(feeds)``. The compiling engines (``compiled_engines()``) also
turn an ONNX file into a directory in an image's build stage (``python -m runtime compile --engine X``): the engine's
own artefact, an ``engine.json`` naming it, and ``io.onnx``, the model's inputs and outputs without its nodes or
weights, so the final stage declares them without the ONNX file.

The engine modules are found by scanning this package (``all_engines``), so a new engine is its module and its test
(``runtime.engine_base`` says what the module declares). Reading the records imports no engine package.
"""

from __future__ import annotations

import functools
import importlib
import os
import pkgutil
from pathlib import Path
from typing import Any

from runtime.engine_base import ENGINE_MANIFEST, SIGNATURE, Engine, ModelRunner, Search
from runtime.errors import RuntimeModelError

__all__ = ["ENGINE_MANIFEST", "SIGNATURE", "Engine", "ModelRunner", "all_engines", "compile_for_engine",
           "compiled_engines", "engine_names", "image_engine", "open_runner", "rescan", "tuning_engines"]

#: The prefix of an engine module's name in this package.
MODULE_PREFIX = "engine_"


@functools.cache
def all_engines() -> dict[str, Engine]:
    """Every engine module's record by engine name, in their declared order (the package is scanned once).

    A module named ``engine_*`` without ``ENGINE`` is a helper of an engine (``engine_tvm_tuning``)."""
    import runtime

    found: dict[str, Engine] = {}
    for info in pkgutil.iter_modules(runtime.__path__):
        if info.ispkg or not info.name.startswith(MODULE_PREFIX):
            continue
        engine = getattr(importlib.import_module(f"runtime.{info.name}"), "ENGINE", None)
        if engine is None:
            continue
        if not isinstance(engine, Engine):
            raise TypeError(f"runtime.{info.name}.ENGINE is {engine!r}, not a runtime.engine_base.Engine")
        if engine.name in found or engine.name == "appopt":
            raise ValueError(f"engine {engine.name!r} is declared twice (again by runtime.{info.name})")
        found[engine.name] = engine
    return {e.name: e for e in sorted(found.values(), key=lambda e: (e.order, e.name))}


def rescan() -> None:
    """Scan the package again on next use (after an engine module was added while running, e.g. in a test)."""
    all_engines.cache_clear()


def engine_names() -> tuple[str, ...]:
    """Every ``--engine`` value of ``python -m runtime run``: ``appopt`` first, then the engine modules'."""
    return ("appopt", *all_engines())


def compiled_engines() -> tuple[str, ...]:
    """Engines whose ``compile`` writes their own artefact (OpenVINO IR, a TVM shared library, an IREE ``.vmfb``)
    in the build stage."""
    return tuple(name for name, engine in all_engines().items() if engine.compile is not None)


def tuning_engines() -> tuple[str, ...]:
    """Engines whose ``compile`` may search schedules first with a trial budget (``--trials``: TVM's MetaSchedule)."""
    return tuple(name for name, engine in all_engines().items() if engine.compile is not None and engine.tunes)


def image_engine(framework: str, compiler: str) -> str | None:
    """The ``--engine`` value an image of the route ``framework`` + ``compiler`` runs an ONNX model with, or None when
    no engine module declares that route (``compiler`` "none" or "" for the framework alone)."""
    wanted = compiler or "none"
    return next((name for name, engine in all_engines().items()
                 if engine.framework == framework and wanted in engine.compilers), None)


def open_runner(engine: str, model: str | os.PathLike[str], threads: int | None) -> tuple[ModelRunner, str]:
    """A runner of ``engine`` (not ``appopt``) for an ONNX file or a compiled directory, and how to name it."""
    engines = all_engines()
    if engine not in engines:
        raise RuntimeModelError(f"--engine must be one of {', '.join(engine_names())}, not {engine!r}")
    runner = engines[engine].runner(model, threads)
    return runner, f"{engine} ({getattr(runner, 'describe', '')})"


def compile_for_engine(engine: str, model: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                       trials: int | None = None, batch: int | None = None) -> dict[str, Any]:
    """``python -m runtime compile --engine ENGINE``: the engine's artefact for ``model`` in ``out_dir`` (``trials``:
    the tuning search's budget, for engines that search: ``tvm``; ``batch``: the batch its static shapes fix,
    default 1)."""
    compile_step = all_engines()[engine].compile if engine in all_engines() else None
    if compile_step is None:
        raise RuntimeModelError(
            f"--engine {engine!r} has no compile step; compiling engines: appopt, {', '.join(compiled_engines())}"
        )
    if trials is not None and engine not in tuning_engines():
        raise RuntimeModelError(f"--trials: --engine {engine} has no tuning search; engines that search: "
                                f"{', '.join(tuning_engines())}")
    if batch is not None and trials is None:
        raise RuntimeModelError("--batch fixes the batch of a tuning search: it needs --trials")
    if not Path(model).is_file():
        raise RuntimeModelError(f"model {str(model)!r} does not exist")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return compile_step(model, out_dir, None if trials is None else Search(trials, 1 if batch is None else batch))
