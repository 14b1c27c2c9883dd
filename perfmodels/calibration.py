"""Carry the shipped database's fitted models over to a calibrated host: per-route factors from per-kind unit
ratios that follow unit size, and from whole-model anchors.

``appopt calibrate`` measures on this host a covering set of the unit sweep's own units and a few small suite models
whole (the anchors), on each installed backend (``perfmodels.hoststore``, ``benchmarks.calibrate``).

* Units: each unit's own work (its time less each host's call, from the no-op chains) here over the same unit's
  work on the shipped host (``source``, at the nearest thread count): the source's measurement of that very unit
  where the shipped rows hold it, else its unit model's prediction. Per route and kind, a ``KindRatio``: a
  Theil-Sen line in the units' size (small units pay thread wake-ups that large ones amortise), its level shrunk
  toward the route's line by the kind's unit count (one unit measured in a burst of load moves it little). The
  route's line (``route_line``) has the median slope between two units of one kind, over all its kinds; a kind
  with one unit, or units too alike in size, takes that slope (the quick probe measures one or two of each).
  A model's *mix* is the mean of its units' ratios weighted by their shipped times (the call: the no-op ratio).
* Anchors: per route, the mean over the anchors of their time here over their time on the source, against what
  their units' mix says. Units measured alone miss what a whole model pays (or saves) around its kernels. Where the
  anchors' own mean ratio predicts each of them (from the others) clearly better than the mix does, the route's
  factor is that mean alone (``Anchor.flat``, ``flat_beats_mix``): a compiled graph's units measured one by one
  can change from host to host in ways its whole graphs do not, so a graph compiler's route takes that mean too
  where its anchors sit far from their mix (``units_miss_graphs``).

A prediction on the calibrated host is the shipped one times the route's factor: the model's mix, times the anchors'
offset where there are anchors (or the anchors' mean ratio, for a route whose mix failed them). Its basis says so:
``transferred:<source> via calibration (N units)``, with ``, M anchor models`` where there are.

The interval comes from the same rows, held out: with five or more anchors, each anchor predicted from the others
of its route (leave-one-model-out); else each unit from the others of its kind (leave-one-unit-out). Their error
quantiles (p10, p90), widened by the shipped prediction's own held-out band (the transfer carries that model's
error too), bound the step.

Example::

    >>> cal = calibration_from(store_frame, unit_fit, "intel-r-xeon-r-processor-2c", "here-2c", shipped_rows=read)
    >>> cal.factor(("onnxruntime", "none", "NCHWc", "fp32"), timed_units(unit_route, units, 1))  # doctest: +SKIP
    0.62
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from analysis.units import Unit, decode_units, encode_units, roofline_seconds
from perfmodels.lazy import lazy_import
from perfmodels.prediction import widened
from perfmodels.unitfit import (
    UnitFit,
    UnitRoute,
    call_costs,
    row_route,
    sweep_rows,
    unit_work,
    whole_rows,
)

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

#: (framework, compiler, layout, precision): the route a correction belongs to.
RouteKey = tuple[str, str, str, str]
#: A kind's ratio is shrunk toward its route's as if the route's ratio were this many more units of the kind.
SHRINK_UNITS = 2.0
#: Held-out errors an interval needs.
MIN_HELDOUT = 5
#: A kind's ratio follows its units' size (``KindRatio``) from this many units spread over ``MIN_SPREAD`` (log2).
MIN_LINE_UNITS = 2
MIN_SPREAD = 2.0
#: Two units of a kind closer in size than this (log2) give no slope to a route's pooled one (``pooled_slope``).
MIN_PAIR_SPREAD = 1.0
#: The nominal machine a unit's size is its roofline time on (FLOP/s, B/s): FLOPs and bytes in one scale.
_NOMINAL = (1e11, 2e10)
#: The call of a model, as its kind mix counts it: a no-op chain's ratio.
CALL = Unit("noop", {"nodes": 1})
#: A route's timed units (``timed_units``) weighed as its prediction pays them (unit route key, timed) -> timed.
Paid = Callable[[tuple[str, str, str, str, str, int], list[tuple[Unit, float]]], list[tuple[Unit, float]]]


def unit_size(unit: Unit) -> float:
    """log2 of the unit's roofline time on a nominal machine (``_NOMINAL``): small units pay thread wake-ups and
    calls that large ones amortise, so a host's ratio changes with size."""
    return math.log2(max(roofline_seconds(unit, 1, *_NOMINAL), 1e-12))


