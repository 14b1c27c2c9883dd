"""The fitted performance model the planner uses: measurements where the database has them, the prior elsewhere.

``load_default_model()`` fits from the shipped result database (``benchmarks/results/default.csv``) once per process
(keyed by the file's path and modification time) and returns a ``PerformanceModel``. For each candidate route:

* target has measurements for the route's framework → fitted (``basis: fitted:<target>``). When the route differs
  from what was measured only in precision, layout or compiler, the nearest measured route is scaled by the prior's
  ratio between the two (``basis: fitted:<target> x prior(<what differs>)``);
* a CPU nothing measured or calibrated (a catalog preset; ``local`` planned without its quick probe; several
  CPUs) → the fit on the measured host of its instruction set, carried by the prior's ratio between the machines
  (``basis: transferred:<target> via descriptors (...) of fitted:<target> ...``; ``perfmodels.descriptor_transfer``);
* otherwise (an unmeasured framework or instruction set, training, a GPU) → the roofline prior
  (``basis: roofline-prior``);
* the workload has a graph (an ONNX model: ``Workload.units``) and the route was swept kernel by kernel
  (``perfmodels.unitfit``) → a weighted geometric mean of the whole-model fit and the sum of the model's kernel units
  (the fit weighs less where its estimate is mostly learned overheads), or at int8 the unit sum alone
  (``basis: fitted:<target> + kernel units``; ``unitfit.combine``), the combination ``appopt models evaluate``
  scores;
* ``local`` on a host whose kernel ISA differs from the measured one's (one CPU model name, another host: a VM
  with or without AMX) → the same, with the difference named (``basis: fitted:<target> (another host: measured with
  amx_tile, which this CPU lacks)``): such hosts run kernels at other speeds;
* a workload far smaller than anything the route was measured on (``GroupFit.below_range``: its time would be
  mostly per-query and per-node overhead the group could not have learned) → the prior in the fit's place: combined
  with the kernel units where there are some (``basis: kernel units:<target> + roofline-prior (below the fitted
  range of <target>)``), else alone (``basis: roofline-prior (below the fitted range of <target>)``), as
  ``appopt models evaluate`` scores it.

Groups with too few rows or families (``GroupFit.usable``) are never used.

Example::

    >>> from optimiser.planner import make_plan                        # doctest: +SKIP
    >>> plan = make_plan(spec, model=load_default_model())            # doctest: +SKIP
    >>> plan.choice.prediction.basis                                   # doctest: +SKIP
    'fitted:intel-r-xeon-r-processor-2c'
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from perfmodels.calibration import Calibration, calibration_from, timed_units
from perfmodels.compiler_ratio import RATIO_WEIGHT, through_framework
from perfmodels.descriptor_transfer import carried, descriptor_sources, source_device
from perfmodels.digests import file_digest
from perfmodels.evaluate import Evaluation, leave_one_architecture_out, scores
from perfmodels.features import Device, Route, Workload
from perfmodels.fit import BYTE_FEATURES, FLOP_FEATURES, FitResult, GroupFit, fit, workload_features
from perfmodels.gpu_fit import GpuFit, GpuRow, gpu_rows
from perfmodels.hostfit import HostFit, host_fit, host_prediction
from perfmodels.in_graph import InGraph, as_compiled, fit_in_graphs, row_parts, unit_parts
from perfmodels.lazy import lazy_import
from perfmodels.op_mix import RouteKey, coverage, exercised_by_route
from perfmodels.prediction import PerformanceModel, Prediction
from perfmodels.priors import layout_factor
from perfmodels.results_db import cpu_rows
from perfmodels.roofline import RooflinePrior
from perfmodels.setup_time import CompileRates, compile_rates
from perfmodels.targets import (
    host_difference,
    local_kernel_flags,
    local_target_key,
    nearest_host,
    target_key,
    usable_cores,
)
from perfmodels.training_fit import CalibratedHost, TrainingFit, fit_for, training_prediction
from perfmodels.training_intervals import TrainingResiduals
from perfmodels.unitfit import Key, UnitFit, cache_dir_for, combine, fit_units, sweep_rows, whole_weight

if TYPE_CHECKING:
    import pandas as pd

    from analysis.units import Unit
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

#: Device names that mean "the machine we are running on".
LOCAL_NAMES = ("local",)


@dataclass(frozen=True)
class HeldOutFigures:
    """The fitted model's leave-one-architecture-out scores, as the plan report shows them."""

    rmspe: float
    within_10pct: float
    spearman: float
    mean_regret: float
    max_regret: float
    predictions: int
    families: int
    #: 10th and 90th percentiles of measured / predicted over the held-out predictions: a prediction's p10-p90
    #: interval is its step times these (NaN in summaries written before they were stored).
    p10_ratio: float = float("nan")
    p90_ratio: float = float("nan")

    @classmethod
    def from_evaluation(
        cls, evaluation: Evaluation, precision: str | None = None, compiler: str | None = None
    ) -> HeldOutFigures:
        """The overall figures, or those of one precision's predictions, or of one precision's routes through one
        graph compiler (``none``: the frameworks alone)."""
        rows = evaluation.predictions
        s = evaluation.fitted
        if precision is not None:
            rows = rows[rows["precision"] == precision]
            s = evaluation.by_precision()[precision]
        if compiler is not None:
            rows = rows[rows["compiler"] == compiler]
            s = scores(rows, "predicted")
        families = int(rows["family"].nunique())
        ratio = (rows["y"].astype(float) / rows["predicted"].astype(float)).to_numpy()
        ratio = ratio[np.isfinite(ratio)]
        p10, p90 = (float(q) for q in np.quantile(ratio, [0.1, 0.9])) if len(ratio) else (np.nan, np.nan)
        return cls(s.rmspe, s.within_10pct, s.spearman, s.mean_regret, s.max_regret, s.predictions, families, p10, p90)

    def as_detail(self, step_s: float | None = None) -> dict[str, float]:
        """``Prediction.detail`` entries (``heldout_*``), and with ``step_s`` its ``p10_step_s``/``p90_step_s``."""
        detail = {
            f"heldout_{k}": float(v) for k, v in asdict(self).items() if not np.isnan(float(v)) or "ratio" not in k
        }
        if step_s is not None and np.isfinite(self.p10_ratio) and np.isfinite(self.p90_ratio):
            detail.update(p10_step_s=step_s * self.p10_ratio, p90_step_s=step_s * self.p90_ratio)
        return detail


