"""How good the fitted models are on data they were not fitted on: leave-one-architecture-out.

For each architecture family (ResNet, MobileNet, BERT, …) the models are refitted without any of its rows and then
predict them. Over all held-out predictions we report:

* RMSPE: root-mean-square of (predicted − measured) / measured;
* the share of predictions within ±10 % of the measurement;
* Spearman's rank correlation between predicted and measured times;
* top-1 regret: for every (target, threads, model, batch, precision), the measured time of the route the model
  ranks first divided by the best measured time among the routes measured there (1.0 = always picks the fastest;
  routes predicted equally fast count as a random pick among them).

The same figures for the uncorrected roofline prior (at each machine's measured peaks) show what fitting buys.

The planner's estimate combines two models (``perfmodels.unitfit.combine``): the whole-model fit, refitted without
the held-out family, and the sum of the model's kernel units predicted from the unit sweeps. The sweeps are sampled
shapes, not taken from any family's model, so they need no refit; the figures of each model alone are reported
too.
Held-out predictions are made as the planner makes them: for a workload far below the range a group was fitted on
the prior stands in for the whole-model fit (``GroupFit.whole_seconds``), and groups with too little data are not
used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analysis.units import decode_units
from perfmodels.compiler_ratio import through_framework
from perfmodels.fit import DEFAULT_RIDGE, FitResult, GroupFit, Statistic, fit, prior_seconds, training_rows
from perfmodels.in_graph import InGraph, UnitParts, fit_in_graphs, row_parts
from perfmodels.lazy import lazy_import
from perfmodels.op_mix import RouteKey, coverage, exercised_by_route
from perfmodels.unitfit import WHOLE_WEIGHT, Key, UnitFit, combine, fit_units

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

_GROUP = ["target", "framework", "compiler", "layout", "precision", "threads"]
#: One planner decision: routes compete at a fixed precision (the planner never picks int8 on its own).
_DECISION = ["target", "threads", "model", "batch", "precision"]


@dataclass(frozen=True)
class Scores:
    rmspe: float
    within_10pct: float
    spearman: float
    mean_regret: float
    max_regret: float
    #: Share of decisions where the first-ranked route is the measured fastest (ties counted as random picks).
    top1_hits: float
    predictions: int
    decisions: int

    def line(self, label: str) -> str:
        return (
            f"{label:<18} RMSPE {self.rmspe:7.1%}  within ±10% {self.within_10pct:6.1%}  Spearman {self.spearman:5.3f}"
            f"  top-1 regret mean {self.mean_regret:.3f} max {self.max_regret:.3f} (picks fastest in "
            f"{self.top1_hits:.0%} of {self.decisions})  n={self.predictions}"
        )


@dataclass(frozen=True)
class Evaluation:
    fitted: Scores
    prior: Scores
    #: One row per held-out prediction: keys, family, measured ``y`` and ``predicted`` seconds, ``prior`` seconds.
    predictions: pd.DataFrame = field(repr=False)
    #: Families that could not be held out (they were the only data of a group).
    skipped: tuple[str, ...] = ()
    #: The same rows predicted by a fit on all families: the floor the features reach on data they have seen (the
    #: gap to ``fitted`` is what generalising to a new architecture costs).
    in_sample: Scores | None = None
    #: The whole-model fit alone, and the kernel-unit sum alone (on the predictions it covers).
    whole: Scores | None = None
    units: Scores | None = None
    #: The combination with the whole-model fit's weight chosen without each held-out family (``nested_weights``),
    #: and the weight each family got.
    nested: Scores | None = None
    nested_weights: dict[str, float] = field(default_factory=dict)
    #: Each route's held-out (unit sum, whole-model fit) root-mean-square log errors (``route_errors``).
    route_errors: dict[tuple[object, ...], tuple[float, float]] = field(default_factory=dict)

    def by_precision(self) -> dict[str, Scores]:
        """The fitted model's scores on each precision's held-out predictions (routes compete within one)."""
        return {str(p): scores(rows, "predicted") for p, rows in self.predictions.groupby("precision")}

    def lines(self) -> list[str]:
        out = [
            "leave-one-architecture-out over "
            f"{self.predictions['family'].nunique()} families, {len(self.predictions)} held-out predictions",
            self.fitted.line("fitted model"),
            self.prior.line("roofline prior"),
        ]
        for label, part in (("  whole-model fit", self.whole), ("  kernel units", self.units)):
            if part is not None and part.predictions:
                out.append(part.line(label))
        if self.nested is not None:
            chosen = ", ".join(str(w) for w in sorted(set(self.nested_weights.values())))
            out.append(self.nested.line("  nested weight"))
            out.append(
                f"    (the whole-model fit's weight chosen without each held-out family: {chosen}; the planner's"
                f" is {WHOLE_WEIGHT})"
            )
        if self.in_sample is not None:
            out.append(self.in_sample.line("in-sample fit"))
        out.extend(self.by_compiler_lines())
        per_precision = self.by_precision()
        if len(per_precision) > 1:
            out.extend(s.line(f"  fitted, {p}") for p, s in sorted(per_precision.items()))
        below = int(self.predictions["below_range"].sum()) if "below_range" in self.predictions else 0
        if below:
            out.append(f"{below} held-out prediction(s) fell below the fitted range: the prior stood in for the fit")
        if self.skipped:
            out.append(f"not evaluated (no other data for their route): {', '.join(self.skipped)}")
        return out

    def by_compiler_lines(self) -> list[str]:
        """The fitted model's scores on the frameworks' plain routes alone, then with each graph compiler's routes
        among the choices (none when no compiler was measured)."""
        p = self.predictions
        compilers = sorted(set(p["compiler"].astype(str)) - {"none"})
        if not compilers or not (p["compiler"] == "none").any():
            return []
        return [
            scores(p[p["compiler"] == "none"], "predicted").line("  frameworks alone"),
            *(scores(p[p["compiler"].isin(["none", c])], "predicted").line(f"  + {c}"[:18]) for c in compilers),
        ]

    def decision_lines(self, worst: int = 10) -> list[str]:
        """The ``worst`` decisions by top-1 regret (``decisions``), one line each: the measured fastest route and
        the route ranked first, each with its predicted and measured ms."""
        table = decisions(self.predictions, "predicted").head(worst)
        out = [f"the {len(table)} worst held-out decisions (regret: measured ms of the first-ranked / of the fastest):"]
        for _, d in table.iterrows():
            out.append(
                f"  {d['regret']:.3f} {d['model']} b{d['batch']} {d['threads']}t {d['precision']}: fastest"
                f" {d['best']} {d['best_predicted_ms']:.3f}/{d['best_ms']:.3f}, ranked first {d['chosen']}"
                f" {d['chosen_predicted_ms']:.3f}/{d['chosen_ms']:.3f} (predicted/measured ms)"
            )
        return out

    def per_family(self) -> pd.DataFrame:
        """RMSPE and worst error per held-out family."""
        p = self.predictions.assign(err=(self.predictions["predicted"] - self.predictions["y"]) / self.predictions["y"])
        return p.groupby("family")["err"].agg(
            rmspe=lambda e: float(np.sqrt(np.mean(e**2))), worst=lambda e: float(e.abs().max()), n="count"
        )


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (ties get their average rank), without SciPy."""
    ranks_a = pd.Series(a).rank().to_numpy()
    ranks_b = pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def scores(predictions: pd.DataFrame, column: str) -> Scores:
    """Accuracy and ranking figures of ``predictions[column]`` against ``predictions["y"]``."""
    y = predictions["y"].to_numpy(dtype=float)
    p = predictions[column].to_numpy(dtype=float)
    rel = (p - y) / y
    regrets, hits = [], []
    for _, decision in predictions.groupby(_DECISION):
        if len(decision) < 2:
            continue
        predicted = decision[column].to_numpy(dtype=float)
        # routes predicted equally fast (the prior cannot tell routes apart) are picked at random: expected figures
        tied = decision["y"].to_numpy(dtype=float)[predicted <= predicted.min() * (1 + 1e-9)]
        best = float(decision["y"].min())
        regrets.append(float(np.mean(tied)) / best)
        hits.append(float(np.mean(tied == best)))
    rho = spearman(p, y) if len(y) > 2 else math.nan
    return Scores(
        rmspe=float(np.sqrt(np.mean(rel**2))) if len(rel) else math.nan,
        within_10pct=float(np.mean(np.abs(rel) <= 0.10)) if len(rel) else math.nan,
        spearman=rho,
        mean_regret=float(np.mean(regrets)) if regrets else math.nan,
        max_regret=float(np.max(regrets)) if regrets else math.nan,
        top1_hits=float(np.mean(hits)) if hits else math.nan,
        predictions=len(y),
        decisions=len(regrets),
    )


