"""TVM MetaSchedule tuning with a trial budget (backend ``tvm-tuned``), its records cached per model and host.

MetaSchedule tunes static shapes, so a session specialises the model per batch size (its dynamic batch dimension
fixed) and tunes each batch once, before that batch is measured (``batch_figures``). ``tuned_executable`` legalises
and fuses the model to TIR as relax's ``static_shape_tuning`` pipeline does, searches schedules for its tuning tasks
(the fused TIR functions) with MetaSchedule (``tune_relax``: evolutionary search guided by the XGBoost cost model,
each candidate built by a ``LocalBuilder`` and timed by a ``LocalRunner``) until ``trials`` candidates were
measured, and compiles the model with the best ones found (``MetaScheduleApplyDatabase``, then ``tvm.compile``,
whose default pipeline schedules what was left untuned).

The records live in ``$XDG_CACHE_HOME/appopt/tvm-tuning/<host key>/<model digest>-<trials>t/`` (MetaSchedule's JSON
database, plus ``tuning.json``: the search's wall time, the trials and the versions). A second session for the same
model, batch, host and budget compiles from them without searching again and reports the search's original time,
marked cached: the tuning time is a property of the model and the host, paid once. The budget is
``APPOPT_TVM_TRIALS`` (default ``DEFAULT_TRIALS``), recorded in every row with the search's seconds (``tune_s``).

Pitfalls met on the way (TVM 0.27): the ``LocalBuilder``'s default 30 s timeout killed every build on a loaded
2-core host, so builds get ``BUILD_TIMEOUT_S``; MetaSchedule needs ``apache-tvm[all]``'s psutil (the popen pools)
and xgboost (the cost model), which the ``tvm`` extra installs; apache-tvm-ffi 0.1.15.post2 segfaults in
``ToJSONGraph`` on the first record (``BROKEN_FFI``), 0.1.14.post0 does not.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.engines.base import BackendSkipped, Session, missing, version
from benchmarks.engines.tvm import TvmBackend

#: Seconds one candidate may take to build (TVM's default, 30 s, killed every build on a loaded 2-core host).
BUILD_TIMEOUT_S = 300.0
#: Seconds one candidate may take to run its timing repeats.
RUN_TIMEOUT_S = 60.0
#: Default total trials (candidates measured over all tasks) when the caller names none.
DEFAULT_TRIALS = 64
#: The environment variable that sets ``tvm-tuned``'s trial budget (total candidates measured over all tasks).
TRIALS_ENV = "APPOPT_TVM_TRIALS"
#: apache-tvm-ffi releases whose ``ToJSONGraph`` segfaults when MetaSchedule writes its first record (the whole
#: process dies, so the backend refuses to start on them; the ``tvm`` extra pins one that works).
BROKEN_FFI = frozenset({"0.1.15.post2"})
#: What marks a finished search in its directory (written last: an interrupted search is searched again).
TUNING_FILE = "tuning.json"


@dataclass(frozen=True)
class TuningResult:
    """A tuned executable with how its records came about."""

    executable: Any
    tune_s: float
    trials: int
    cached: bool
    work_dir: Path


def tuning_root() -> Path:
    """``$XDG_CACHE_HOME/appopt/tvm-tuning`` (``~/.cache`` when unset)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "appopt" / "tvm-tuning"


def model_digest(model: onnx.ModelProto) -> str:
    """The model's content digest (graph and weights): records of another model never apply."""
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()[:16]


def work_dir_for(model: onnx.ModelProto, host: str, trials: int, root: Path | None = None) -> Path:
    """Where the records of ``model`` tuned on ``host`` with ``trials`` trials live."""
    return (root or tuning_root()) / host / f"{model_digest(model)}-{trials}t"


