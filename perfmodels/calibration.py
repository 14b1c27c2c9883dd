"""Carry the shipped database's fitted models over to a calibrated host: per-route, per-kind correction ratios.

``appopt calibrate`` measures a covering set of the unit sweep's own units on this host (``perfmodels.hoststore``).
For each, the shipped unit model of the same route and thread count on the shipped host (``source``) predicts a
time; the ratio measured / predicted, per route and unit kind (a geometric mean over that kind's units), says how
this host differs. A prediction on the calibrated host is the shipped one times the time-weighted mean of its
units' kind ratios (kinds not calibrated take the route's overall ratio); the no-op chains' ratio scales the
per-call cost. Its basis says so:
``transferred:<source> via calibration (N units)``.

The interval of such a prediction comes from the same rows, held out: each calibrated unit predicted with the
ratios of the others of its route (leave-one-unit-out), whose error quantiles (p10, p90) bound the step.

Example::

    >>> cal = calibration_from(store_frame, shipped.units(), "intel-r-xeon-r-processor-2c", "this-host-2c")
    >>> cal.factor(("onnxruntime", "none", "NCHWc", "fp32"), {"conv": 1e-3, "gemm": 2e-4})   # doctest: +SKIP
    1.31
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from perfmodels.lazy import lazy_import
from perfmodels.unitfit import UnitFit, sweep_rows

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

#: (framework, compiler, layout, precision): the route a correction belongs to.
RouteKey = tuple[str, str, str, str]


@dataclass(frozen=True)
class Calibration:
    """This host's correction ratios against ``source``'s shipped unit models."""

    host: str
    source: str
    units: int
    #: route -> unit kind -> geometric-mean ratio measured / shipped prediction
    ratios: dict[RouteKey, dict[str, float]] = field(default_factory=dict)
    #: route -> every calibrated unit's log ratio (the route's overall ratio and the held-out spread)
    log_ratios: dict[RouteKey, list[float]] = field(default_factory=dict)
    #: leave-one-unit-out relative errors of corrected predictions (measured / predicted - 1), all routes
    heldout_errors: tuple[float, ...] = ()
    #: What measured the host: ``calibration`` (``appopt calibrate``) or ``quick probe`` (``appopt plan``'s).
    via: str = "calibration"

    @property
    def basis(self) -> str:
        return f"transferred:{self.source} via {self.via} ({self.units} units)"

    def route_for(self, route: RouteKey) -> RouteKey | None:
        """The calibrated route that stands for ``route``: the same one, else the same framework and precision,
        else the same framework."""
        if route in self.ratios:
            return route
        for same in (lambda k: k[0] == route[0] and k[3] == route[3], lambda k: k[0] == route[0]):
            found = sorted(k for k in self.ratios if same(k))
            if found:
                return found[0]
        return None

    def factor(self, route: RouteKey, seconds_by_kind: Mapping[str, float]) -> float | None:
        """The correction of a prediction whose shipped unit times are ``seconds_by_kind`` (None: route not
        calibrated). Without unit times, the route's overall ratio."""
        key = self.route_for(route)
        if key is None:
            return None
        overall = float(np.exp(np.mean(self.log_ratios[key])))
        kinds = self.ratios[key]
        total = sum(seconds_by_kind.values())
        if not total > 0:
            return overall
        return sum(t * kinds.get(kind, overall) for kind, t in seconds_by_kind.items()) / total

    def interval(self, step_s: float) -> tuple[float, float] | None:
        """(p10, p90) of the step from the held-out errors (None with fewer than 5)."""
        if len(self.heldout_errors) < 5:
            return None
        low, high = np.quantile(np.asarray(self.heldout_errors) + 1.0, [0.1, 0.9])
        return step_s * float(low), step_s * float(high)


def calibration_from(
    store: pd.DataFrame, shipped: UnitFit, source: str, host: str, via: str = "calibration"
) -> Calibration | None:
    """The corrections of ``store``'s unit rows against ``shipped``'s models on ``source`` (None: nothing
    comparable). Wall-clock times of every row are used: a calibration is what this host has."""
    rows = sweep_rows(store, "wall")
    per_route: dict[RouteKey, list[tuple[str, float]]] = {}
    for row in rows.itertuples(index=False):
        key = (str(row.framework), str(row.compiler), str(row.layout), str(row.precision))
        model = shipped.route((source, *key, int(row.threads)))
        if model is None:
            continue
        if row.unit.kind == "noop":  # a no-op chain is the call and its nodes (``UnitRoute.call_s``, ``node_s``)
            predicted = model.call_s + row.unit.dims.get("nodes", 1) * model.node_s
        else:
            predicted = shipped.seconds(model, [row.unit], 1)
        if not (predicted > 0 and float(row.t) > 0):
            continue
        per_route.setdefault(key, []).append((row.unit.kind, math.log(float(row.t) / predicted)))
    if not per_route:
        return None
    ratios: dict[RouteKey, dict[str, float]] = {}
    log_ratios: dict[RouteKey, list[float]] = {}
    errors: list[float] = []
    for key, pairs in per_route.items():
        by_kind: dict[str, list[float]] = {}
        for kind, value in pairs:
            by_kind.setdefault(kind, []).append(value)
        ratios[key] = {kind: float(np.exp(np.mean(values))) for kind, values in by_kind.items()}
        log_ratios[key] = [v for _, v in pairs]
        for i, (kind, value) in enumerate(pairs):  # leave-one-unit-out: the others of its kind, else of its route
            others = [v for j, (k, v) in enumerate(pairs) if j != i and k == kind] or [
                v for j, (_, v) in enumerate(pairs) if j != i
            ]
            if others:
                errors.append(math.exp(value - float(np.mean(others))) - 1.0)
    units = sum(len(v) for v in log_ratios.values())
    return Calibration(host, source, units, ratios, log_ratios, tuple(errors), via)