def decisions(predictions: pd.DataFrame, column: str) -> pd.DataFrame:
    """One row per decision of two or more routes (``_DECISION``), worst top-1 regret first: the measured fastest
    route and the one ``column`` ranks first (the first of equally ranked ones; ``scores`` counts ties as a random
    pick), with their predicted and measured ms."""
    records = []
    for key, decision in predictions.groupby(_DECISION):
        if len(decision) < 2:
            continue
        best = decision.loc[decision["y"].astype(float).idxmin()]
        chosen = decision.loc[decision[column].astype(float).idxmin()]
        records.append(
            {
                **dict(zip(_DECISION, key, strict=True)),
                "regret": float(chosen["y"]) / float(best["y"]),
                **{side: _route_name(r) for side, r in (("best", best), ("chosen", chosen))},
                **{f"{side}_ms": float(r["y"]) * 1e3 for side, r in (("best", best), ("chosen", chosen))},
                **{f"{side}_predicted_ms": float(r[column]) * 1e3 for side, r in (("best", best), ("chosen", chosen))},
            }
        )
    table = pd.DataFrame.from_records(records)
    return table.sort_values("regret", ascending=False, kind="stable", ignore_index=True) if records else table


def _route_name(row: pd.Series) -> str:
    return f"{row['framework']}/{row['compiler']}/{row['layout']}"