@dataclass(frozen=True)
class KindRatio:
    """A kind's log ratio (measured here / on the source) on one route: ``log_ratio`` at size ``centre``, changing
    by ``slope`` per doubling of size (Theil-Sen: robust to a unit measured in a burst of load), clipped to the
    range its units measured. Where its units are too few or too alike in size: the route's slope, clipped to the
    range of the route's units (``route_line``), or constant without one."""

    log_ratio: float
    units: int
    slope: float = 0.0
    centre: float = 0.0
    low: float = -math.inf
    high: float = math.inf

    def log_at(self, unit: Unit) -> float:
        return self.log_ratio if self.slope == 0.0 else self.at_size(unit_size(unit))

    def at_size(self, size: float) -> float:
        """The log ratio at ``size`` (``unit_size``)."""
        return min(max(self.log_ratio + self.slope * (size - self.centre), self.low), self.high)

    @property
    def ratio(self) -> float:
        """The ratio at the centre of the sizes measured."""
        return math.exp(self.log_ratio)


@dataclass(frozen=True)
class Anchor:
    """A route's whole models measured here and on the source."""

    #: The mean over the models of log(time here / time on the source) less log(their unit mix): what a whole
    #: model's ratio adds to its units'.
    offset: float
    models: tuple[str, ...]
    #: The mean over the models of log(time here / time on the source): the route's ratio, its units aside.
    level: float = 0.0
    #: Whether the route's factor is ``level`` alone: where its units' mix predicted the anchors (each from the
    #: others, ``anchor_errors``) worse than their plain mean did. A graph compiler's units measured alone can move
    #: apart from its whole graphs from one host to another (OpenVINO's call cost: docs/decisions.md, 2026-11-27).
    flat: bool = False

    def factor(self, mix: float, flat: bool = True) -> float:
        """The route's factor for a model whose unit mix is ``mix`` (``flat=False``: by the mix even where the
        anchors' level was chosen)."""
        return math.exp(self.level) if self.flat and flat else math.exp(self.offset) * mix


