"""A model of this host from its own calibration rows alone: the ``calibrated:<host-key>`` basis.

``appopt calibrate`` (and the quick probe of ``appopt plan``) measure a covering set of kernel units on each installed
backend (``benchmarks.calibrate``): a few sizes of every kind, and no-op chains. Where the shipped database has no
route to carry over to this host (no measurements of the route anywhere, or none that a transfer can start from), a
route with enough of those rows (``MIN_HOST_UNITS`` units and two no-op chains) is predicted from them alone:

* the no-op chains give the route's cost per call and per node (``unitfit.call_costs``, as the shipped unit models);
* each kind's time over its roofline time (at this host's measured GEMM peak and bandwidth) is a log-linear function
  of the unit's FLOPs and bytes (standardised), ridge-shrunk towards the kind's mean (few sizes: a line, not a
  boosted tree), and clipped to the range of ratios measured (± ``CLIP``), so that a size far outside the sample
  is not extrapolated into nonsense; a kind the route did not measure takes the line of all its units (pooled);
* a model's time is the call plus the sum of its units, as for the shipped unit models, times the route's
  ``whole_factor`` where the store also measured whole models on it (``appopt bench run --db STORE``): what a
  model costs beyond its units measured alone.

Each route's held-out errors come from the same rows: every unit predicted by a fit without it (leave-one-unit-out).
Their p10 and p90 of measured / predicted bound the step, and their RMSPE is the model error the planner's band uses.

Example::

    >>> fit = host_fit(store_frame, "amd-epyc-2c")                                 # doctest: +SKIP
    >>> fit.predict(workload.units, 1, ("onnxruntime", "none", "NCHWc", "fp32"), 2)  # doctest: +SKIP
    HostPrediction(seconds=3.1e-05, units=58, ...)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from analysis.units import KINDS, UNFUSABLE, Unit, decode_units
from perfmodels.features import Route, Workload
from perfmodels.prediction import Prediction
from perfmodels.priors import layout_factor
from perfmodels.unitfit import (
    KindModel,
    UnitRoute,
    call_costs,
    row_route,
    sweep_rows,
    unit_route,
    unit_targets,
    whole_rows,
)

if TYPE_CHECKING:
    import pandas as pd

#: A route is predicted from this host's rows when it has at least this many measured units besides the no-ops.
MIN_HOST_UNITS = 5
#: Shrinkage of a kind's slopes (per row, on standardised sizes): few rows, so a line close to the mean.
RIDGE = 0.1
#: How far (natural log) a prediction's time / roofline ratio may leave the range its kind measured.
CLIP = 0.5

#: (framework, compiler, layout, precision)
Route4 = tuple[str, str, str, str]


@dataclass(frozen=True)
class LogLinear:
    """log(work / roofline time) = intercept + coef · (features[columns] − centre) / scale, clipped to [low, high].

    Stands in for a kind's regressor in ``unitfit.KindModel`` (it reads some of ``unit_features``' columns)."""

    intercept: float
    coef: tuple[float, ...]
    centre: tuple[float, ...]
    scale: tuple[float, ...]
    columns: tuple[int, ...]
    low: float
    high: float

    def predict(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=float)[:, list(self.columns)]
        x = (x - np.asarray(self.centre)) / np.asarray(self.scale)
        return np.clip(self.intercept + x @ np.asarray(self.coef), self.low, self.high)


#: Columns of ``unit_features`` every kind has: log2 FLOPs, log2 bytes (then intensity and weight bytes).
SIZE_COLUMNS = (0, 1)


def fit_log_linear(features: np.ndarray, target: np.ndarray, columns: tuple[int, ...] = SIZE_COLUMNS) -> LogLinear:
    """The ridge line through ``target`` (log ratios) over ``features``' ``columns`` (standardised)."""
    x = np.asarray(features, dtype=float)[:, list(columns)]
    y = np.asarray(target, dtype=float)
    centre = x.mean(axis=0)
    scale = np.where(x.std(axis=0) > 1e-9, x.std(axis=0), 1.0)
    xc = (x - centre) / scale
    coef = np.linalg.solve(xc.T @ xc + RIDGE * len(y) * np.eye(len(columns)), xc.T @ (y - y.mean()))
    return LogLinear(
        float(y.mean()), tuple(float(c) for c in coef), tuple(float(c) for c in centre),
        tuple(float(c) for c in scale), tuple(columns), float(y.min()) - CLIP, float(y.max()) + CLIP,
    )