def leave_one_architecture_out(
    frame: pd.DataFrame,
    ridge: float = DEFAULT_RIDGE,
    statistic: Statistic = "auto",
    threads: int | None = None,
    share_routes: bool = True,
    units: bool = True,
    whole_weight: float | None = None,
    nested: bool = True,
) -> Evaluation:
    """Hold out each family in turn, refit on the rest, predict it; score all held-out predictions.

    ``threads`` restricts the evaluation to measurements at that thread count; ``share_routes`` is ``fit``'s;
    ``units``: combine with the kernel-unit model where the frame has unit sweeps; ``whole_weight``: the whole-model
    fit's largest weight in the combination (``unitfit.combine``; default ``unitfit.WHOLE_WEIGHT``); ``nested``: also
    score the combination with that weight chosen without the held-out family (``nested_weights``).
    """
    unit_fit = fit_units(frame, statistic) if units else None
    data = training_rows(frame, statistic)
    if threads is not None:
        data = data[data["threads"] == threads]
    if data.empty:
        raise ValueError("no measured SingleStream rows with model features to evaluate on")
    by_units = UnitLookup(unit_fit, data)
    parts, skipped = [], set()
    for family in sorted(data["family"].unique()):
        part = _held_out(frame, data, family, (family,), by_units, ridge, share_routes)
        if len(part) < (data["family"] == family).sum():
            skipped.add(family)
        parts.append(part)
    predictions = pd.concat(parts, ignore_index=True)
    if predictions.empty:
        raise ValueError("no family could be held out: every route was measured on one family only")
    if whole_weight is None:  # a weight asked for (``--whole-weight``) is scored as given, for every route
        predictions = predictions.join(route_errors_without_family(predictions))
        predictions = predictions.join(base_errors_without_family(predictions))
    predictions["predicted"] = _combined(predictions, whole_weight)
    weights = nested_weights(frame, data, by_units, ridge, share_routes) if nested and units else {}
    if weights:
        predictions["nested"] = _combined(predictions, predictions["family"].map(weights))
    covered = predictions[predictions["units"].notna()]
    return Evaluation(
        scores(predictions, "predicted"),
        scores(predictions, "prior"),
        predictions,
        tuple(sorted(skipped)),
        _in_sample(frame, data, predictions, by_units, ridge, share_routes, whole_weight),
        whole=scores(predictions, "whole"),
        units=scores(covered, "units") if len(covered) else None,
        nested=scores(predictions, "nested") if weights else None,
        nested_weights=weights,
        route_errors=route_errors(predictions),
    )


#: The whole-model fit's largest weights that ``nested_weights`` chooses among (``unitfit.whole_weight``).
WEIGHT_GRID = tuple(round(0.05 * i, 2) for i in range(11))


