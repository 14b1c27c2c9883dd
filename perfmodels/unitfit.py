"""Kernel-level performance models: each route's time per kernel unit, learned from unit sweeps.

nn-Meter's approach (Zhang et al., MobiSys 2021) on our routes: ``benchmarks.unit_sweep`` measures sampled kernel
units alone; for each target × route × thread count and each unit kind, a gradient-boosted regressor learns the
unit's time as a multiple of its roofline time (``analysis.units.roofline_seconds`` at the measured GEMM peak and
copy bandwidth) from the unit's shape (``unit_features``). A model's time is then the route's fixed cost per query
plus the sum of its units' predicted times. The prior (the roofline) times the learned correction is the prediction,
as for whole-model fits, but the correction now depends on each kernel's shape rather than on the model's totals.

The fixed cost per query comes from chains of 1 to 8 no-op nodes (``noop`` units): a straight line through their
times gives the cost of a call and of a node; each measured unit pays one call, which is taken off before learning.
So is the time a backend spends converting a one-unit model's inputs and outputs to its own layout
(``boundary_ms``, from its profiler): a whole model converts once, not around every kernel.

Routes measured at int8 learn only the units their quantiser may convert (convolutions, matrix products): every
other unit of an int8 model runs as at fp32, and is predicted by the same route's fp32 models. So is a unit whose
weights are computed in the graph (``init_w`` 0) where the int8 route measured none such of its kind: whether a
quantiser converts those (onnxruntime's does a convolution's, quantising its weights on every run, and leaves a
matrix product's) is learned from rows that have them.

Rows used: measured ``kernel`` rows with one unit in ``units`` (``family`` ``kernel-unit``), with the time rules of
``perfmodels.fit`` (a single-threaded row measured under load uses its CPU time; multi-threaded ones are left out).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import math
import os
import pickle
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from analysis.units import QUANTISABLE, Unit, decode_units, roofline_seconds, unfused, unit_features
from perfmodels.digests import file_digest
from perfmodels.fit import RouteKey, Statistic, effective_ms, unreliable
from perfmodels.lazy import lazy_import
from perfmodels.trees import compile_ensemble

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

#: Bump when the fit changes, so that routes cached by an older version are fitted again.
CACHE_VERSION = 4
#: Family of the unit-sweep rows.
UNIT_FAMILY = "kernel-unit"
#: A kind is learned for a route from at least this many sweep rows.
MIN_KIND_ROWS = 6
#: Share of a unit's measured time always attributed to the unit itself (a small unit's time is mostly the call,
#: and subtracting a noisy call cost must not leave it nothing).
MIN_WORK_SHARE = 0.15
#: Frameworks that settle shape arithmetic before the model runs, so a model's ``noop`` nodes cost them nothing:
#: appopt-runtime folds it at compile time (``runtime.passes.shape_values``; an nn.EmbeddingBag's Loop becomes one
#: kernel, ``runtime.passes.embedding_bag``). onnxruntime dispatches them: its profiler counts 153 nodes in a run of
#: the held-out DLRM at batch 1, where the cut has 17 kernel units and 150 dispatched nodes (docs/decisions.md).
FOLDS_SHAPE_ARITHMETIC = frozenset({"appopt-runtime"})
_GROUP = ["target", "framework", "compiler", "layout", "precision", "threads"]
_SWEEP_COLUMNS = [*_GROUP, "unit", "t", "boundary", "peak_flops", "bandwidth"]


def sweep_rows(frame: pd.DataFrame, statistic: Statistic = "auto") -> pd.DataFrame:
    """The unit-sweep rows a fit can use, one per (route, threads, unit) with the median time ``t`` (s)."""
    if frame.empty or "units" not in frame:
        return pd.DataFrame(columns=_SWEEP_COLUMNS)
    rows = frame[
        (frame["source"] == "measured")
        & (frame["scenario"] == "kernel")
        & (frame["family"] == UNIT_FAMILY)
        & frame["units"].notna()
    ]
    rows = rows.assign(effective_ms=effective_ms(rows, statistic))
    if statistic == "auto" and len(rows):
        rows = rows[~unreliable(rows)]
    rows = rows.dropna(subset=["effective_ms", "peak_gflops", "bandwidth_gbs", "threads"])
    if rows.empty:
        return pd.DataFrame(columns=_SWEEP_COLUMNS)
    numbers = rows.assign(
        t=rows["effective_ms"].astype("float64") / 1e3,
        boundary=rows["boundary_ms"].astype("float64").fillna(0.0) / 1e3 if "boundary_ms" in rows else 0.0,
        peak_flops=rows["peak_gflops"].astype("float64") * 1e9,
        bandwidth=rows["bandwidth_gbs"].astype("float64") * 1e9,
    )
    for col in ("target", "framework", "compiler", "layout", "precision"):
        numbers[col] = numbers[col].fillna("").astype(str)
    numbers["threads"] = numbers["threads"].astype(int)
    medians = (
        numbers.groupby([*_GROUP, "units"], sort=True)[["t", "boundary", "peak_flops", "bandwidth"]]
        .median()
        .reset_index()
    )
    decoded = [decode_units(str(text)) for text in medians["units"]]
    keep = [len(units) == 1 for units in decoded]
    out = medians[keep].drop(columns="units").assign(unit=[units[0] for units in decoded if len(units) == 1])
    out = out[_SWEEP_COLUMNS].reset_index(drop=True)
    for col in ("target", "framework", "compiler", "layout", "precision"):
        out[col] = out[col].fillna("").astype(str)
    out["compiler"] = out["compiler"].replace("", "none")
    return out


def whole_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame``'s measured SingleStream inference rows with kernel units, a median, a batch and a thread count:
    whole models a store measured (``hostfit``, ``calibration``)."""
    if frame.empty or "units" not in frame:
        return frame.iloc[0:0]
    return frame[
        (frame["source"] == "measured")
        & (frame["scenario"] == "SingleStream")
        & (frame["mode"].fillna("inference") == "inference")
        & frame["units"].notna()
        & frame["median_ms"].notna()
        & frame["batch"].notna()
        & frame["threads"].notna()
    ]