def evaluation_path(db: Path) -> Path:
    """The evaluation summary written next to a database (``default.csv`` → ``default.evaluation.json``)."""
    return db.with_suffix(".evaluation.json")


def _digest(path: Path) -> str:
    return file_digest(path)  # hashed once per version of the file (perfmodels.digests)


def write_evaluation_summary(db: Path, evaluation: Evaluation, training: TrainingResiduals | None = None) -> Path:
    """Store the held-out figures of ``db``'s fitted model next to it, keyed by the database's checksum, so plans
    can show them without refitting (``appopt models evaluate`` and ``bench record-default`` write it); with
    ``training``, the training steps' held-out bands too (``perfmodels.training_intervals``)."""
    out = evaluation_path(db)
    payload = {
        "db": db.name,
        "db_sha256": _digest(db),
        "fitted": asdict(HeldOutFigures.from_evaluation(evaluation)),
        "by_precision": {
            p: asdict(HeldOutFigures.from_evaluation(evaluation, p)) for p in sorted(evaluation.by_precision())
        },
        "by_compiler": {
            route_kind(p, c): asdict(HeldOutFigures.from_evaluation(evaluation, p, c))
            for p, c in _compiler_groups(evaluation)
        },
        "lines": evaluation.lines(),
        "route_errors": {"|".join(route_error_key(k)): list(errors) for k, errors in evaluation.route_errors.items()},
        **({} if training is None else {"training_residuals": training.as_json()}),
    }
    out.write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out


RouteErrors = dict[tuple[str, ...], tuple[float, float]]


def route_kind(precision: str, compiler: str) -> str:
    """The key of one precision's routes through one graph compiler among the held-out figures."""
    return f"{precision}|{compiler}"


#: Held-out predictions a compiler's routes need before their figures stand apart from their precision's.
MIN_COMPILER_PREDICTIONS = 10


def _compiler_groups(evaluation: Evaluation) -> list[tuple[str, str]]:
    """(precision, compiler) pairs with enough held-out predictions for figures of their own: the whole-model-only
    compilers err far more than the routes with kernel units, and one overall error would widen every route's band."""
    counts = evaluation.predictions.groupby(["precision", "compiler"]).size()
    return [(str(p), str(c)) for (p, c), n in counts.items() if n >= MIN_COMPILER_PREDICTIONS]


@dataclass(frozen=True)
class StoredEvaluation:
    """What ``write_evaluation_summary`` kept next to a database, read back once: the held-out figures (``""`` →
    overall, else by precision) and each route's held-out (unit sum, whole-model) errors (None: not stored)."""

    figures: dict[str, HeldOutFigures]
    route_errors: RouteErrors | None
    #: The training steps' held-out bands (None: a summary written without them, or a damaged block).
    training: TrainingResiduals | None = None


def read_evaluation(db: Path) -> StoredEvaluation | None:
    """The evaluation summary stored next to ``db`` (None when missing, damaged or written for another version of
    the file). The database is hashed once (``perfmodels.digests`` keeps the digest per version of the file)."""
    try:
        payload = json.loads(evaluation_path(db).read_text(encoding="utf-8"))
        if payload.get("db_sha256") != _digest(db):
            return None
        figures = {"": HeldOutFigures(**payload["fitted"])}
        figures.update({p: HeldOutFigures(**f) for p, f in payload.get("by_precision", {}).items()})
        figures.update({k: HeldOutFigures(**f) for k, f in payload.get("by_compiler", {}).items()})
        errors = payload.get("route_errors")
        route_errors = (
            None if errors is None else {tuple(k.split("|")): (float(v[0]), float(v[1])) for k, v in errors.items()}
        )
        return StoredEvaluation(figures, route_errors, _training_residuals(payload.get("training_residuals")))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return None


def _training_residuals(payload: object) -> TrainingResiduals | None:
    """The stored training bands (None when absent or damaged: those plans show no training interval)."""
    if not isinstance(payload, dict):
        return None
    try:
        return TrainingResiduals.from_json(payload)
    except (TypeError, KeyError, ValueError, AttributeError):
        return None


def read_evaluation_summary(db: Path) -> dict[str, HeldOutFigures] | None:
    """The stored held-out figures of ``db``: ``""`` → overall, else by precision (``read_evaluation``)."""
    stored = read_evaluation(db)
    return None if stored is None else stored.figures


def route_error_key(key: tuple[object, ...]) -> tuple[str, ...]:
    """An evaluation's route key (target, framework, compiler, layout, precision, threads) as text."""
    *route, threads = key
    return (*(str(k) for k in route), str(int(float(str(threads)))))