@dataclass(frozen=True)
class Calibration:
    """This host's correction ratios against ``source``'s shipped unit models and measured anchors."""

    host: str
    source: str
    units: int
    #: route -> unit kind -> its ratio measured here / on the source (shrunk toward the route's)
    ratios: dict[RouteKey, dict[str, KindRatio]] = field(default_factory=dict)
    #: route -> every calibrated unit's log ratio (the route's overall ratio is their median)
    log_ratios: dict[RouteKey, list[float]] = field(default_factory=dict)
    #: held-out relative errors of corrected predictions (measured / predicted - 1), all routes
    heldout_errors: tuple[float, ...] = ()
    #: What measured the host: ``calibration`` (``appopt calibrate``) or ``quick probe`` (``appopt plan``'s).
    via: str = "calibration"
    #: route -> its whole-model anchors
    anchors: dict[RouteKey, Anchor] = field(default_factory=dict)

    @property
    def basis(self) -> str:
        models = {m for a in self.anchors.values() for m in a.models}
        anchored = f", {len(models)} anchor models" if models else ""
        return f"transferred:{self.source} via {self.via} ({self.units} units{anchored})"

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

    def overall(self, key: RouteKey) -> float:
        """The route's ratio over all its units (1 without units)."""
        logs = self.log_ratios.get(key)
        return float(np.exp(np.median(logs))) if logs else 1.0

    def mix(self, key: RouteKey, timed: Sequence[tuple[Unit, float]], call_capped: bool = False) -> float:
        """The mean of ``key``'s ratios of the ``timed`` units (unit, shipped seconds), weighted by their seconds
        (kinds not calibrated take the route's ratio; without times, the route's ratio). ``call_capped``: the call
        (the no-op chains' kind) at no more than the route's ratio (``factor``)."""
        overall = self.overall(key)
        kinds = self.ratios.get(key, {})
        total = sum(t for _, t in timed)
        if not total > 0:
            return overall

        def ratio(unit: Unit) -> float:
            value = math.exp(kinds[unit.kind].log_at(unit)) if unit.kind in kinds else overall
            return min(value, overall) if call_capped and unit.kind == CALL.kind else value

        return sum(t * ratio(u) for u, t in timed) / total

    def factor(
        self, route: RouteKey, timed: Sequence[tuple[Unit, float]], flat: bool = True
    ) -> float | None:
        """The correction of a prediction whose shipped unit times are ``timed`` (``timed_units``; None: route
        not calibrated). ``flat=False``: by the units' mix even where the route's anchors chose their level
        (``Anchor.flat``), for work whose kernels are far larger than the anchors' (a training step's).

        A route without anchors (the quick probe's) takes its call at no more than its units' ratio: the no-op
        chains time a one-node model's call, which on some engines (OpenVINO) moves from host to host far more than
        a whole model's does, and nothing else checks it there (docs/decisions.md, 2026-11-28, the quick probe's
        call). Where a calibration measured anchors, they set the level."""
        key = self.route_for(route)
        if key is None:
            return None
        anchor = self.anchors.get(key)
        if anchor is None:
            return self.mix(key, timed, call_capped=True)
        return anchor.factor(self.mix(key, timed), flat)

    def interval(self, step_s: float, source: tuple[float, float] | None = None) -> tuple[float, float] | None:
        """(p10, p90) of the step: the held-out errors' quantiles (with at least ``MIN_HELDOUT``) widened by
        ``source``, the shipped prediction's own (p10, p90) over its step, as two independent errors (their log
        distances from 1 added in quadrature, per side). None with neither."""
        sides: list[tuple[float, float]] = []
        if len(self.heldout_errors) >= MIN_HELDOUT:
            low, high = np.quantile(np.asarray(self.heldout_errors) + 1.0, [0.1, 0.9])
            sides.append((float(low), float(high)))
        if source is not None and source[0] > 0 and source[1] > 0:
            sides.append(source)
        return widened(step_s, sides) if sides else None


def source_route(shipped: UnitFit, source: str, key: RouteKey, threads: int) -> UnitRoute | None:
    """``source``'s unit model of ``key`` at ``threads``, else at the nearest thread count it swept (more threads
    on a draw), as the planner's anchor group is chosen (``FittedModel.anchor``)."""
    routes = shipped.keys()  # (a list of keys, not a mapping's)
    swept = [k[5] for k in routes if k[:5] == (source, *key)]
    if not swept:
        return None
    nearest = min(swept, key=lambda t: (abs(t - threads), -t))
    return shipped.route((source, *key, nearest))


def timed_units(route: UnitRoute, units: Sequence[Unit], batch: int) -> list[tuple[Unit, float]]:
    """The route's call (``CALL``) and ``units`` at ``batch``, each with its predicted seconds (times its count;
    units the route cannot predict left out): the weights of a model's mix of ratios."""
    out = [(CALL, route.call_s)]
    for unit, t in zip(units, route.unit_seconds(units, batch), strict=True):
        if np.isfinite(t):
            out.append((unit.at_batch(batch), unit.count * float(t)))
    return out