def nested_weights(
    frame: pd.DataFrame,
    data: pd.DataFrame,
    by_units: UnitLookup | Mapping[object, float],
    ridge: float = DEFAULT_RIDGE,
    share_routes: bool = True,
) -> dict[str, float]:
    """For each family, the whole-model fit's largest weight (of ``WEIGHT_GRID``) that scores best (lowest RMSPE) on
    the *other* families held out one at a time, each predicted by a fit without it and without that family: the
    family's nested figures owe nothing to its own measurements.

    ``unitfit.WHOLE_WEIGHT`` was chosen once on every family's held-out predictions; the nested figures say what
    choosing it costs on a family it never saw. One whole-model fit per pair of families, which predicts both (the
    fit without ``outer`` and ``family`` serves either as the outer one); the unit predictions ``by_units`` (by
    ``data`` index) are made once.
    """
    if not isinstance(by_units, UnitLookup):
        by_units = UnitLookup(None, data, own=by_units)
    families = sorted(data["family"].unique())
    held: dict[tuple[str, str], pd.DataFrame] = {}
    for i, first in enumerate(families):
        for second in families[i + 1 :]:
            without = _fit_without(frame, data, (first, second), by_units, ridge, share_routes)
            held[(first, second)] = _predict_family(without, data, second, by_units)
            held[(second, first)] = _predict_family(without, data, first, by_units)
    chosen = {}
    for outer in families:
        inner = [held[(outer, family)] for family in families if family != outer]
        rows = pd.concat(inner, ignore_index=True) if inner else pd.DataFrame()
        if rows.empty:
            continue
        errors = {weight: _rmspe(rows, _combined(rows, weight)) for weight in WEIGHT_GRID}
        chosen[outer] = min(errors, key=lambda weight: (errors[weight], weight))
    return chosen


def _held_out(
    frame: pd.DataFrame,
    data: pd.DataFrame,
    family: str,
    without: tuple[str, ...],
    by_units: UnitLookup,
    ridge: float,
    share_routes: bool,
) -> pd.DataFrame:
    """``family``'s rows predicted by a fit on ``data`` less the families ``without``: the whole-model, prior and
    unit estimates, and the share of the whole-model estimate that is overheads (rows of routes the fit cannot
    answer are left out)."""
    return _predict_family(_fit_without(frame, data, without, by_units, ridge, share_routes), data, family, by_units)


@dataclass(frozen=True)
class _FitWithout:
    """The fits on ``data`` less some families: whole-model, in-graph scales, and the op classes each route saw."""

    result: FitResult
    in_graph: Mapping[Key, InGraph]
    seen: Mapping[RouteKey, tuple[float, ...]]


def _fit_without(
    frame: pd.DataFrame,
    data: pd.DataFrame,
    without: tuple[str, ...],
    by_units: UnitLookup,
    ridge: float,
    share_routes: bool,
) -> _FitWithout:
    training = data[~data["family"].isin(without)]
    result = fit(frame, ridge=ridge, data=training, share_routes=share_routes)
    return _FitWithout(result, fit_in_graphs(training, by_units.parts), exercised_by_route(training))


def _predict_family(fitted: _FitWithout, data: pd.DataFrame, family: str, by_units: UnitLookup) -> pd.DataFrame:
    groups = {g.key: g for g in fitted.result.groups if g.usable}
    records = []
    for index, row in data[data["family"] == family].iterrows():
        group = groups.get(tuple(row[k] for k in _GROUP))
        if group is None:
            continue
        records.append(
            {
                **{k: row[k] for k in [*_GROUP, "model", "family", "batch"]},
                "y": row["y"],
                **_estimates(fitted.result, group, index, row, by_units, fitted.in_graph, fitted.seen),
                "prior": prior_seconds(row["x"], row["peak_flops"], row["bandwidth"]),
            }
        )
    return pd.DataFrame.from_records(records)


#: The columns ``_estimates`` gives a row of a graph compiler's route predicted through its framework's plain route
#: (NaN elsewhere).
_BASE_COLUMNS = ("base_whole", "base_units", "base_overhead_share", "ratio", "base_layout", "base_coverage")