class FittedModel:
    """A ``PerformanceModel`` backed by per-target fits, falling back to a prior."""

    def __init__(
        self,
        result: FitResult,
        prior: PerformanceModel | None = None,
        source: str = "",
        frame: pd.DataFrame | None = None,
        db: Path | None = None,
        store: Path | None = None,
    ) -> None:
        self.result = result
        #: This host's calibration store (``appopt calibrate``), read when a local prediction first needs it.
        self.store = store
        #: This host's calibration against each shipped host it was compared with (None: nothing comparable).
        self._calibrations: dict[str, Calibration | None] = {}
        self.prior = prior or RooflinePrior()
        self.source = source
        self.name = f"fitted ({source})" if source else "fitted"
        self._frame = frame
        self._db = db
        self._evaluation: Evaluation | None = None
        self._heldout: dict[str, HeldOutFigures] | None = None
        self._route_errors: RouteErrors | None = None
        self._stored: StoredEvaluation | bool | None = False
        self._host_fit: HostFit | bool | None = False
        self._units: UnitFit | None = None
        self._training: TrainingFit | None = None
        self._compile_rates: CompileRates | None = None
        self._in_graph: dict[Key, InGraph] | None = None
        self._exercised: dict[RouteKey, tuple[float, ...]] | None = None
        #: The measured GPU rows (``perfmodels.gpu_fit``; None: not read yet) and the GPU presets (data sheets, by id
        #: and alias) that name the GPUs they were measured on: the planner sets them for a GPU target.
        self._gpu_rows: tuple[GpuRow, ...] | None = None
        self.gpu_presets: Mapping[str, Device] = {}
        self._gpu: GpuFit | None = None

    @classmethod
    def from_plan_data(
        cls, data: PlanData, source: str = "", db: Path | None = None, store: Path | None = None
    ) -> FittedModel:
        """The model a plan uses from its cached ``PlanData``: the database itself is read only when something
        the cache does not hold is asked for (a unit route not fitted yet, a held-out evaluation)."""
        model = cls(data.result, source=source, db=db, store=store)
        model._training = data.training
        model._gpu_rows = data.gpu_rows
        model._compile_rates = data.compile_rates
        model._in_graph = {scale.key: scale for scale in data.in_graph}
        model._exercised = dict(data.exercised)
        model._units = UnitFit(
            None,
            cache_dir_for(db) if db is not None else None,
            keys=data.unit_keys,
            load_rows=lambda: sweep_rows(model.frame()) if model.frame() is not None else None,
        )
        return model

    def plan_data(self) -> PlanData:
        """What a plan reads of this model (``from_plan_data``), to keep on disk."""
        units, frame = self.units(), self.frame()
        trains = frame is not None and "mode" in frame and bool((frame["mode"] == "training").any())
        keys = tuple(units.keys()) if units is not None else ()
        kept = FitResult(self.result.groups, ratios=self.result.ratios)  # (without the rows)
        return PlanData(
            kept,
            keys,
            self.training(),
            trains,
            self.compile_rates(),
            tuple(self.in_graph().values()),
            tuple(self.exercised().items()),
            self.gpu_rows(),
        )

    def frame(self) -> pd.DataFrame | None:
        """The results the model was fitted from (read from its database when first needed; None without)."""
        if self._frame is None and self._db is not None and self._db.exists():
            from perfmodels import results_db

            frame = results_db.read_results(self._db, warn=False)
            self._gpu_rows = gpu_rows(frame) if self._gpu_rows is None else self._gpu_rows
            self._frame = cpu_rows(frame)
        return self._frame

    def gpu_rows(self) -> tuple[GpuRow, ...]:
        """The measured GPU step rows of the data (read with the database when not cached)."""
        if self._gpu_rows is None:
            self.frame()
        return self._gpu_rows or ()

    def gpu(self) -> GpuFit:
        """The GPU fits of the measured GPU rows, for the presets the planner set."""
        if self._gpu is None or self._gpu.presets is not self.gpu_presets:
            self._gpu = GpuFit(self.gpu_rows(), self.gpu_presets)
        return self._gpu

    def compile_rates(self) -> CompileRates:
        """Measured compile seconds per graph node of each compiling route (``perfmodels.setup_time``)."""
        if self._compile_rates is None:
            self._compile_rates = compile_rates(self.frame())
        return self._compile_rates

    def units(self) -> UnitFit | None:
        """The kernel-unit models of the data's unit sweeps (routes fitted when first used; None without data)."""
        if self._units is None and self._frame is not None:
            self._units = fit_units(self._frame, cache_dir=cache_dir_for(self._db) if self._db is not None else None)
        return self._units

    def in_graph(self) -> dict[Key, InGraph]:
        """Each graph compiler route's unit sums as its compiled graph pays them (``perfmodels.in_graph``), fitted
        from the rows the whole-model fit used (empty without them or without unit sweeps)."""
        if self._in_graph is None:
            unit_fit, rows = self.units(), self.result.data
            self._in_graph = (
                {}
                if unit_fit is None or rows is None or rows.empty
                else fit_in_graphs(rows, lambda index: row_parts(unit_fit, rows.loc[index]))
            )
        return self._in_graph

    def exercised(self) -> dict[RouteKey, tuple[float, ...]]:
        """Each route's largest FLOP share per op class over the rows its whole-model fit used (``op_mix``;
        empty without them)."""
        if self._exercised is None:
            rows = self.result.data
            self._exercised = {} if rows is None else exercised_by_route(rows)
        return self._exercised

    def training(self) -> TrainingFit:
        """The training step fit of the data's ``mode=training`` rows (empty without)."""
        if self._training is None:
            self._training = fit_for(self._frame, self.units())
        return self._training

    def calibration(self, source: str | None = None) -> Calibration | None:
        """This host's corrections against the shipped unit models of ``source`` (default: ``calibration_source``;
        None without a store or comparable rows); ``hoststore.HostStoreError`` for a store that cannot be read as a
        results database."""
        unit_fit = self.units() if self.store is not None else None
        if self.store is None or unit_fit is None:
            return None
        source = source or self._calibration_source(unit_fit)
        if source is None:
            return None
        if source not in self._calibrations:
            compute = functools.partial(self._calibration_of, source=source)
            found = self._from_store(self.store, f"calibration-{source}", compute)
            self._calibrations[source] = found if isinstance(found, Calibration) else None
        return self._calibrations[source]

    def host_fit(self) -> HostFit | None:
        """This host's own model from its store's rows alone (``perfmodels.hostfit``; None without a store or a
        route with enough rows); ``hoststore.HostStoreError`` for a store that cannot be read."""
        if self._host_fit is False:
            self._host_fit = None if self.store is None else self._from_store(self.store, "hostfit", _host_fit_of)
        return self._host_fit if isinstance(self._host_fit, HostFit) else None

    def _from_store(self, store: Path, name: str, compute: Callable[[Path], object]) -> Any:
        """``compute(store)``, kept beside the plan data keyed by the store's digest (so that a plan on a calibrated
        host neither parses the store nor loads the unit models the calibration compared with)."""
        from perfmodels.hoststore import is_quick_store

        cache = None
        if self._db is not None and (plan_file := fit_cache_file(self._db)) is not None:
            kind = "quick" if is_quick_store(store) else "full"
            code = plan_file.stem.removeprefix("plan-data-")  # the fitting code's digest, as for the plan data
            try:
                digest = file_digest(store)[:16]
                cache = plan_file.with_name(f"{name}-{kind}-{digest}-{local_target_key()}-{code}.pkl")
            except OSError:  # unreadable: read_store below says so
                cache = None
            kept = _read_pickle(cache) if cache is not None else None
            if isinstance(kept, tuple) and len(kept) == 1:
                return kept[0]
        value = compute(store)
        if cache is not None:
            _write_pickle(cache, (value,))
        return value

    def _calibration_of(self, store: Path, source: str) -> Calibration | None:
        from perfmodels.hoststore import is_quick_store, read_store

        unit_fit = self.units()
        frame = read_store(store)
        if frame is None or unit_fit is None:
            return None
        via = "quick probe" if is_quick_store(store) else "calibration"
        return calibration_from(
            frame, unit_fit, source, local_target_key(), via, shipped_rows=self.frame, paid=self._as_paid
        )

    def _training_calibration(self) -> CalibratedHost | None:
        """This host's calibration, the unit models it compared with and its measured GEMM peak and bandwidth, for
        carrying training fits over (None without a store, or one without probes): against the host of the training
        rows nearest this one, which need not be the host its inference plans are calibrated against."""
        units = self.units() if self.store is not None else None
        if units is None or self.store is None:
            return None
        trained = sorted(self.training().targets())
        swept = units.keys()
        source = nearest_host(local_target_key(), [key[0] for key in swept if key[0] in trained] or trained)
        calibration = self.calibration(source) if source is not None else None
        if calibration is None:
            return None
        probes = self._from_store(self.store, "probes", _store_probes)
        return None if probes is None else CalibratedHost(calibration, units, *probes)

    def _as_paid(self, key: Key, timed: list[tuple[Unit, float]]) -> list[tuple[Unit, float]]:
        """A route's timed units (``calibration.timed_units``) weighed as its prediction pays them: a graph
        compiler's as its compiled graph does (``in_graph.as_compiled``), a framework's as swept."""
        scale = self.in_graph().get(key)
        return as_compiled(timed, scale) if scale is not None and scale.usable else timed

    @staticmethod
    def _calibration_source(unit_fit: UnitFit) -> str | None:
        """The shipped host the calibration compares with: ``nearest_host`` of the hosts the unit models swept."""
        swept = unit_fit.keys()
        return nearest_host(local_target_key(), [key[0] for key in swept])

    def _calibrated(self, prediction: Prediction, workload: Workload, route: Route, group: GroupFit) -> Prediction:
        """``prediction`` carried to this host through the calibration's per-kind ratios against ``group``'s host
        (unchanged without)."""
        calibration = self.calibration(group.target)
        if calibration is None:
            return prediction
        unit_fit = self.units()
        unit_route = unit_fit.route(group.key) if unit_fit is not None and workload.units else None
        timed = timed_units(unit_route, workload.units, workload.batch_size) if unit_route is not None else []
        factor = calibration.factor(
            (route.framework, route.compiler, route.layout, route.precision), self._as_paid(group.key, timed)
        )
        if factor is None:
            return prediction
        interval = calibration.interval(prediction.step_seconds * factor, prediction.band)
        return prediction.scaled(
            factor,
            calibration.basis,
            {
                **prediction.detail,
                "calibration_factor": factor,
                "calibrated_units": float(calibration.units),
                **({} if interval is None else {"p10_step_s": interval[0], "p90_step_s": interval[1]}),
            },
        )

    def units_seconds(self, workload: Workload, group: GroupFit) -> float:
        """The kernel-unit sum for ``workload`` on ``group``'s route (NaN when either is missing)."""
        unit_fit = self.units() if workload.units else None
        route = unit_fit.route(group.key) if unit_fit is not None else None
        if unit_fit is None or route is None:
            return float("nan")
        scale = self.in_graph().get(group.key)
        if scale is not None and scale.usable:  # a graph compiler: the units as its compiled graph pays them
            parts = unit_parts(route, workload.units, workload.batch_size)
            return float("nan") if parts is None else scale.seconds(parts)
        return unit_fit.seconds(route, workload.units, workload.batch_size)

    def evaluation(self) -> Evaluation | None:
        """Leave-one-architecture-out figures of this model's data (computed once; None without data), for the
        plan's held-out figures and route errors: without the nested weight's figures, which plans do not read and
        which take more than half the time (``appopt models evaluate`` gives them; docs/decisions.md, 2026-11-27).
        """
        frame = self.frame() if self._evaluation is None else None
        if frame is not None:
            try:
                self._evaluation = leave_one_architecture_out(frame, nested=False)
            except ValueError:
                return None
        return self._evaluation

    def heldout(self, precision: str | None = None, compiler: str | None = None) -> HeldOutFigures | None:
        """The held-out scores (of ``precision``'s predictions when it has any, else overall): from the summary
        stored next to the database when it matches, else computed (and kept beside the plan data, keyed by the
        database's digest, so that the next plan does not evaluate again)."""
        if self._heldout is None:
            summary = self.stored_evaluation()
            stored = summary.figures if summary is not None else None
            plan_file = fit_cache_file(self._db) if stored is None and self._db is not None else None
            cache = plan_file.with_name(plan_file.name.replace("plan-data-", "heldout-")) if plan_file else None
            kept = _read_pickle(cache) if cache is not None else None
            if stored is None and isinstance(kept, dict):
                stored = kept
            evaluation = None if stored is not None else self.evaluation()
            if stored is not None:
                self._heldout = stored
            elif evaluation is not None:
                self._heldout = {"": HeldOutFigures.from_evaluation(evaluation)}
                self._heldout.update(
                    {p: HeldOutFigures.from_evaluation(evaluation, p) for p in evaluation.by_precision()}
                )
                self._heldout.update(
                    {
                        route_kind(p, c): HeldOutFigures.from_evaluation(evaluation, p, c)
                        for p, c in _compiler_groups(evaluation)
                    }
                )
            else:
                self._heldout = {}
            if cache is not None and stored is None:
                _write_pickle(cache, self._heldout)
        if precision and compiler and route_kind(precision, compiler) in self._heldout:
            return self._heldout[route_kind(precision, compiler)]
        return self._heldout.get(precision or "", self._heldout.get(""))

    def stored_evaluation(self) -> StoredEvaluation | None:
        """The evaluation summary next to the database, read (and the database hashed) once per model."""
        if self._stored is False:
            self._stored = read_evaluation(self._db) if self._db is not None else None
        return self._stored if isinstance(self._stored, StoredEvaluation) else None

    def _training_residuals(self) -> TrainingResiduals | None:
        """The training bands stored with the evaluation summary (never recomputed by a plan)."""
        stored = self.stored_evaluation() if self._db is not None else None
        return None if stored is None else stored.training

    def route_errors(self, group: GroupFit) -> tuple[float, float] | None:
        """``group``'s route's held-out (unit sum, whole-model) log errors: stored next to the database when they
        match it, else from the evaluation (None without either)."""
        if self._route_errors is None:
            summary = self.stored_evaluation()
            stored = summary.route_errors if summary is not None else None
            if stored is None:
                evaluation = self.evaluation()
                stored = (
                    {route_error_key(key): v for key, v in evaluation.route_errors.items()}
                    if evaluation is not None
                    else {}
                )
            self._route_errors = stored
        r = group.route
        key = (group.target, r.framework, r.compiler, r.layout, r.precision, str(group.threads))
        return self._route_errors.get(key)

    # --- which measurements apply ------------------------------------------------------------------------------

    def target_for(self, device: Device) -> str | None:
        """The fitted target a device is, or None when the database has no measurements for it."""
        if device.kind != "cpu":
            return None
        targets = self.result.targets()
        if device.name in LOCAL_NAMES:
            key = local_target_key()
            return key if key in targets else None
        if device.name in targets:
            return device.name
        return next((t for t in targets if t.startswith(target_key(device.name, 0)[:-3])), None)

    def _wanted_threads(self, target: str) -> int | None:
        """This host's usable cores where ``target``'s fits stand for this host (it is this host, or this host is
        calibrated against it), else None (the thread count ``target`` measured most)."""
        here = target == local_target_key() or (self.store is not None and self.calibration(target) is not None)
        return usable_cores() if here else None

    def anchor(self, workload: Workload, route: Route, device: Device) -> GroupFit | None:
        """The measured group closest to ``route`` on ``device``'s target (None: use the prior). On a ``local`` CPU
        whose host measured the route's framework but not its graph compiler, the group of the host nearest it that
        measured the compiler, where this host is calibrated against that host (None without a calibration: then
        the descriptors carry it, ``_descriptor_carried``)."""
        if workload.mode != "inference" or device.count != 1:
            return None
        local = device.name in LOCAL_NAMES and device.kind == "cpu"
        target = self.target_for(device)
        if target is None and local and self.store is not None:
            calibration = self.calibration()  # an uncalibrated host's fits carried over from the shipped host
            target = calibration.source if calibration is not None else None
        group = None if target is None else self._nearest_group(target, route, self._wanted_threads(target))
        if local and group is not None and group.route.compiler != route.compiler:
            other = self._compiler_host(route)
            if other is not None and other != target:
                if self.store is None or self.calibration(other) is None:
                    return None
                return self._nearest_group(other, route, self._wanted_threads(other))
        return group

    def _compiler_host(self, route: Route) -> str | None:
        """The measured host nearest this one (``targets.nearest_host``) with a usable group of ``route``'s framework
        and compiler (None: no host measured it)."""
        hosts = [
            g.target
            for g in self.result.groups
            if g.usable and g.route.framework == route.framework and g.route.compiler == route.compiler
        ]
        return nearest_host(local_target_key(), hosts)

    def _nearest_group(self, target: str, route: Route, wanted: int | None) -> GroupFit | None:
        """The usable group of ``route``'s framework on ``target`` nearest ``route`` (at ``wanted`` threads, else
        the most measured)."""
        groups = [g for g in self.result.for_target(target) if g.route.framework == route.framework and g.usable]
        if not groups:
            return None
        wanted = wanted or max(g.threads for g in groups)

        # a measured compiler is nearer than another compiler in the route's layout: compilers differ far more; an
        # unmeasured compiler stands on the framework's own measurements, never on another compiler's
        def distance(g: GroupFit) -> tuple[int, int, int, int, int, int]:
            return (
                g.route.precision != route.precision,
                g.route.compiler != route.compiler,
                g.route.compiler not in ("none", ""),
                g.route.layout != route.layout,
                abs(g.threads - wanted),
                -g.threads,
            )

        return min(groups, key=distance)

    # --- predicting ---------------------------------------------------------------------------------------------

    def predict(self, workload: Workload, route: Route, device: Device) -> Prediction:
        prior = self.prior.predict(workload, route, device)
        if device.kind == "gpu" and self.gpu_presets:  # measured GPU rows, fitted there and carried over
            on_gpu = self.gpu().predict(workload, route, device)
            if on_gpu is not None:
                return replace(on_gpu, detail={**on_gpu.detail, "prior_step_s": prior.step_seconds})
        if workload.mode == "training":  # measured training rows (perfmodels.training_fit), else the prior
            return training_prediction(
                self.training(),
                workload,
                route,
                device,
                prior,
                self._wanted_threads,
                lambda measured: self.prior.predict(workload, route, measured),
                self._training_calibration if device.name in LOCAL_NAMES else None,
                self._training_residuals(),
            )
        group = self.anchor(workload, route, device)
        if group is None:
            return (
                self._host_predicted(workload, route, device, prior)
                or self._descriptor_carried(workload, route, device, prior)
                or prior
            )
        fitted = self._fitted_on(workload, route, device, group, prior)
        return self._calibrated(fitted, workload, route, group) if device.name in LOCAL_NAMES else fitted

    def _fitted_on(
        self, workload: Workload, route: Route, device: Device, group: GroupFit, prior: Prediction
    ) -> Prediction:
        """``route``'s prediction from ``group``'s measurements (``prior``: the prior on ``device``)."""
        x = workload_features(workload, group.route.precision)
        below = f" (below the fitted range of {group.target})" if group.below_range(x) else ""
        by_units = self.units_seconds(workload, group)
        # a graph compiler without unit sums of its own but with a ratio model: its framework's plain route too
        through = self.result.ratio_for(group) if np.isnan(by_units) else None
        if below and np.isnan(by_units) and through is None:
            return replace(prior, basis=f"{prior.basis}{below}")
        whole = group.whole_seconds(x)
        share = group.overhead_share(x)
        errors = self.route_errors(group) if not np.isnan(by_units) else None
        seen = self.exercised()
        covered = coverage(x, seen.get(group.key), workload.units)
        step = raw = combine(whole, by_units, group.route.precision, share, errors=errors, coverage=covered)
        framework_s = factor = math.nan
        if through is not None:
            ratio, base = through
            base_units = self.units_seconds(workload, base)
            base_errors = self.route_errors(base) if not np.isnan(base_units) else None
            framework_s = combine(
                base.whole_seconds(x),
                base_units,
                base.route.precision,
                base.overhead_share(x),
                errors=base_errors,
                coverage=coverage(x, seen.get(base.key), workload.units),
            )
            factor = ratio.ratio(x, workload.batch_size, group.threads)
            step = raw = through_framework(whole, framework_s, factor)
        differs = [
            name
            for name, ours, theirs in (
                ("precision", route.precision, group.route.precision),
                ("layout", route.layout, group.route.layout),
                ("compiler", route.compiler, group.route.compiler),
            )
            if ours != theirs
        ]
        basis = (
            (f"kernel units:{group.target} + " if not np.isnan(by_units) else "") + f"roofline-prior{below}"
            if below
            else f"fitted:{group.target}" + ("" if np.isnan(by_units) else " + kernel units")
        )
        if through is not None:
            basis += f" and {group.route.framework} x the {group.route.compiler} ratio ({through[0].pairs} pairs)"
        if differs:
            # a compiler this target never measured is not credited with its reported speed-up: measurements of
            # the framework rank it, and it ties with the measured compiler (a claim must not outrank a benchmark)
            measured_route = replace(
                route,
                precision=group.route.precision,
                layout=group.route.layout,
                compiler=group.route.compiler,
                layout_factor=layout_factor(device.kind, group.route.layout, group.route.precision),
            )
            step *= prior.step_seconds / self.prior.predict(workload, measured_route, device).step_seconds
            scaled = [d for d in differs if d != "compiler"]
            basis += f" x prior({', '.join(scaled)})" if scaled else ""
            few = self.result.median_ratio_for(group, route.compiler) if "compiler" in differs else None
            if few is not None and few.median_ratio is not None:  # too few rows to fit, a few pairs measured
                step *= few.median_ratio
                basis += (f" x the {route.compiler} median ratio {few.median_ratio:.3g} ({few.pairs} pairs of "
                          f"{len(few.families)} families, too few to fit)")
            elif "compiler" in differs:
                basis += f" ({route.compiler} not measured here: its reported speed-up is not applied)"
        here = local_kernel_flags() if device.name in LOCAL_NAMES else ()
        if here and group.cpu_flags:  # (no flags readable here: nothing to compare)
            other_host = host_difference(group.cpu_flags, here)
            basis += f" (another host: {other_host})" if other_host else ""
        terms = np.asarray(group.coef) * x
        compute, memory = float(terms[FLOP_FEATURES].sum()), float(terms[BYTE_FEATURES].sum())
        steps = None if workload.total_samples is None else workload.total_samples / workload.batch_size
        # the route's measured compile time, paid once per job (added by Prediction.with_setup): only where this
        # compiler itself was measured here
        same_compiler = route.compiler == group.route.compiler
        rates = self.compile_rates()
        compile_s = rates.seconds(group.target, route.framework, route.compiler, workload) if same_compiler else None
        # a tuned route's search within it, and the trial budget it was measured at (the plan scales it to its own)
        search = rates.search(group.target, route.framework, route.compiler, workload) if same_compiler else None
        figures = self.heldout(group.route.precision, group.route.compiler)
        fitted = Prediction(
            step_seconds=step,
            samples_per_second=workload.batch_size / step,
            total_seconds=None if steps is None else steps * step,
            bound="compute" if compute >= memory else "memory",
            basis=basis,
            detail={
                "prior_step_s": prior.step_seconds,
                "whole_model_step_s": whole * step / raw if raw > 0 else whole,
                **({} if np.isnan(by_units) else {"kernel_units_step_s": by_units * step / raw}),
                # the whole-model fit's weight in the combination (unitfit.whole_weight)
                "whole_model_weight": (
                    whole_weight(share, errors=errors) * covered if through is None else 1 - RATIO_WEIGHT
                ),
                # the share of the model's FLOPs in op classes the fit's rows exercised (op_mix.coverage)
                "whole_model_coverage": covered,
                "correction": step / prior.step_seconds,
                "threads": float(group.threads),
                "fitted_rows": float(group.rows),
                "train_rmspe": group.train_rmspe,
                # the per-node and per-query part of the step (scaled like the step when the route differs)
                "overhead_s": group.overhead_seconds(x) * step / whole if whole > 0 else 0.0,
                # a compiler through its framework: the framework's plain-route estimate and the fitted ratio
                **({} if through is None else {"framework_step_s": framework_s * step / raw, "compiler_ratio": factor}),
                **(figures.as_detail(step) if figures is not None else {}),
                **({} if compile_s is None else {"compile_s": compile_s}),
                **({} if search is None else {"search_s": search[0], "search_trials": search[1]}),
            },
        )
        return fitted

    def _host_predicted(self, workload: Workload, route: Route, device: Device, prior: Prediction) -> Prediction | None:
        """On a ``local`` CPU that nothing shipped carries a prediction to: this host's own fit, where its store
        has enough rows of the route (``perfmodels.hostfit``; None otherwise)."""
        if device.name not in LOCAL_NAMES or device.kind != "cpu" or device.count != 1 or not workload.units:
            return None
        fit = self.host_fit() if workload.mode == "inference" else None
        if fit is None:
            return None
        return host_prediction(
            fit, workload, route, usable_cores(), prior, lambda r: self.prior.predict(workload, r, device)
        )

    def _descriptor_carried(
        self, workload: Workload, route: Route, device: Device, prior: Prediction
    ) -> Prediction | None:
        """On a CPU nothing measured or calibrated (a catalog preset, a ``local`` host planned without its quick
        probe): the fitted prediction on the measured host of its instruction set with the most rows that measured
        the route's framework, carried by the prior's ratio between the two machines (``perfmodels.
        descriptor_transfer``; a graph compiler with its ratio to its framework as measured there; None: no such
        host)."""
        if workload.mode != "inference" or device.kind != "cpu":
            return None
        found = [self._nearest_group(s, route, None) for s in descriptor_sources(self.result.groups, device.arch)]
        groups = [g for g in found if g is not None]
        # a host that measured the route's graph compiler before one that measured only its framework
        group = next((g for g in groups if g.route.compiler == route.compiler), groups[0] if groups else None)
        if group is None:
            return None
        there = source_device(group, device)
        prior_there = self.prior.predict(workload, route, there)
        fitted = self._fitted_on(workload, route, there, group, prior_there)
        if route.compiler_speedup == 1.0:
            return carried(fitted, prior, prior_there, device, group)
        # the machines' ratio without the catalog's speed-up of a compiler: what a compiler changes is the source's
        # measured ratio (or nothing, where it measured none), which a speed-up moving the prior between its compute
        # and memory bounds on the two machines would otherwise add to
        neutral = replace(route, compiler_speedup=1.0)
        here, neutral_there = (self.prior.predict(workload, neutral, d) for d in (device, there))
        return carried(fitted, here, neutral_there, device, group)

    def describe(self) -> list[str]:
        """One line per fitted group, then one per graph compiler's ratio model and per compiler's in-graph unit fit."""
        units = self.units() if self.result.ratios else None
        unit_keys = units.keys() if units is not None else ()
        swept = {tuple(key[:5]) for key in unit_keys}
        return [
            *(
                f"{g.target} {g.route.describe()} {g.threads}t: {g.rows} rows from {len(g.families)} families, "
                f"train RMSPE {g.train_rmspe:.1%}" + ("" if g.usable else " (too little data: not used)")
                for g in self.result.groups
            ),
            *(
                ratio.describe() + (" (its route's kernel units answer instead)" if ratio.key in swept else "")
                for ratio in self.result.ratios
            ),
            *(scale.describe() for _, scale in sorted(self.in_graph().items())),
        ]