@dataclass(frozen=True)
class HostRoute:
    """One route's model of this host, with its leave-one-unit-out errors (measured / predicted − 1)."""

    model: UnitRoute
    #: Units measured (no-op chains left out).
    units: int
    heldout_errors: tuple[float, ...] = ()
    #: Measured / unit-sum time of the whole models the store holds of this route (geometric mean; 1 without),
    #: and how many: what a model costs beyond its units measured alone.
    whole_factor: float = 1.0
    whole_models: int = 0

    def interval_ratios(self) -> tuple[float, float] | None:
        """(p10, p90) of measured / predicted over the held-out units (None with fewer than 5)."""
        if len(self.heldout_errors) < 5:
            return None
        low, high = np.quantile(np.asarray(self.heldout_errors) + 1.0, [0.1, 0.9])
        return float(low), float(high)

    def heldout_rmspe(self) -> float:
        """RMSPE of the held-out unit predictions ((predicted − measured) / measured)."""
        ratio = np.asarray(self.heldout_errors) + 1.0
        return float(np.sqrt(np.mean((1.0 / ratio - 1.0) ** 2))) if len(ratio) else math.nan


@dataclass(frozen=True)
class HostPrediction:
    seconds: float
    route: HostRoute
    #: Seconds per unit kind (the kinds a model's time is made of), and those predicted by the pooled line.
    by_kind: dict[str, float] = field(default_factory=dict)
    pooled_kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostFit:
    """Every route of the store with enough rows, keyed (framework, compiler, layout, precision, threads)."""

    host: str
    #: What measured the host: ``calibration`` or ``quick probe``.
    via: str
    routes: dict[tuple[str, str, str, str, int], HostRoute]

    def route(self, route: Route4, threads: int | None) -> HostRoute | None:
        """The route at ``threads`` (the nearest measured thread count, more threads first on a draw)."""
        found = [(key[4], r) for key, r in self.routes.items() if key[:4] == route]
        if not found:
            return None
        wanted = threads or max(t for t, _ in found)
        return min(found, key=lambda item: (abs(item[0] - wanted), -item[0]))[1]

    def predict(self, units: Sequence[Unit], batch: int, route: Route4, threads: int | None) -> HostPrediction | None:
        """The model's time on this host (None: the route has no host model, or a unit no kind covers)."""
        host_route = self.route(route, threads)
        if host_route is None or not units:
            return None
        times = host_route.model.unit_seconds(units, batch)
        if np.isnan(times).any():
            return None
        by_kind: dict[str, float] = {"call": host_route.model.call_s}
        for unit, t in zip(units, times, strict=True):
            by_kind[unit.kind] = by_kind.get(unit.kind, 0.0) + unit.count * float(t)
        pooled = tuple(sorted({u.kind for u in units if host_route.model.kinds.get(u.kind, _REAL).rows == 0}))
        return HostPrediction(sum(by_kind.values()) * host_route.whole_factor, host_route, by_kind, pooled)

    def basis(self, prediction: HostPrediction) -> str:
        via = "" if self.via == "calibration" else f" via {self.via}"
        pooled = f"; {', '.join(prediction.pooled_kinds)} from all its units" if prediction.pooled_kinds else ""
        r = prediction.route
        whole = f", scaled by {r.whole_models} whole model(s) x{r.whole_factor:.2f}" if r.whole_models else ""
        return f"calibrated:{self.host}{via} (host fit of {r.units} units of this route{whole}{pooled})"


_REAL = KindModel("", 1, None)


def _kind_line(features: list[np.ndarray], target: np.ndarray) -> LogLinear:
    """A kind's line in its sizes (its shape features overfit a few rows: 47% -> 103% RMSPE, docs/decisions.md)."""
    return fit_log_linear(np.array(features), target)


def _kind_models(units: list[Unit], target: np.ndarray, features: list[np.ndarray]) -> dict[str, KindModel]:
    """Each measured kind's line, and the pooled line for the kinds not measured."""
    kinds: dict[str, KindModel] = {}
    by_kind: dict[str, list[int]] = {}
    for i, unit in enumerate(units):
        by_kind.setdefault(unit.kind, []).append(i)
    for kind, index in by_kind.items():
        kinds[kind] = KindModel(kind, len(index), _kind_line([features[i] for i in index], target[index]))
    pooled = KindModel("pooled", 0, fit_log_linear(np.array([f[:2] for f in features]), target))
    for kind in KINDS:
        if kind not in kinds and kind != "noop" and kind not in UNFUSABLE:  # (their parts price them)
            kinds[kind] = pooled
    return kinds


def host_route(rows: pd.DataFrame) -> HostRoute | None:
    """One route's host model from its ``unitfit.sweep_rows`` (None: too few rows)."""
    costs = call_costs(rows)
    work_rows = rows[[u.kind != "noop" for u in rows["unit"]]]
    if costs is None or len(work_rows) < MIN_HOST_UNITS:
        return None
    call_s, node_s = costs
    data = unit_targets(work_rows, call_s, float(rows["peak_flops"].median()), float(rows["bandwidth"].median()))
    units, target, features = data.units, data.target, data.features
    errors = []
    for i in range(len(units)):  # leave-one-unit-out: the unit's kind line without it (else the pooled line)
        keep = [j for j in range(len(units)) if j != i]
        same = [j for j in keep if units[j].kind == units[i].kind]
        if same:
            line = _kind_line([features[j] for j in same], target[same])
        else:
            line = fit_log_linear(np.array([features[j][:2] for j in keep]), target[keep])
        ratio = math.exp(float(line.predict(features[i][None, :])[0]))
        errors.append(data.t[i] / (call_s + data.boundary[i] + data.prior[i] * ratio) - 1.0)
    model = unit_route(rows, call_s, node_s, _kind_models(units, target, features))
    return HostRoute(model, len(units), tuple(errors))