def row_route(row: Any) -> tuple[str, str, str, str]:
    """A result row's (framework, compiler, layout, precision), an empty compiler as ``none``."""
    compiler = row.compiler if isinstance(row.compiler, str) and row.compiler else "none"
    return (str(row.framework), compiler, str(row.layout), str(row.precision))


def _regressor() -> Any:
    from sklearn.ensemble import GradientBoostingRegressor

    return GradientBoostingRegressor(n_estimators=150, max_depth=3, learning_rate=0.1, subsample=0.8, random_state=0)


@dataclass(frozen=True)
class KindModel:
    """One unit kind on one route: log(time / roofline time) as a function of ``unit_features``."""

    kind: str
    rows: int
    regressor: Any = field(repr=False, compare=False)
    #: Root-mean-square relative error on the sweep rows it was fitted on.
    train_rmspe: float = math.nan
    #: Whether it was fitted on units whose weights are computed in the graph (``init_w`` 0) as well as stored.
    computed_weights: bool = False

    def log_ratio(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(self.regressor.predict(features), dtype=float)


@dataclass(frozen=True)
class UnitRoute:
    """A target × route × thread count's learned unit times and fixed costs."""

    target: str
    route: RouteKey
    threads: int
    peak_flops: float
    bandwidth: float
    #: Seconds per query and per node (from the no-op chains).
    call_s: float
    node_s: float
    kinds: dict[str, KindModel] = field(compare=False)
    rows: int = 0

    @property
    def key(self) -> tuple[str, str, str, str, str, int]:
        r = self.route
        return (self.target, r.framework, r.compiler, r.layout, r.precision, self.threads)

    def describe(self) -> str:
        kinds = ", ".join(f"{k} {m.rows} ({m.train_rmspe:.0%})" for k, m in sorted(self.kinds.items()))
        return (
            f"{self.target} {self.route.describe()} {self.threads}t: {self.rows} sweep rows, "
            f"{self.call_s * 1e6:.1f} us/query + {self.node_s * 1e6:.2f} us/node; {kinds}"
        )

    def unit_seconds(self, units: Sequence[Unit], batch: int) -> np.ndarray:
        """Predicted seconds of each unit (one of each, at ``batch``); NaN for kinds this route has not learned.

        A fused kind the route has not learned (``skipnorm``, ``recurrent``) is the sum of its ``unfused`` units
        (counts included) where those are.
        A ``noop`` unit (nodes a model dispatches for no work: shape arithmetic, views) costs its nodes at ``node_s``.
        """
        out = np.full(len(units), math.nan)
        by_kind: dict[str, list[int]] = {}
        for i, unit in enumerate(units):
            by_kind.setdefault(unit.kind, []).append(i)
        for kind, index in by_kind.items():
            model = self.kinds.get(kind)
            if kind == "noop":  # nodes run for their dispatch alone: the no-op chains' cost of a node
                node_s = 0.0 if self.route.framework in FOLDS_SHAPE_ARITHMETIC else self.node_s
                out[index] = [units[i]["nodes"] * node_s for i in index]
                continue
            if model is None:
                out[index] = [self._unfused_seconds(units[i], batch) for i in index]
                continue
            scaled = [units[i].at_batch(batch) for i in index]
            features = np.array([unit_features(u) for u in scaled])
            prior = np.array([roofline_seconds(u, 1, self.peak_flops, self.bandwidth) for u in scaled])
            out[index] = prior * np.exp(model.log_ratio(features))
        return out

    def _unfused_seconds(self, unit: Unit, batch: int) -> float:
        parts = unfused(unit)
        if parts is None or any(part.kind not in self.kinds for part in parts):
            return math.nan
        return float(np.array([part.count for part in parts], dtype=float) @ self.unit_seconds(parts, batch))


def call_costs(rows: pd.DataFrame) -> tuple[float, float] | None:
    """(seconds per call, per node): a straight line through the no-op chains of ``rows`` (``sweep_rows`` of one
    route; None without two chain lengths)."""
    noops = rows[[u.kind == "noop" for u in rows["unit"]]]
    nodes = np.array([u["nodes"] for u in noops["unit"]], dtype=float)
    if len(set(nodes.tolist())) < 2:
        return None
    a = np.c_[np.ones(len(nodes)), nodes]
    call_s, node_s = (max(float(v), 0.0) for v in np.linalg.lstsq(a, noops["t"].to_numpy(), rcond=None)[0])
    return call_s, node_s


@dataclass(frozen=True)
class UnitTargets:
    """What a kind's model learns from its sweep rows: each unit's roofline time (``prior``), its features (one
    array per unit: kinds differ in length), and the log of its own time (the call and boundary taken off) over that
    roofline time (``target``)."""

    units: list[Unit]
    t: np.ndarray
    boundary: np.ndarray
    prior: np.ndarray
    features: list[np.ndarray]
    target: np.ndarray


def unit_work(t: np.ndarray, call_s: float, boundary: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Each measured unit's own time: its time ``t`` less the call and the ``boundary`` conversions its profiler
    reported, but never less than ``MIN_WORK_SHARE`` of ``t``, nor, for the boundary's part, less than its
    roofline time ``prior`` (or ``t`` less the call, where that is shorter still).

    A profiler's boundary is a node's wall time; with two threads onnxruntime's reorder nodes are reported at up to
    98% of the whole run, overlapping the kernel they feed, and taking all of it off left convolutions at 4-20x the
    machine's GEMM peak (docs/decisions.md, 2026-11-26). Where no boundary was taken off, a unit may beat its
    roofline (data that stays in the caches outruns the copy bandwidth), so the floor guards the subtraction only.
    """
    own = t - call_s
    floor = np.where(boundary > 0, np.minimum(prior, own), -np.inf)
    return np.maximum(np.maximum(own - boundary, floor), MIN_WORK_SHARE * t)


def unit_targets(rows: pd.DataFrame, call_s: float, peak: float, bandwidth: float) -> UnitTargets:
    """``rows``' (work units of one route) ``UnitTargets`` at ``peak`` FLOP/s and ``bandwidth`` B/s."""
    units = list(rows["unit"])
    t = rows["t"].to_numpy(dtype=float)
    boundary = rows["boundary"].to_numpy(dtype=float)
    prior = np.array([roofline_seconds(u, 1, peak, bandwidth) for u in units])
    work = unit_work(t, call_s, boundary, prior)
    features = [np.asarray(unit_features(u), dtype=float) for u in units]
    return UnitTargets(units, t, boundary, prior, features, np.log(work / prior))


def unit_route(rows: pd.DataFrame, call_s: float, node_s: float, kinds: dict[str, KindModel]) -> UnitRoute:
    """One route's ``UnitRoute`` from its sweep rows (``sweep_rows`` of one group), its fixed costs and kinds."""
    first = rows.iloc[0]
    return UnitRoute(
        target=str(first["target"]),
        route=RouteKey(str(first["framework"]), str(first["compiler"]), str(first["layout"]), str(first["precision"])),
        threads=int(first["threads"]),
        peak_flops=float(rows["peak_flops"].median()),
        bandwidth=float(rows["bandwidth"].median()),
        call_s=call_s,
        node_s=node_s,
        kinds=kinds,
        rows=len(rows),
    )


def fit_unit_route(rows: pd.DataFrame) -> UnitRoute:
    """Fit one route's fixed costs and per-kind regressors from its sweep rows (``sweep_rows`` of one group)."""
    peak = float(rows["peak_flops"].median())
    bandwidth = float(rows["bandwidth"].median())
    is_noop = np.array([u.kind == "noop" for u in rows["unit"]])
    call_s, node_s = call_costs(rows) or (0.0, 0.0)
    kinds: dict[str, KindModel] = {}
    for kind, group in rows[~is_noop].groupby([u.kind for u in rows["unit"][~is_noop]]):
        if len(group) < MIN_KIND_ROWS:
            continue
        data = unit_targets(group, call_s, peak, bandwidth)
        features = np.array(data.features)
        regressor = _regressor().fit(features, data.target)
        fitted = data.prior * np.exp(regressor.predict(features))
        # kept as NumPy arrays where the copy is exact, so that predicting (and unpickling) needs no scikit-learn
        regressor = compile_ensemble(regressor, features) or regressor
        work = data.prior * np.exp(data.target)
        rmspe = float(np.sqrt(np.mean((fitted / work - 1) ** 2)))
        computed = any(u.dims.get("init_w", 1) == 0 for u in data.units)
        kinds[str(kind)] = KindModel(str(kind), len(group), regressor, rmspe, computed)
    return unit_route(rows, call_s, node_s, kinds)


Key = tuple[str, str, str, str, str, int]


class UnitFit:
    """Every swept route's unit model (each fitted when first asked for), and the model-level prediction that adds
    units up."""

    def __init__(
        self,
        rows: pd.DataFrame | None,
        cache_dir: Path | None = None,
        keys: Iterable[Key] = (),
        load_rows: Callable[[], pd.DataFrame | None] | None = None,
    ) -> None:
        """From the sweep rows (``sweep_rows``), or from the routes' ``keys`` alone with ``load_rows`` to read the
        rows when a route is not in ``cache_dir`` yet (a plan whose routes are all cached never reads them)."""
        self._rows: dict[Key, pd.DataFrame] | None = (
            None if rows is None else {_key(k): g for k, g in rows.groupby(_GROUP, sort=True)} if len(rows) else {}
        )
        self._keys = sorted(self._rows) if self._rows is not None else sorted(_key(k) for k in keys)
        self._load_rows = load_rows
        self._fitted: dict[Key, UnitRoute] = {}
        #: Where fitted routes are kept between processes (one file per route; None: not kept).
        self.cache_dir = cache_dir

    def keys(self) -> list[Key]:
        return list(self._keys)

    def _route_rows(self, key: Key) -> pd.DataFrame | None:
        if self._rows is None:
            rows = self._load_rows() if self._load_rows is not None else None
            self._rows = {} if rows is None or not len(rows) else {_key(k): g for k, g in rows.groupby(_GROUP)}
        return self._rows.get(key)

    def route(self, key: Iterable[object]) -> UnitRoute | None:
        """The unit model of (target, framework, compiler, layout, precision, threads), or None if not swept."""
        wanted = _key(tuple(key))
        if wanted not in self._fitted:
            if wanted not in self._keys:
                return None
            cached = self._load(wanted)
            if cached is None:
                rows = self._route_rows(wanted)
                if rows is None:
                    return None
                try:
                    cached = fit_unit_route(rows)
                except ImportError:  # scikit-learn missing: the whole-model fit answers alone
                    return None
                self._store(wanted, cached)
            self._fitted[wanted] = cached
        return self._fitted[wanted]

    def _cache_file(self, key: Key) -> Path | None:
        if self.cache_dir is None:
            return None
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:24]
        return self.cache_dir / f"{name}.pkl"

    def _load(self, key: Key) -> UnitRoute | None:
        path = self._cache_file(key)
        try:
            with open(path, "rb") as handle:  # type: ignore[arg-type]
                route = pickle.load(handle)  # our own cache directory, keyed by the database's digest
            return route if isinstance(route, UnitRoute) and route.key == key else None
        except Exception:  # missing, unreadable or from another version: fit again
            return None

    def _store(self, key: Key, route: UnitRoute) -> None:
        path = self._cache_file(key)
        if path is None:
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
                pickle.dump(route, handle)
            os.replace(handle.name, path)
        except OSError:  # a read-only home: the cache is only a speed-up
            return

    def fp32_sibling(self, route: UnitRoute) -> UnitRoute | None:
        target, framework, compiler, layout, _, threads = route.key
        return self.route((target, framework, compiler, layout, "fp32", threads))

    def seconds(self, route: UnitRoute, units: Sequence[Unit], batch: int) -> float:
        """The route's time for one query of ``batch`` samples through a model made of ``units`` (NaN when the
        route has not learned a kind the model uses)."""
        if not units:
            return math.nan
        times = route.unit_seconds(units, batch)
        if route.route.precision != "fp32":
            # units the quantiser leaves alone run as at fp32
            runs_fp32 = np.array([not _quantised(route, u) for u in units])
            sibling = self.fp32_sibling(route)
            if sibling is not None and runs_fp32.any():
                times[runs_fp32] = sibling.unit_seconds([u for u, f in zip(units, runs_fp32, strict=True) if f], batch)
        if np.isnan(times).any():
            return math.nan
        counts = np.array([u.count for u in units], dtype=float)
        return float(route.call_s + np.sum(counts * times))


def _quantised(route: UnitRoute, unit: Unit) -> bool:
    """Whether an int8 route's own measurements predict ``unit`` (else it runs as at fp32)."""
    model = route.kinds.get(unit.kind)
    if unit.kind not in QUANTISABLE or model is None:
        return False
    return unit.dims.get("init_w", 1) == 1 or model.computed_weights


def _key(key: tuple[object, ...]) -> Key:
    target, framework, compiler, layout, precision, threads = key
    return (str(target), str(framework), str(compiler), str(layout), str(precision), int(threads))  # type: ignore[call-overload]


def fit_units(frame: pd.DataFrame, statistic: Statistic = "auto", cache_dir: Path | None = None) -> UnitFit:
    """Unit models for every route the frame has unit-sweep rows of (fitted lazily, route by route; kept in
    ``cache_dir`` between processes when given)."""
    return UnitFit(sweep_rows(frame, statistic), cache_dir)


def cache_dir_for(db: Path) -> Path | None:
    """The cache directory of unit models fitted from ``db``: ``$APPOPT_CACHE_DIR`` (or ``$XDG_CACHE_HOME/appopt``,
    ``~/.cache/appopt``) / ``unit-models`` / the database's digest and the versions that shape the fit."""
    try:
        sklearn_version = importlib.metadata.version("scikit-learn")  # (importing it would cost a second)
        digest = file_digest(db)[:16]
    except (importlib.metadata.PackageNotFoundError, OSError):
        return None
    base = os.environ.get("APPOPT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "appopt"
    )
    return Path(base, "unit-models", f"{digest}-sklearn{sklearn_version}-v{CACHE_VERSION}")


def combine(
    whole: float,
    units: float,
    precision: str = "fp32",
    overhead_share: float = 0.0,
    largest: float | None = None,
    errors: tuple[float, float] | None = None,
    coverage: float = 1.0,
) -> float:
    """The planner's estimate from the whole-model fit and the kernel-unit sum: a weighted geometric mean of the two
    when both exist (two estimates with largely independent errors), else whichever exists.

    The whole-model fit's weight is ``whole_weight(overhead_share)``: ``WHOLE_WEIGHT`` for a model whose whole-model
    estimate is work at the fitted rates, less as more of it is the learned per-node and per-query overheads (a tiny
    model's: those are the weakly determined part of the fit, while the units measured each kernel's small-size
    cost).
    ``errors``, the route's held-out (unit sum, whole-model fit) log errors, raise the whole-model fit's weight where
    the unit sums erred more (``inverse_variance_weight``). ``coverage``, the share of the model's FLOPs in op
    classes the whole-model fit's rows exercised (``op_mix.coverage``), scales that weight: a rate no row
    exercised is the fit's pull alone, while the units swept every kind.
    At a quantised precision the unit sum alone: the whole-model fit sees the fp32 graph's totals, which cannot
    tell which layers the quantiser converted (computed weights stay fp32), while the units know (``init_w``).
    """
    if math.isnan(units) or units <= 0:
        return whole
    if precision == "int8":
        return units
    if math.isnan(whole) or whole <= 0:
        return units
    weight = whole_weight(overhead_share, largest, errors) * min(max(coverage, 0.0), 1.0)
    return math.exp(weight * math.log(whole) + (1.0 - weight) * math.log(units))


#: The whole-model fit's largest weight in ``combine`` (``whole_weight``).
WHOLE_WEIGHT = 0.35


def whole_weight(
    overhead_share: float, largest: float | None = None, errors: tuple[float, float] | None = None
) -> float:
    """The whole-model fit's weight in ``combine``: ``largest`` (default ``WHOLE_WEIGHT``)·(1 − the share of its
    estimate that is overheads).

    The factor (1 − share) was chosen by leave-one-architecture-out on two recordings of two hosts (held-out RMSPE
    22.7% -> 22.4% on the database then shipped, 22.8% -> 21.7% on a recording of a host without AMX, against the
    plain geometric mean). ``WHOLE_WEIGHT`` was ½ while the unit sums erred more than the whole-model fit; once unit
    sweeps stopped counting the copies at a one-unit model's edges and covered small models' kernels, the units alone
    erred 15.6% against the fit's 42.1%, and on the shipped database (``appopt models evaluate --whole-weight W``)
    W = 0.5, 0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0 gave held-out RMSPE 15.5, 15.2, 14.9, 14.7, 14.6, 14.5, 14.6, 15.6%
    with top-1 regret at most 1.062 from 0.3 up and 1.115 below: 0.35 keeps the better choices and most of the
    accuracy.
    (Chosen on the data it is scored on: one number, not refitted per held-out family. ``appopt models evaluate``
    also scores it chosen without each held-out family, from the same grid: 15.0% RMSPE, regret mean 1.005 and
    max 1.115, the weights chosen 0.2-0.35.)
    """
    share = min(max(float(overhead_share), 0.0), 1.0) if not math.isnan(overhead_share) else 0.0
    weight = (WHOLE_WEIGHT if largest is None else largest) * (1.0 - share)
    return max(weight, inverse_variance_weight(errors)) if errors is not None else weight


#: How much more the unit sums must have erred than the whole-model fit before ``inverse_variance_weight`` departs
#: from ``WHOLE_WEIGHT``: its choice stands for routes where the two err alike (docs/decisions.md).
UNITS_WORSE_BY = 1.5


def inverse_variance_weight(errors: tuple[float, float]) -> float:
    """The whole-model fit's weight when the route's unit sums have erred clearly more than its whole-model fit on
    held-out architectures: ``errors`` = (units, whole) root-mean-square log errors, and the weight that
    minimises the variance of two independent estimates, units² / (units² + whole²). 0 otherwise, and when either
    error is unknown: the units then keep the weight ``whole_weight`` gives them.

    Graph compilers are the case: a kernel measured alone pays the compiler's layout reorders and per-call thread
    wake-ups that a whole compiled graph pays once (docs/decisions.md, OpenVINO rows)."""
    units_error, whole_error = errors
    if not (math.isfinite(units_error) and math.isfinite(whole_error)):
        return 0.0
    if units_error <= UNITS_WORSE_BY * whole_error:
        return 0.0
    return units_error**2 / (units_error**2 + whole_error**2)