def probe_figures(rows: pd.DataFrame) -> tuple[float, float]:
    """The GEMM peak (GFLOP/s) and bandwidth (GB/s) of a host from its rows' probes: the best reading of each. A probe
    is a best-of whose readings interference only lowers, and the rows carry every probe taken (a calibration's and
    each anchor's): on a two-vCPU machine one calibration's two-thread GEMM peak read 156 GFLOP/s where its anchors'
    read 284 and the training run after it 297 (docs/decisions.md, 2026-11-27, a probe read under steal)."""
    return float(rows["peak_gflops"].astype(float).max()), float(rows["bandwidth_gbs"].astype(float).max())


def _store_probes(store: Path) -> tuple[float, float, int] | None:
    """The store's GEMM peak (GFLOP/s) and bandwidth (GB/s) at the thread count nearest this host's usable cores
    (``probe_figures``), and that count (None: no row recorded them)."""
    from perfmodels.hoststore import read_store

    frame = read_store(store)
    if frame is None or frame.empty:
        return None
    rows = frame.dropna(subset=["peak_gflops", "bandwidth_gbs", "threads"])
    if rows.empty:
        return None
    counts = sorted({int(t) for t in rows["threads"]})
    threads = min(counts, key=lambda t: (abs(t - usable_cores()), -t))
    return (*probe_figures(rows[rows["threads"].astype(int) == threads]), threads)