def _source_unit_times(
    shipped: pd.DataFrame | None, source: str
) -> dict[tuple[RouteKey, int, str], tuple[float, float]]:
    """(route, threads, encoded unit) -> (median seconds, boundary seconds) of ``source``'s measurement of it (the
    shipped fit's rows and time rule); empty without the shipped rows."""
    if shipped is None or shipped.empty or "target" not in shipped:
        return {}
    rows = sweep_rows(shipped[shipped["target"] == source])
    return {
        ((r.framework, r.compiler, r.layout, r.precision), int(r.threads), encode_units([r.unit])): (
            float(r.t),
            float(r.boundary),
        )
        for r in rows.itertuples(index=False)
    }


def _work(t: float, call_s: float, boundary: float, prior: float) -> float:
    """A unit's own time: its measured time less the call and the boundary conversions, the boundary's part never
    below its roofline time ``prior`` (``unitfit.unit_work``)."""
    return float(unit_work(np.array([t]), call_s, np.array([boundary]), np.array([prior]))[0])


def _roofline(unit: Unit, peak_flops: float, bandwidth: float) -> float:
    return roofline_seconds(unit, 1, float(peak_flops), float(bandwidth))


def _unit_logs(
    store: pd.DataFrame,
    shipped: UnitFit,
    source: str,
    measured: dict[tuple[RouteKey, int, str], tuple[float, float]],
) -> dict[RouteKey, list[tuple[Unit, float]]]:
    """Per route, each calibrated unit and log(time here / time on the source). A unit's time is its own work, the
    call (each host's no-op chains) taken off both sides: a model pays one call, not one per unit, and an engine
    whose call costs more than its small kernels would otherwise show the call's ratio for every kind. The
    source's time is its measurement of the very unit where ``measured`` has it (the units are the sweep's own),
    else its unit model's prediction. No-op chains keep their whole time: they are the call's ratio."""
    rows = sweep_rows(store, "wall")
    per_route: dict[RouteKey, list[tuple[Unit, float]]] = {}
    for group_key, group in rows.groupby(["framework", "compiler", "layout", "precision", "threads"], sort=True):
        key = (str(group_key[0]), str(group_key[1]), str(group_key[2]), str(group_key[3]))
        model = source_route(shipped, source, key, int(group_key[4]))
        if model is None:
            continue
        here_call = (call_costs(group) or (0.0, 0.0))[0]
        for row in group.itertuples(index=False):
            there = measured.get((key, model.threads, encode_units([row.unit])))
            if row.unit.kind == "noop":  # a no-op chain is the call and its nodes (``UnitRoute.call_s``, ``node_s``)
                ratio = float(row.t) / (there[0] if there else model.call_s + row.unit["nodes"] * model.node_s)
            else:
                prior_here = _roofline(row.unit, row.peak_flops, row.bandwidth)
                here = _work(float(row.t), here_call, float(row.boundary), prior_here)
                if there is not None:
                    prior_there = _roofline(row.unit, model.peak_flops, model.bandwidth)
                    ratio = here / _work(there[0], model.call_s, there[1], prior_there)
                else:
                    ratio = here / (shipped.seconds(model, [row.unit], 1) - model.call_s)
            if ratio > 0 and math.isfinite(ratio):
                per_route.setdefault(key, []).append((row.unit, math.log(ratio)))
    return per_route


def shrunk_log(values: Sequence[float], toward: float) -> float:
    """The median of ``values`` shrunk toward ``toward`` by their count (``SHRINK_UNITS``)."""
    n = len(values)
    return (n * float(np.median(values)) + SHRINK_UNITS * toward) / (n + SHRINK_UNITS)


def pooled_slope(by_kind: dict[str, list[tuple[Unit, float]]]) -> float:
    """The median over every kind (no-op chains aside) of the slopes between two of its units (log ratio per
    doubling of size): a route's size effect, measured within kinds so that kinds' levels do not pose as one
    (0 without such a pair)."""
    slopes: list[float] = []
    for kind, pairs in by_kind.items():
        if kind == "noop":
            continue
        points = [(unit_size(u), v) for u, v in pairs]
        slopes.extend(
            (vj - vi) / (xj - xi)
            for i, (xi, vi) in enumerate(points)
            for xj, vj in points[i + 1 :]
            if abs(xj - xi) >= MIN_PAIR_SPREAD
        )
    return float(np.median(slopes)) if slopes else 0.0