def cached_search(work_dir: Path) -> dict[str, Any] | None:
    """The finished search's ``tuning.json`` in ``work_dir``, or None when there is none (or it is unreadable)."""
    try:
        meta = json.loads((work_dir / TUNING_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) and isinstance(meta.get("tune_s"), (int, float)) else None


def tuned_executable(model: onnx.ModelProto, threads: int, trials: int, host: str,
                     root: Path | None = None) -> TuningResult:
    """The Relax executable of ``model`` with MetaSchedule schedules found in ``trials`` trials on this host (from
    the cache when this model, host and budget were tuned before)."""
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx
    from tvm.s_tir import meta_schedule as ms

    from runtime.engine_tvm import llvm_target

    if trials < 1:
        raise ValueError(f"the tuning budget must be at least 1 trial, got {trials}")
    work_dir = work_dir_for(model, host, trials, root)
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
        ms.relax_integration.tune_relax(
            module, {}, target, str(work_dir), max_trials_global=trials,
            num_trials_per_iter=min(64, trials),
            builder=ms.builder.LocalBuilder(timeout_sec=BUILD_TIMEOUT_S),
            runner=ms.runner.LocalRunner(timeout_sec=RUN_TIMEOUT_S),
            seed=0,
        )
        meta = {"tune_s": time.perf_counter() - started, "trials": trials, "threads": threads, "host": host,
                "tvm": str(tvm.__version__)}
        (work_dir / TUNING_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    with target:  # the search's best schedules replace the fused functions it tuned; DLight schedules the rest
        tuned = relax.transform.MetaScheduleApplyDatabase(str(work_dir))(module)
    executable = tvm.compile(tuned, target=target)
    return TuningResult(executable, float(meta["tune_s"]), trials, cached, work_dir)


def trial_budget(environ: Mapping[str, str] | None = None) -> int:
    """``APPOPT_TVM_TRIALS`` as a positive trial count (``DEFAULT_TRIALS`` when unset); BackendSkipped naming the
    variable when it is not one."""
    text = (os.environ if environ is None else environ).get(TRIALS_ENV, "").strip()
    if not text:
        return DEFAULT_TRIALS
    if not text.isdigit() or int(text) < 1:
        raise BackendSkipped(f"{TRIALS_ENV}: the trial budget must be a whole number of at least 1, not {text!r}")
    return int(text)


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


class _TvmTunedSession:
    """One tuned Relax VM per batch size, each tuned (or compiled from cached records) before its first run."""

    def __init__(self, model: onnx.ModelProto, threads: int, trials: int, host: str) -> None:
        constant = {init.name for init in model.graph.initializer}
        self._model, self._threads, self._trials, self._host = model, threads, trials, host
        self._input_names = [vi.name for vi in model.graph.input if vi.name not in constant]
        self._vms: dict[int, Any] = {}
        self._figures: dict[int, dict[str, Any]] = {}
        first = self.batch_figures(1)  # the batch-1 search at prepare: a model it cannot tune is skipped now
        self.compile_ms, self.tune_s = first["compile_ms"], first["tune_s"]
        self.tuning_trials, self.tuning_cached = trials, first["tuning_cached"]

    def batch_figures(self, batch: int) -> dict[str, Any]:
        """The search and compile behind ``batch``'s VM (tuning it now when it was not yet): ``tune_s``,
        ``tuning_trials``, ``tuning_cached`` and ``compile_ms``."""
        if batch not in self._vms:
            import tvm
            from tvm import relax

            from runtime.engine_tvm import set_threads

            started = time.perf_counter()
            try:
                tuned = tuned_executable(with_batch(self._model, batch), self._threads, self._trials, self._host)
            except Exception as error:  # the importer's, MetaSchedule's and the builders' errors alike: a row
                text = str(error).strip()
                first = text.splitlines()[0][:300] if text else ""
                raise BackendSkipped(f"tvm-tuned cannot tune the model: {type(error).__name__}: {first}") from None
            elapsed_ms = (time.perf_counter() - started) * 1e3
            set_threads(self._threads)
            self._vms[batch] = relax.VirtualMachine(tuned.executable, tvm.cpu())
            # the compile is what it took besides a search run now (from cached records, only the compile)
            compile_ms = elapsed_ms if tuned.cached else max(elapsed_ms - tuned.tune_s * 1e3, 0.0)
            self._figures[batch] = {"tune_s": tuned.tune_s, "tuning_trials": tuned.trials,
                                    "tuning_cached": tuned.cached, "compile_ms": compile_ms}
        return dict(self._figures[batch])

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        import tvm

        batch = int(np.shape(feeds[self._input_names[0]])[0]) if self._input_names else 1
        self.batch_figures(batch)
        args = (tvm.runtime.tensor(np.ascontiguousarray(feeds[n])) for n in self._input_names)
        result = self._vms[batch]["main"](*args)
        outputs = result if isinstance(result, (list, tuple)) or type(result).__name__ == "Array" else [result]
        return [np.asarray(out.numpy()) for out in outputs]


class TvmTunedBackend(TvmBackend):
    """TVM 0.27 Relax after a MetaSchedule search of ``APPOPT_TVM_TRIALS`` trials per batch size (records cached
    per model and host)."""

    name = "tvm-tuned"

    def unavailable_reason(self) -> str | None:
        reason = missing("tvm", extra="tvm") or missing("xgboost", extra="tvm") or missing("psutil", extra="tvm")
        ffi = version("apache-tvm-ffi")
        if reason is None and ffi in BROKEN_FFI:
            reason = (f"apache-tvm-ffi {ffi} segfaults in ToJSONGraph when MetaSchedule saves a record; install "
                      "0.1.14.post0 (the 'tvm' extra pins it)")
        return reason

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from perfmodels.targets import local_target_key

        return _TvmTunedSession(model, threads, trial_budget(), local_target_key())