def _host_fit_of(store: Path) -> HostFit | None:
    """``store``'s host fit (``hoststore.HostStoreError`` when it cannot be read)."""
    from perfmodels.hoststore import is_quick_store, read_store

    frame = read_store(store)
    via = "quick probe" if is_quick_store(store) else "calibration"
    return None if frame is None else host_fit(frame, local_target_key(), via)


def fit_model(frame: pd.DataFrame, source: str = "", db: Path | None = None, store: Path | None = None) -> FittedModel:
    """A ``FittedModel`` from a results DataFrame (``perfmodels.results_db.read_results``) read from ``db``, with
    this host's calibration ``store`` when there is one."""
    model = FittedModel(fit(cpu_rows(frame)), source=source, frame=cpu_rows(frame), db=db, store=store)
    model._gpu_rows = gpu_rows(frame)
    return model


def default_db_path() -> Path:
    """The shipped result database (``benchmarks/results/default.csv``), or ``$APPOPT_RESULTS_DB``."""
    override = os.environ.get("APPOPT_RESULTS_DB")
    if override:
        return Path(override)
    from perfmodels.results_db import DEFAULT_DB

    return DEFAULT_DB


def load_default_model(path: str | Path | None = None, host_store: bool = True) -> PerformanceModel:
    """The fitted model for the shipped database (or ``path``); cached per file version, falls back to the prior.

    A missing or empty database gives the plain ``RooflinePrior`` (every prediction's basis then says so). This
    host's calibration store, else its quick probe's (``perfmodels.hoststore.plan_store``), is used when it exists
    and ``host_store`` is true.
    """
    from perfmodels.hoststore import plan_store

    db = Path(path) if path is not None else default_db_path()
    try:
        stamp = db.stat().st_mtime_ns
    except FileNotFoundError:
        return RooflinePrior()
    store = plan_store() if host_store else None
    try:
        store_stamp = store.stat().st_mtime_ns if store is not None else 0
    except OSError:
        store_stamp = 0
    return _load(str(db.resolve()), stamp, str(store) if store_stamp else "", store_stamp)