def _estimates(
    result: FitResult,
    group: GroupFit,
    index: object,
    row: pd.Series,
    by_units: UnitLookup,
    in_graph: Mapping[Key, InGraph] | None = None,
    seen: Mapping[RouteKey, tuple[float, ...]] | None = None,
) -> dict:
    """What the planner combines for one row of ``group``'s route: the whole-model estimate, the unit sum (as the
    compiled graph pays it, for a compiler with a usable ``in_graph`` fit), the overhead share and the share of the
    row's FLOPs in op classes the fit's rows of the route exercised (``op_mix.coverage`` of ``seen``); for a graph
    compiler with a ratio model (``FitResult.ratio_for``) and no unit sum of its own, the same of its framework's
    plain route and the fitted ratio (``compiler_ratio.through_framework``)."""
    x = row["x"]
    units = by_units.own(index)
    scale = (in_graph or {}).get(group.key)
    parts = by_units.parts(index) if scale is not None and scale.usable and not math.isnan(units) else None
    if scale is not None and parts is not None:
        units = scale.seconds(parts)
    out: dict[str, object] = {
        "whole": group.whole_seconds(x),  # as the planner has it
        "units": units,
        "overhead_share": group.overhead_share(x),
        "below_range": group.below_range(x),
        "coverage": coverage(x, (seen or {}).get(group.key)),
        **dict.fromkeys(_BASE_COLUMNS, math.nan),
    }
    through = result.ratio_for(group) if math.isnan(units) else None
    if through is not None:
        ratio, base = through
        out.update(
            base_whole=base.whole_seconds(x),
            base_units=by_units.at(index, base.key),
            base_overhead_share=base.overhead_share(x),
            ratio=ratio.ratio(x, int(row["batch"]), int(row["threads"])),
            base_layout=base.route.layout,
            base_coverage=coverage(x, (seen or {}).get(base.key)),
        )
    return out


class UnitLookup:
    """The kernel-unit sums of ``data``'s rows (by index) on their own route or another, each computed once
    (``own``: sums given for the rows' own routes, by index)."""

    def __init__(self, unit_fit: UnitFit | None, data: pd.DataFrame, own: Mapping[object, float] | None = None) -> None:
        self.unit_fit, self.data = unit_fit, data
        self._cache: dict[tuple[object, tuple[object, ...]], float] = {}
        self._parts: dict[object, UnitParts | None] = {}
        for index, seconds in (own or {}).items():
            row = data.loc[index]
            self._cache[(index, tuple(row[k] for k in _GROUP))] = seconds

    def at(self, index: object, key: tuple[object, ...]) -> float:
        """Row ``index``'s unit sum on the route ``key`` (target, framework, compiler, layout, precision, threads)."""
        if (index, key) not in self._cache:
            row = self.data.loc[index]
            self._cache[(index, key)] = unit_seconds(self.unit_fit, row, key)
        return self._cache[(index, key)]

    def own(self, index: object) -> float:
        row = self.data.loc[index]
        return self.at(index, tuple(row[k] for k in _GROUP))

    def parts(self, index: object) -> UnitParts | None:
        """Row ``index``'s unit sum on its own route, split (``in_graph.row_parts``; None without)."""
        if index not in self._parts:
            self._parts[index] = row_parts(self.unit_fit, self.data.loc[index])
        return self._parts[index]


def _combined(rows: pd.DataFrame, largest: float | pd.Series | None) -> list[float]:
    """``unitfit.combine`` of each row's whole-model and unit estimates, the whole-model fit's largest weight
    ``largest`` (one for all rows, or one per row; None: the planner's), and the route's errors where ``rows``
    carry them (``units_error``, ``whole_error``). A row with a compiler ratio (``_estimates``) joins its own
    whole-model fit with its framework's plain route so combined (with that route's errors, ``base_units_error``,
    ``base_whole_error``) times the ratio (``compiler_ratio.through_framework``)."""
    weights = largest if isinstance(largest, pd.Series) else pd.Series(largest, index=rows.index, dtype=object)
    has_errors = {"units_error", "whole_error"} <= set(rows.columns)
    has_base_errors = {"base_units_error", "base_whole_error"} <= set(rows.columns)
    out = []
    for (_, r), w in zip(rows.iterrows(), weights, strict=True):
        largest_weight = None if pd.isna(w) else float(w)
        if "ratio" in rows and not pd.isna(r["ratio"]):
            errors = (float(r["base_units_error"]), float(r["base_whole_error"])) if has_base_errors else None
            base = combine(
                r["base_whole"], r["base_units"], r["precision"], r["base_overhead_share"], largest_weight, errors,
                _coverage(r, "base_coverage"),
            )
            out.append(through_framework(float(r["whole"]), base, float(r["ratio"])))
            continue
        errors = (float(r["units_error"]), float(r["whole_error"])) if has_errors else None
        out.append(
            combine(
                r["whole"], r["units"], r["precision"], r["overhead_share"], largest_weight, errors,
                _coverage(r, "coverage"),
            )
        )
    return out


