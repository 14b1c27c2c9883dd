"""TVM MetaSchedule tuning with a trial budget: backend ``tvm-tuned``, added to the ``tvm`` engine of
``runtime.engine_tvm``, the catalog's compiler ``tvm-tuned`` ("TVM (MetaSchedule-tuned)"), a route of its own beside
untuned ``tvm``, its records cached per model and host.

MetaSchedule tunes static shapes, so a session specialises the model per batch size (its dynamic batch dimension
fixed) and tunes each batch once, before that batch is measured (``batch_figures``). The search itself is
``runtime.engine_tvm_tuning.tuned_executable``, shared with the images, whose build stage tunes with the same budget.

The records live in ``$XDG_CACHE_HOME/appopt/tvm-tuning/<host key>/<model digest>-<trials>t/`` (MetaSchedule's JSON
database, plus ``tuning.json``: the search's wall time, the trials and the versions). A second session for the same
model, batch, host and budget compiles from them without searching again and reports the search's original time,
marked cached: the tuning time is a property of the model and the host, paid once. The budget is
``appopt bench run --tvm-trials N``, else ``APPOPT_TVM_TRIALS``, else ``DEFAULT_TRIALS``; every row records it
with the search's seconds (``tuning_trials``, ``tune_s``).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from benchmarks.engines.base import Backend, BackendSkipped, EngineBackends, RouteInfo, Session, missing, version
from runtime.engine_tvm_tuning import (
    BROKEN_FFI,
    TUNING_FILE,
    TuningResult,
    cached_search,
    tuned_executable,
    with_batch,
)

#: Default total trials (candidates measured over all tasks) when the caller names none.
DEFAULT_TRIALS = 64
#: The environment variable that sets ``tvm-tuned``'s trial budget (total candidates measured over all tasks).
TRIALS_ENV = "APPOPT_TVM_TRIALS"


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


def host_tuned_executable(model: onnx.ModelProto, threads: int, trials: int, host: str,
                          root: Path | None = None) -> TuningResult:
    """``tuned_executable`` with the records cached for ``model``, ``host`` and ``trials``."""
    return tuned_executable(model, threads, trials, work_dir_for(model, host, trials, root), {"host": host})


def trial_budget(environ: Mapping[str, str] | None = None) -> int:
    """``APPOPT_TVM_TRIALS`` as a positive trial count (``DEFAULT_TRIALS`` when unset); BackendSkipped naming the
    variable when it is not one."""
    text = (os.environ if environ is None else environ).get(TRIALS_ENV, "").strip()
    if not text:
        return DEFAULT_TRIALS
    if not text.isdigit() or int(text) < 1:
        raise BackendSkipped(f"{TRIALS_ENV}: the trial budget must be a whole number of at least 1, not {text!r}")
    return int(text)


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
                tuned = host_tuned_executable(with_batch(self._model, batch), self._threads, self._trials,
                                              self._host)
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
        from runtime.engine_tvm import run_vm

        batch = int(np.shape(feeds[self._input_names[0]])[0]) if self._input_names else 1
        self.batch_figures(batch)
        return run_vm(self._vms[batch], self._input_names, feeds)


class TvmTunedBackend(Backend):
    """TVM 0.27 Relax after a MetaSchedule search of ``APPOPT_TVM_TRIALS`` trials per batch size (records cached
    per model and host): the catalog's compiler ``tvm-tuned``, a route of its own."""

    name = "tvm-tuned"
    route = RouteInfo("onnxruntime", compiler="tvm-tuned", layout="NCHW")
    records_error = True

    def unavailable_reason(self) -> str | None:
        reason = missing("tvm", extra="tvm") or missing("xgboost", extra="tvm") or missing("psutil", extra="tvm")
        ffi = version("apache-tvm-ffi")
        if reason is None and ffi in BROKEN_FFI:
            reason = (f"apache-tvm-ffi {ffi} segfaults in ToJSONGraph when MetaSchedule saves a record; install "
                      "0.1.14.post0 (the 'tvm' extra pins it)")
        return reason

    def versions(self) -> dict[str, str]:
        return {"apache-tvm": version("apache-tvm"), "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        from perfmodels.targets import local_target_key

        return _TvmTunedSession(model, threads, trial_budget(), local_target_key())


#: ``tvm-tuned`` beside the ``tvm`` engine's untuned backend (``runtime.engine_tvm``).
BACKENDS = EngineBackends("tvm", lambda: [TvmTunedBackend()])

__all__ = ["BROKEN_FFI", "DEFAULT_TRIALS", "TRIALS_ENV", "TUNING_FILE", "TvmTunedBackend", "cached_search",
           "host_tuned_executable", "model_digest", "trial_budget", "tuning_root", "with_batch", "work_dir_for"]