@dataclass(frozen=True)
class PlanData:
    """What a plan reads of a fitted database: the whole-model fits, which unit routes were swept (each route's
    models live in ``unitfit``'s cache directory) and the training fit. Kept on disk keyed by the database's digest,
    so that a plan neither parses the CSV nor refits: kilobytes where the parsed database took 25 MB."""

    result: FitResult
    unit_keys: tuple[Key, ...]
    training: TrainingFit
    #: Whether the database holds ``mode=training`` rows (then training plans say why they fall back to the prior).
    has_training_rows: bool = False
    #: Measured compile seconds per graph node of each compiling route.
    compile_rates: CompileRates = field(default_factory=CompileRates)
    #: Graph compilers' unit sums as their compiled graphs pay them (``perfmodels.in_graph``).
    in_graph: tuple[InGraph, ...] = ()
    #: Each route's op classes exercised by its rows (``op_mix.exercised``): the whole-model fit's coverage.
    exercised: tuple[tuple[RouteKey, tuple[float, ...]], ...] = ()
    #: The measured GPU step rows (``perfmodels.gpu_fit``): a few hundred, fitted per plan in milliseconds.
    gpu_rows: tuple[GpuRow, ...] = ()


@functools.lru_cache(maxsize=4)
def _load(path: str, stamp: int, store: str = "", store_stamp: int = 0) -> PerformanceModel:
    db = Path(path)
    store_path = Path(store) if store else None
    data = _read_fit_cache(db)
    if data is not None:
        model = FittedModel.from_plan_data(data, source=db.name, db=db, store=store_path)
    else:
        from perfmodels import results_db

        frame = results_db.read_results(path, warn=False)
        model = fit_model(frame, source=db.name, db=db, store=store_path)
        data = model.plan_data()
        _write_fit_cache(db, data)
    # a database with nothing fitted still carries this host's own store (``perfmodels.hostfit``)
    return model if model.result.groups or data.has_training_rows or data.gpu_rows or store_path else RooflinePrior()


