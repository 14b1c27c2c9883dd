"""TVM MetaSchedule tuning: a model's schedules searched with a trial budget, the records kept in a directory.

``tuned_executable`` legalises and fuses the model to TIR as relax's ``static_shape_tuning`` pipeline does, searches
schedules for its tuning tasks (the fused TIR functions) with MetaSchedule (``tune_relax``: evolutionary search
guided by the XGBoost cost model, each candidate built by a ``LocalBuilder`` and timed by a ``LocalRunner``) until
``trials`` candidates were measured, and compiles the model with the best ones found (``MetaScheduleApplyDatabase``,
then ``tvm.compile``, whose default pipeline schedules what was left untuned).

A directory holds one search: MetaSchedule's JSON database and ``tuning.json`` (the search's wall time, the trials,
the versions), written last, so an interrupted search is searched again. Benchmarks keep these per host and model
(``benchmarks.engines.tvm_tuning``); an image's build stage tunes into its compiled directory
(``compile_to_dir(..., trials=N)`` in ``runtime.engine_tvm``), so the final stage ships the records it ran with.

Pitfalls met (TVM 0.27): the ``LocalBuilder``'s default 30 s timeout killed every build on a loaded 2-core host,
so builds get ``BUILD_TIMEOUT_S``; MetaSchedule needs ``apache-tvm[all]``'s psutil and xgboost; apache-tvm-ffi
0.1.15.post2 segfaults in ``ToJSONGraph`` on the first record (``BROKEN_FFI``); the ``LocalRunner`` loads each
candidate by linking it with a C compiler, so where none is on PATH the search links with the ziglang wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from runtime.engine_base import require

#: Seconds one candidate may take to build (TVM's default, 30 s, killed every build on a loaded 2-core host).
BUILD_TIMEOUT_S = 300.0
#: Seconds one candidate may take to run its timing repeats.
RUN_TIMEOUT_S = 60.0
#: apache-tvm-ffi releases whose ``ToJSONGraph`` segfaults when MetaSchedule writes its first record (the whole
#: process dies, so the tuned route refuses to start on them; the ``tvm`` extra pins one that works).
BROKEN_FFI = frozenset({"0.1.15.post2"})
#: What marks a finished search in its directory (written last: an interrupted search is searched again).
TUNING_FILE = "tuning.json"
#: How the budget is spent, recorded in ``tuning.json``: records of another policy are searched again.
#: ``spread``: the trials are split evenly over the tuning tasks (at most 64 per round). With one round of
#: ``min(64, trials)`` trials (the first policy), a 32-trial budget went to the first task alone, a small matmul of
#: LeNet-5, and its convolutions stayed untuned.
SEARCH_POLICY = "spread"


@dataclass(frozen=True)
class TuningResult:
    """A tuned executable with how its records came about."""

    executable: Any
    tune_s: float
    trials: int
    cached: bool
    work_dir: Path


def cached_search(work_dir: Path) -> dict[str, Any] | None:
    """The finished search's ``tuning.json`` in ``work_dir``, or None when there is none (or it is unreadable)."""
    try:
        meta = json.loads((work_dir / TUNING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("policy") != SEARCH_POLICY:
        return None
    return meta if isinstance(meta.get("tune_s"), (int, float)) else None


def with_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    """A copy of ``model`` whose graph inputs have ``batch`` as a symbolic (or unset) leading dimension."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    constant = {init.name for init in fixed.graph.initializer}
    for vi in fixed.graph.input:
        dims = vi.type.tensor_type.shape.dim
        if vi.name not in constant and dims and not (dims[0].HasField("dim_value") and dims[0].dim_value > 0):
            dims[0].Clear()
            dims[0].dim_value = batch
    return fixed


@contextmanager
def candidate_linker() -> Iterator[None]:
    """While searching, ``CC`` names a ``zig cc`` wrapper when no C compiler is on PATH (a slim image's build
    stage): the ``LocalRunner`` links every candidate into a shared library before it times it."""
    from tvm.support import cc

    if cc.get_cc() is not None:
        yield
        return
    require("ziglang", "tvm")
    with tempfile.TemporaryDirectory(prefix="appopt-zigcc-") as tmp:
        wrapper = Path(tmp) / "zigcc"
        # -nostdlib: the candidate's few libc calls resolve against the process that loads it (runtime.engine_tvm)
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ziglang cc -nostdlib "$@"\n', encoding="utf-8")
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        saved = os.environ.get("CC")
        os.environ["CC"] = str(wrapper)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop("CC", None)
            else:
                os.environ["CC"] = saved


def cpu_tensor_intrinsics() -> None:
    """Register the CPU tensor intrinsics (x86, Arm) that MetaSchedule's schedules for an LLVM target may use,
    without the rest: ``tvm.s_tir.tensor_intrin`` parses every target's in TVMScript (CUDA's hundreds), 40-45 s a
    process on a 2-core Xeon. The CPU modules are loaded under an empty package of that name, so later imports of
    the package (MetaSchedule's tune context and default build) find it loaded; a submodule asked for by name
    (``...tensor_intrin.cuda``) still loads."""
    import importlib
    import types

    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    if name in sys.modules:
        return
    package = types.ModuleType(name)
    package.__path__ = [str(Path(tvm.s_tir.__file__).parent / "tensor_intrin")]
    sys.modules[name] = package
    for module in ("x86", "arm_cpu"):
        setattr(package, module, importlib.import_module(f"{name}.{module}"))


def cpu_candidate_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default candidate build with only the CPU tensor intrinsics registered: the
    ``LocalBuilder`` starts fresh processes for every round of the search, and its default build imports every
    target's intrinsics in each (``cpu_tensor_intrinsics``). Runs in the builder's processes."""
    from tvm.driver import build as tvm_build
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    cpu_tensor_intrinsics()
    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm_build(mod, target=target)


def tuned_executable(model: onnx.ModelProto, threads: int | None, trials: int, work_dir: Path,
                     about: dict[str, Any] | None = None) -> TuningResult:
    """The Relax executable of ``model`` with MetaSchedule schedules found in ``trials`` trials on this host, from
    ``work_dir``'s records when a search finished there before (``about`` goes into its ``tuning.json``)."""
    tvm = require("tvm", "tvm")
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir import meta_schedule as ms

    from runtime.engine_tvm import llvm_target

    if trials < 1:
        raise ValueError(f"the tuning budget must be at least 1 trial, got {trials}")
    target = llvm_target(threads)
    with target:  # what relax's static_shape_tuning pipeline does before its search: legalise and fuse to TIR
        module = tvm.transform.Sequential([
            relax.transform.DecomposeOpsForInference(),
            relax.transform.CanonicalizeBindings(),
            relax.pipeline.zero_pipeline(),
        ])(from_onnx(model, keep_params_in_input=False))
    meta = cached_search(work_dir)
    cached = meta is not None
    if meta is None:
        shutil.rmtree(work_dir, ignore_errors=True)  # an interrupted search's half-written records
        work_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        cpu_tensor_intrinsics()  # (the search's tune contexts import them)
        tasks = len(ms.relax_integration.extract_tasks(module, target))
        per_round = max(1, min(64, trials // max(tasks, 1)))  # every task gets its share of the budget
        with candidate_linker():
            ms.relax_integration.tune_relax(
                module, {}, target, str(work_dir), max_trials_global=trials,
                num_trials_per_iter=per_round,
                builder=ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S, f_build=cpu_candidate_build),
                runner=ms.runner.LocalRunner(timeout_sec=RUN_TIMEOUT_S),
                seed=0,
            )
        meta = {"tune_s": time.perf_counter() - started, "trials": trials, "threads": threads, "tasks": tasks,
                "trials_per_round": per_round, "policy": SEARCH_POLICY, "tvm": str(tvm.__version__),
                **(about or {})}
        (work_dir / TUNING_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    with target:  # the search's best schedules replace the fused functions it tuned; DLight schedules the rest
        tuned = relax.transform.MetaScheduleApplyDatabase(str(work_dir))(module)
    executable = tvm.compile(tuned, target=target)
    return TuningResult(executable, float(meta["tune_s"]), trials, cached, work_dir)