def _coverage(row: pd.Series, column: str) -> float:
    """The row's ``op_mix.coverage`` in ``column`` (1 where not recorded)."""
    value = row.get(column, math.nan)
    return 1.0 if value is None or pd.isna(value) else float(value)


def _log_errors(rows: pd.DataFrame) -> pd.DataFrame:
    """Squared log errors of the unit sum and of the whole-model fit, on rows where both exist."""
    y = rows["y"].astype(float)
    both = rows[rows["units"].astype(float).gt(0) & rows["whole"].astype(float).gt(0)]
    return pd.DataFrame(
        {
            "units": np.log(both["units"].astype(float) / y[both.index]) ** 2,
            "whole": np.log(both["whole"].astype(float) / y[both.index]) ** 2,
        }
    )


def route_errors(predictions: pd.DataFrame) -> dict[tuple[object, ...], tuple[float, float]]:
    """Per route (``_GROUP``): root-mean-square log error of the unit sums and of the whole-model fit over its
    held-out predictions (the planner weighs the two estimates by them, ``unitfit.inverse_variance_weight``)."""
    squared = _log_errors(predictions)
    keyed = squared.join(predictions[_GROUP])
    return {
        tuple(key): (float(np.sqrt(part["units"].mean())), float(np.sqrt(part["whole"].mean())))
        for key, part in keyed.groupby(_GROUP)
    }


def base_errors_without_family(predictions: pd.DataFrame) -> pd.DataFrame:
    """For the rows predicted through their framework's plain route (``_estimates``): that route's
    ``route_errors_without_family`` for the row's family, as ``base_units_error`` and ``base_whole_error`` (NaN
    elsewhere)."""
    errors = route_errors_without_family(predictions)
    by_route_family = {
        (*(r[k] for k in _GROUP), r["family"]): (e["units_error"], e["whole_error"])
        for (_, r), (_, e) in zip(predictions.iterrows(), errors.iterrows(), strict=True)
    }
    out = pd.DataFrame(np.nan, index=predictions.index, columns=["base_units_error", "base_whole_error"])
    if "base_layout" not in predictions:
        return out
    for index, r in predictions[predictions["base_layout"].notna()].iterrows():
        key = (r["target"], r["framework"], "none", r["base_layout"], r["precision"], r["threads"], r["family"])
        out.loc[index] = by_route_family.get(key, (np.nan, np.nan))
    return out


def route_errors_without_family(predictions: pd.DataFrame) -> pd.DataFrame:
    """``route_errors`` for each prediction from its route's *other* families only, so that a held-out family's
    weights owe nothing to its own measurements (columns ``units_error``, ``whole_error``; NaN where the route has
    no other family)."""
    squared = _log_errors(predictions).join(predictions["family"])
    out = pd.DataFrame(np.nan, index=predictions.index, columns=["units_error", "whole_error"])
    for _, route in predictions.groupby(_GROUP):
        measured = squared.loc[squared.index.intersection(route.index)]
        for family, rows in route.groupby("family"):
            others = measured[measured["family"] != family]
            if others.empty:
                continue
            out.loc[rows.index, "units_error"] = float(np.sqrt(others["units"].mean()))
            out.loc[rows.index, "whole_error"] = float(np.sqrt(others["whole"].mean()))
    return out


def _rmspe(rows: pd.DataFrame, predicted: list[float]) -> float:
    y = rows["y"].to_numpy(dtype=float)
    return float(np.sqrt(np.mean(((np.asarray(predicted, dtype=float) - y) / y) ** 2)))