#: Modules whose code shapes a fitted model: their text is part of the cache key, so an edit refits.
#: (Paths relative to this package; the kernel-unit definitions live in ``analysis``.)
_FIT_CODE = (
    "fit.py",
    "compiler_ratio.py",
    "in_graph.py",
    "op_mix.py",
    "unitfit.py",
    "results_db.py",
    "features.py",
    "../analysis/units.py",
    "fitted.py",
    "gpu_fit.py",
    "training_fit.py",
    "training_units.py",
    "../benchmarks/results/training_units.json",
    "trees.py",
    "calibration.py",
    "hoststore.py",
    "hostfit.py",
    "setup_time.py",
)


def fit_cache_file(db: Path) -> Path | None:
    """Where the fitted model of ``db`` is kept between processes (``unitfit.cache_dir_for``'s directory, keyed by
    the database's digest and library versions, plus the fitting code's digest); None without a cache."""
    directory = cache_dir_for(db)
    if directory is None:
        return None
    here = Path(__file__).parent
    code = hashlib.sha256(b"".join((here / name).read_bytes() for name in _FIT_CODE)).hexdigest()[:16]
    return directory / f"plan-data-{code}.pkl"


def _read_fit_cache(db: Path) -> PlanData | None:
    path = fit_cache_file(db)
    data = _read_pickle(path) if path is not None else None
    return data if isinstance(data, PlanData) else None


def _read_pickle(path: Path) -> object:
    """What ``_write_pickle`` kept at ``path`` (None when missing, unreadable or from another version)."""
    import pickle

    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)  # our own cache directory, keyed by the data's digests
    except Exception:  # missing, unreadable or from another version: compute again
        return None


def _write_fit_cache(db: Path, data: PlanData) -> None:
    path = fit_cache_file(db)
    if path is not None:
        _write_pickle(path, data)


def _write_pickle(path: Path, value: object) -> None:
    """``value`` pickled to ``path`` atomically (nothing when it cannot be written: caches are only a speed-up)."""
    import pickle
    import tempfile

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
            pickle.dump(value, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(handle.name, path)
    except OSError:
        return