def route_line(pairs: Sequence[tuple[Unit, float]], slope: float) -> KindRatio:
    """The route's line: what its units (no-op chains aside) say together, as one ``KindRatio`` with ``slope``
    (``pooled_slope``), within the route's log ratios measured. A kind with too few units of its own for a line
    takes this slope, and every kind's level is shrunk toward this line at the kind's sizes."""
    points = [(unit_size(u), v) for u, v in pairs if u.kind != "noop"] or [(0.0, v) for _, v in pairs]
    sizes = [x for x, _ in points]
    centre = float(np.median(sizes))
    level = float(np.median([v - slope * (x - centre) for x, v in points]))
    return KindRatio(level, len(points), slope, centre, min(v for _, v in points), max(v for _, v in points))


def kind_ratio(pairs: Sequence[tuple[Unit, float]], toward: float | KindRatio) -> KindRatio:
    """One kind's ``KindRatio`` from its units' log ratios, its level shrunk toward ``toward``: a log ratio, or the
    route's line at the kind's sizes. A kind too small or too alike in size for a line of its own takes the route
    line's slope where it has one, clipped to the route's range: one small unit measured says little of a large
    one, and the route's other kinds say how this host's ratio changes with size."""
    line = toward if isinstance(toward, KindRatio) else KindRatio(toward, 0)
    values = [v for _, v in pairs]
    sizes = [unit_size(u) for u, _ in pairs]
    centre = float(np.median(sizes))
    if len(pairs) < MIN_LINE_UNITS or max(sizes) - min(sizes) < MIN_SPREAD or pairs[0][0].kind == "noop":
        if line.slope == 0.0 or pairs[0][0].kind == "noop":
            return KindRatio(shrunk_log(values, line.at_size(centre)), len(pairs))
        adjusted = [v - line.slope * (x - centre) for v, x in zip(values, sizes, strict=True)]
        return KindRatio(
            shrunk_log(adjusted, line.at_size(centre)), len(pairs), line.slope, centre, line.low, line.high
        )
    slopes = [
        (values[j] - values[i]) / (sizes[j] - sizes[i])
        for i in range(len(pairs))
        for j in range(i + 1, len(pairs))
        if abs(sizes[j] - sizes[i]) > 1e-9
    ]
    slope = float(np.median(slopes))
    level = shrunk_log([v - slope * (x - centre) for v, x in zip(values, sizes, strict=True)], line.at_size(centre))
    return KindRatio(level, len(pairs), slope, centre, min(values), max(values))


def _by_kind(pairs: Sequence[tuple[Unit, float]]) -> dict[str, list[tuple[Unit, float]]]:
    by_kind: dict[str, list[tuple[Unit, float]]] = {}
    for unit, value in pairs:
        by_kind.setdefault(unit.kind, []).append((unit, value))
    return by_kind


def kind_ratios(pairs: Sequence[tuple[Unit, float]]) -> tuple[dict[str, KindRatio], list[float]]:
    """A route's kind ratios, and its units' leave-one-unit-out errors (each predicted by its kind's others,
    shrunk toward the route's line of the others)."""
    by_kind = _by_kind(pairs)
    line = route_line(pairs, pooled_slope(by_kind))
    ratios = {kind: kind_ratio(kind_pairs, line) for kind, kind_pairs in by_kind.items()}
    errors = []
    for i, (unit, value) in enumerate(pairs):
        rest = [p for j, p in enumerate(pairs) if j != i]
        if not rest:
            continue
        others = _by_kind(rest)
        rest_line = route_line(rest, pooled_slope(others))
        same = others.get(unit.kind, [])
        predicted = kind_ratio(same, rest_line).log_at(unit) if same else rest_line.at_size(unit_size(unit))
        errors.append(math.exp(value - predicted) - 1.0)
    return ratios, errors