def unit_seconds(unit_fit: UnitFit | None, row: pd.Series, key: tuple[object, ...] | None = None) -> float:
    """The kernel-unit model's time for a ``training_rows`` row on its route, or on the route ``key`` (NaN without
    sweeps for the route or units)."""
    if unit_fit is None or not row.get("units"):
        return math.nan
    route = unit_fit.route(tuple(row[k] for k in _GROUP) if key is None else key)
    if route is None:
        return math.nan
    return unit_fit.seconds(route, decode_units(row["units"]), int(row["batch"]))


def _in_sample(
    frame: pd.DataFrame,
    data: pd.DataFrame,
    predictions: pd.DataFrame,
    by_units: UnitLookup,
    ridge: float,
    share_routes: bool,
    whole_weight: float | None,
) -> Scores:
    """Scores of a fit on every family, on the rows that were held out one family at a time."""
    result = fit(frame, ridge=ridge, data=data, share_routes=share_routes)
    in_graph = fit_in_graphs(data, by_units.parts)
    seen = exercised_by_route(data)
    groups = {g.key: g for g in result.groups}
    keys = [*_GROUP, "model", "batch"]
    index_of = {tuple(row[k] for k in keys): index for index, row in data.iterrows()}
    estimates = []
    for _, row in predictions.iterrows():
        index = index_of[tuple(row[k] for k in keys)]
        group = groups[tuple(row[k] for k in _GROUP)]
        estimates.append(_estimates(result, group, index, data.loc[index], by_units, in_graph, seen))
    columns = ["whole", "units", "overhead_share", "coverage", *_BASE_COLUMNS]
    refitted = pd.DataFrame.from_records(estimates, index=predictions.index)[columns]
    in_sample = predictions.drop(columns=[c for c in columns if c in predictions]).join(refitted)
    return scores(in_sample.assign(in_sample=_combined(in_sample, whole_weight)), "in_sample")


@dataclass(frozen=True)
class HostEvaluation:
    """Leave-one-host-out: each host's measurements predicted by the whole-model fits of the other hosts."""

    fitted: Scores
    prior: Scores
    by_host: dict[str, Scores]
    predictions: pd.DataFrame = field(repr=False)

    def lines(self) -> list[str]:
        return [
            "leave-one-host-out (whole-model fits of the other hosts, same route and threads):",
            self.fitted.line("fitted"),
            self.prior.line("roofline prior"),
            *(scores_.line(f"  held out {host}") for host, scores_ in sorted(self.by_host.items())),
        ]


def leave_one_host_out(
    frame: pd.DataFrame, ridge: float = DEFAULT_RIDGE, statistic: Statistic = "auto"
) -> HostEvaluation:
    """Hold out each host (target key) in turn, fit on the others, and predict its rows with the group of the same
    route and thread count (from the host with most rows of it); ValueError with fewer than two measured hosts."""
    data = training_rows(frame, statistic)
    hosts = sorted(str(t) for t in data["target"].unique())
    if len(hosts) < 2:
        raise ValueError(
            f"leave-one-host-out needs measurements of two or more hosts; found {', '.join(hosts) or 'none'}"
        )
    records = []
    for host in hosts:
        result = fit(frame, ridge=ridge, data=data[data["target"] != host])
        by_route: dict[tuple[object, ...], GroupFit] = {}
        for g in sorted((g for g in result.groups if g.usable), key=lambda g: (-g.rows, g.target)):
            by_route.setdefault((g.route.framework, g.route.compiler, g.route.layout, g.route.precision, g.threads), g)
        for _, row in data[data["target"] == host].iterrows():
            group = by_route.get(tuple(row[k] for k in _GROUP[1:]))
            if group is None:
                continue
            records.append(
                {
                    **{k: row[k] for k in [*_GROUP, "model", "family", "batch"]},
                    "y": row["y"],
                    "predicted": group.whole_seconds(row["x"]),
                    "prior": prior_seconds(row["x"], row["peak_flops"], row["bandwidth"]),
                    "from": group.target,
                }
            )
    predictions = pd.DataFrame.from_records(records)
    if predictions.empty:
        raise ValueError("no host shares a measured route and thread count with another: nothing to predict")
    by_host = {str(h): scores(rows, "predicted") for h, rows in predictions.groupby("target")}
    return HostEvaluation(scores(predictions, "predicted"), scores(predictions, "prior"), by_host, predictions)