def host_fit(store: pd.DataFrame, host: str, via: str = "calibration") -> HostFit | None:
    """This host's routes from its store's unit rows (wall-clock times: what this host has); None when no route
    has enough of them."""
    rows = sweep_rows(store, "wall")
    routes: dict[tuple[str, str, str, str, int], HostRoute] = {}
    for key, group in rows.groupby(["framework", "compiler", "layout", "precision", "threads"], sort=True):
        fitted = host_route(group.reset_index(drop=True))
        if fitted is not None:
            framework, compiler, layout, precision, threads = key
            routes[(str(framework), str(compiler), str(layout), str(precision), int(threads))] = fitted
    return HostFit(host, via, _with_whole_models(routes, store)) if routes else None


def _with_whole_models(
    routes: dict[tuple[str, str, str, str, int], HostRoute], store: pd.DataFrame
) -> dict[tuple[str, str, str, str, int], HostRoute]:
    """Each route scaled by the whole models the store measured on it (SingleStream rows with kernel units, from
    ``appopt bench run --db STORE``): measured / unit-sum, a geometric mean over the models."""
    logs: dict[tuple[str, str, str, str, int], dict[str, list[float]]] = {}
    for row in whole_rows(store).itertuples(index=False):
        key = (*row_route(row), int(row.threads))
        route = routes.get(key)
        if route is None:
            continue
        times = route.model.unit_seconds(decode_units(str(row.units)), int(row.batch))
        counts = [u.count for u in decode_units(str(row.units))]
        predicted = route.model.call_s + float(np.sum(np.asarray(counts) * times))
        if np.isfinite(predicted) and predicted > 0:
            ratio = math.log(float(row.median_ms) / 1e3 / predicted)
            logs.setdefault(key, {}).setdefault(str(row.model), []).append(ratio)
    out = dict(routes)
    for key, by_model in logs.items():
        per_model = [float(np.median(v)) for v in by_model.values()]
        out[key] = replace(routes[key], whole_factor=math.exp(float(np.mean(per_model))), whole_models=len(per_model))
    return out


def host_prediction(
    fit: HostFit,
    workload: Workload,
    route: Route,
    threads: int | None,
    prior: Prediction,
    prior_of: Callable[[Route], Prediction],
) -> Prediction | None:
    """``route``'s prediction from this host's fit (None: the store measured nothing of its framework).

    As the shipped fits do (``perfmodels.fitted``), the nearest measured route of the framework stands in for one the
    store did not measure: another precision or layout scaled by the prior's ratio between the two, and a compiler
    never measured on the framework predicted as the framework's own route (a claimed speed-up must not outrank a
    measurement)."""
    measured = [key[:4] for key in fit.routes if key[0] == route.framework]
    if not measured:
        return None
    key = min(measured, key=lambda k: (k[3] != route.precision, k[1] != route.compiler, k[2] != route.layout, k))
    _, compiler, layout, precision = key
    found = fit.predict(workload.units, workload.batch_size, key, threads)
    if found is None:
        return None
    step = found.seconds
    basis = fit.basis(found)
    pairs = (("precision", route.precision, precision), ("layout", route.layout, layout))
    differs = [name for name, ours, theirs in pairs if ours != theirs]
    if differs:
        plain = replace(route, compiler_speedup=1.0)  # the ratio of what differs alone, no compiler's claim in it
        factor = layout_factor("cpu", layout, precision)
        stand_in = replace(plain, precision=precision, layout=layout, layout_factor=factor)
        step *= prior_of(plain).step_seconds / prior_of(stand_in).step_seconds
        basis += f" x prior({', '.join(differs)})"
    if compiler != route.compiler:
        basis += f" ({route.compiler} not measured here: its reported speed-up is not applied)"
    host_route = found.route
    ratios = host_route.interval_ratios()
    return Prediction.for_step(
        workload,
        step,
        prior.bound,
        basis,
        {
            "prior_step_s": prior.step_seconds,
            "kernel_units_step_s": step,
            "correction": step / prior.step_seconds,
            "threads": float(host_route.model.threads),
            "host_units": float(host_route.units),
            "call_s": host_route.model.call_s,
            # leave-one-unit-out over this route's units (the model error of the planner's band)
            "heldout_rmspe": host_route.heldout_rmspe(),
            "heldout_predictions": float(len(host_route.heldout_errors)),
            **({} if ratios is None else {"p10_step_s": step * ratios[0], "p90_step_s": step * ratios[1]}),
        },
    )