def calibration_from(
    store: pd.DataFrame,
    shipped: UnitFit,
    source: str,
    host: str,
    via: str = "calibration",
    shipped_rows: Callable[[], pd.DataFrame | None] | None = None,
    paid: Paid | None = None,
) -> Calibration | None:
    """The corrections of ``store``'s rows against ``shipped``'s models on ``source`` (None: nothing comparable).
    Wall-clock times of every store row are used: a calibration is what this host has. ``shipped_rows`` gives the
    shipped database's rows: the source's own times of the units and anchors (without, units are compared with
    the source's unit models and anchors are not used). ``paid`` weighs an anchor's timed units as its route's
    prediction pays them (a graph compiler's, ``in_graph.as_compiled``), as the predictions it corrects do."""
    frame = shipped_rows() if shipped_rows is not None else None
    per_route = _unit_logs(store, shipped, source, _source_unit_times(frame, source))
    ratios: dict[RouteKey, dict[str, KindRatio]] = {}
    log_ratios: dict[RouteKey, list[float]] = {}
    unit_errors: list[float] = []
    for key, pairs in per_route.items():
        ratios[key], errors = kind_ratios(pairs)
        log_ratios[key] = [v for _, v in pairs]
        unit_errors.extend(errors)
    if not per_route:
        return None
    units = sum(len(v) for v in log_ratios.values())
    partial = Calibration(host, source, units, ratios, log_ratios, tuple(unit_errors), via)
    whole = whole_rows(store)
    if frame is None or not len(whole):
        return partial
    anchors, anchor_errors = _anchors(partial, whole, frame, shipped, paid)
    errors = anchor_errors if len(anchor_errors) >= MIN_HELDOUT else unit_errors
    return Calibration(host, source, units, ratios, log_ratios, tuple(errors), via, anchors)


def _anchors(
    partial: Calibration, here: pd.DataFrame, shipped: pd.DataFrame, unit_fit: UnitFit, paid: Paid | None = None
) -> tuple[dict[RouteKey, Anchor], list[float]]:
    """Per calibrated route, the anchors measured both here and on the source, and their leave-one-model-out
    errors."""
    there = whole_rows(shipped)
    there = there[there["target"] == partial.source]
    source_times: dict[tuple[RouteKey, str, int, int], list[float]] = {}
    for row in there.itertuples(index=False):
        measured = (row_route(row), str(row.model), int(row.batch), int(row.threads))
        source_times.setdefault(measured, []).append(float(row.median_ms) / 1e3)
    found: dict[RouteKey, dict[str, list[tuple[float, float]]]] = {}  # route -> model -> (log ratio, log mix)
    for row in here.itertuples(index=False):
        key = row_route(row)
        if key not in partial.ratios:
            continue
        threads = [t for (k, m, b, t) in source_times if k == key and m == row.model and b == int(row.batch)]
        route = source_route(unit_fit, partial.source, key, int(row.threads))
        if not threads or route is None:
            continue
        nearest = min(threads, key=lambda t: (abs(t - int(row.threads)), -t))
        there_s = float(np.median(np.asarray(source_times[(key, str(row.model), int(row.batch), nearest)])))
        timed = timed_units(route, decode_units(str(row.units)), int(row.batch))
        timed = paid(route.key, timed) if paid is not None else timed
        ratio = math.log(float(row.median_ms) / 1e3 / there_s)
        found.setdefault(key, {}).setdefault(str(row.model), []).append((ratio, math.log(partial.mix(key, timed))))
    anchors: dict[RouteKey, Anchor] = {}
    errors: list[float] = []
    for key, by_model in found.items():
        # one (log ratio, log mix) per model, a mean over its batches
        pairs = [(float(np.mean([r for r, _ in v])), float(np.mean([x for _, x in v]))) for v in by_model.values()]
        by_mix, flat = anchor_errors(pairs)
        offset = float(np.mean([r - x for r, x in pairs]))
        use_flat = flat_beats_mix(by_mix, flat) or units_miss_graphs(key, offset, len(pairs))
        anchors[key] = Anchor(
            offset,
            tuple(sorted(by_model)),
            float(np.mean([r for r, _ in pairs])),
            use_flat,
        )
        errors.extend(math.exp(e) - 1.0 for e in (flat if use_flat else by_mix))
    return anchors, errors


#: Anchors a route needs before its factor may be their mean ratio alone (``Anchor.flat``): each is then predicted
#: from at least two others.
MIN_FLAT_ANCHORS = 3


#: How far (a factor) a graph compiler's anchors may sit from their units' mix before its factor is their level.
#: OpenVINO's sat 1.64-2.67x off on the nine pairs of other sessions' machines (Xeon and AMD EPYC), and 1.11-1.12x in
#: the thread-count proxy (the recording host's own units and models at another thread count).
COMPILED_OFFSET_LIMIT = 1.5


def units_miss_graphs(key: RouteKey, offset: float, anchors: int) -> bool:
    """Whether a route's factor is its anchors' level (``Anchor.flat``) because its units do not measure what its
    whole graphs run on this host: a graph compiler's route (``key``'s second field other than none) whose
    ``anchors`` (at least ``MIN_FLAT_ANCHORS``) sit more than ``COMPILED_OFFSET_LIMIT`` from their mix (``offset``:
    their mean log ratio less their mean log mix), whatever ``flat_beats_mix`` says. Its units are measured one
    compiled graph each, paying a call and missing the fusions its whole models make, and how much of a unit's time
    that is changes from host to host: on an AMD EPYC (the third pair) OpenVINO's units measured alone ran 0.9-1.6x
    the Xeon's (their mix) while its whole anchors ran 0.34-0.60x; the offset took 0.39x off every model, and the
    big CNNs' predictions fell to 0.27x the Xeon's, against 0.64x measured (docs/decisions.md, 2026-11-29, a
    compiled route takes its anchors' level). Where the mix agrees with the anchors it carries what they cannot:
    how a model's own sizes move (the thread-count proxy)."""
    return key[1] != "none" and anchors >= MIN_FLAT_ANCHORS and abs(offset) > math.log(COMPILED_OFFSET_LIMIT)


def flat_beats_mix(by_mix: Sequence[float], flat: Sequence[float]) -> bool:
    """Whether the anchors' mean ratio alone predicted them (``anchor_errors``) clearly better than the unit mix
    did: with at least ``MIN_FLAT_ANCHORS``, by more than an RMS of n errors is itself uncertain (a relative
    standard error of about 1/sqrt(2n)). The units are hundreds of measurements and the anchors a few, so a near
    draw keeps the mix."""
    n = len(flat)
    return n >= MIN_FLAT_ANCHORS and _rms(flat) < _rms(by_mix) * (1.0 - 1.0 / math.sqrt(2.0 * n))


def anchor_errors(pairs: Sequence[tuple[float, float]]) -> tuple[list[float], list[float]]:
    """Leave-one-model-out log errors of a route's anchors, (log ratio, log mix) each, predicted from the others
    two ways: their mean offset over the unit mix plus the model's own mix, and their mean log ratio alone."""
    by_mix: list[float] = []
    flat: list[float] = []
    for i, (ratio, mix) in enumerate(pairs):
        rest = [p for j, p in enumerate(pairs) if j != i]
        if rest:
            by_mix.append(ratio - (float(np.mean([r - x for r, x in rest])) + mix))
            flat.append(ratio - float(np.mean([r for r, _ in rest])))
    return by_mix, flat


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else math.inf
