"""Fit the analytic prior's learned correction from benchmark rows, per target machine and route.

The model
---------
For one target (a machine, see ``perfmodels.targets``) and one measured route (framework, compiler, layout,
precision, threads) the time of one query of ``batch`` samples is modelled as a non-negative sum of costs::

    t = Σ_class w_class·FLOPs of the class  (conv, depthwise conv, gemm, gemv, norm, LRN, other)
        + w_act·activation bytes
        + w_hot·gemv weight bytes up to 1 MiB + w_cached·… up to 32 MiB + w_streamed·… beyond
        + w_conv_node·convolution nodes + w_node·other nodes + w_query

(FLOPs and activation bytes for the whole batch.) The weights of one-row-per-sample matrix products (``gemv``:
fully-connected layers) are read once per query, and at small batches reading them is their cost: the first MiB stays
in a core's own cache, the first 32 MiB in the shared cache, the rest streams from memory. Every node costs a
dispatch (a convolution node more: eager frameworks create a primitive per call) and every query a fixed overhead.
Op classes come from ``analysis.modelinfo``: depthwise convolutions and fully-connected layers have their own
weights because they cost orders of magnitude more per FLOP than dense convolutions and GEMMs, and LRN one to two
orders more per element than LayerNorm. Each ``w`` is an inverse rate the route reaches on that machine (s/FLOP,
s/byte, s/node, s/query).

The prediction is reported as the roofline prior (``RooflinePrior`` at the machine's measured GEMM peak and
bandwidth) times a correction ``t / t_prior``: the learned part. The weights minimise the rows' squared *relative*
error with pulls that keep them physical (``fit_weights``): each rate is a multiple of its roofline value (compute
at the GEMM peak, memory-bound classes at the copy bandwidth, weights at the cache or memory bandwidth), and rates of
one kind (dense matrix work, memory-bound work, weight reads) are pulled, on a log scale, toward an efficiency they
share. A rate the training rows barely exercise so takes the efficiency its route shows on related work instead of
drifting arbitrarily. The overheads have no physical prior and are pulled only weakly toward zero; they are learned
from the suite's tiny models, which come from several architecture families. A second pass moves the rates the
pulls aim at from the roofline's to what the machine's fp32 routes reach together (``fit``'s ``share_routes``).

Rows used: measured, SingleStream, inference, with model features, the median of repeated measurements; not rows
LoadGen judged INVALID for more than their length, or flagged busy (``flagged``, schema v4). The time
of a row is its median wall-clock latency, except for a row measured under load (other processes used more than
``BUSY_OTHER_CPU`` cores while it ran, or, for rows recorded before that was measured, the 1-minute load average
exceeded the core count): there a single-threaded row uses its median process CPU time (``effective_ms``), and
multi-threaded rows are left out of the fit (``unreliable``). A group needs ``MIN_GROUP_ROWS`` rows from
``MIN_GROUP_FAMILIES`` architecture families to be used for predictions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from perfmodels.features import BYTES_PER_ELEMENT, Device, Route, Workload
from perfmodels.lazy import lazy_import
from perfmodels.results_db import BUSY_OTHER_CPU, LATENCY_BOUND, LENGTH_CHECKS, on_gpu
from perfmodels.roofline import RooflinePrior
from perfmodels.targets import kernel_flags

if TYPE_CHECKING:
    import pandas as pd

    from perfmodels.compiler_ratio import CompilerRatio
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

FEATURES = (
    "conv_flops",
    "conv_dw_flops",
    "gemm_flops",
    "gemv_flops",
    "norm_flops",
    "lrn_flops",
    "other_flops",
    "activation_bytes",
    "gemv_weight_bytes_hot",
    "gemv_weight_bytes_cached",
    "gemv_weight_bytes_streamed",
    "conv_nodes",
    "other_nodes",
    "queries",
)
_INDEX = {name: i for i, name in enumerate(FEATURES)}
#: Op class -> FLOP feature; elementwise, pool and anything else share "other_flops".
_CLASS_TO_FEATURE = {c: _INDEX[f"{c}_flops"] for c in ("conv", "conv_dw", "gemm", "gemv", "norm", "lrn")}
_OTHER, _ACT = _INDEX["other_flops"], _INDEX["activation_bytes"]
_HOT, _CACHED, _STREAMED = (_INDEX[f"gemv_weight_bytes_{t}"] for t in ("hot", "cached", "streamed"))
_CONV_NODES, _NODES, _QUERIES = _INDEX["conv_nodes"], _INDEX["other_nodes"], _INDEX["queries"]
#: The FLOP features, the byte features and the overheads.
FLOP_FEATURES = slice(0, _OTHER + 1)
BYTE_FEATURES = slice(_ACT, _STREAMED + 1)
OVERHEAD_FEATURES = slice(_CONV_NODES, _QUERIES + 1)
#: Op classes whose nodes count as convolution nodes.
_CONV_CLASSES = ("conv", "conv_dw")
#: gemv weight bytes up to this size stay in a core's own cache between queries, up to ``CACHED_PARAM_BYTES`` in the
#: shared cache; the rest streams from memory.
HOT_PARAM_BYTES = 2**20
CACHED_PARAM_BYTES = 32 * 2**20
#: Bytes of weights per gemv FLOP of one sample at fp32: each weight is one multiply-add (2 FLOPs) per sample row.
_GEMV_WEIGHT_BYTES_PER_FLOP = 2.0
#: Strength of the pull of each rate's log-efficiency toward the one its group shares, per row (chosen by
#: leave-one-architecture-out on the shipped data).
DEFAULT_RIDGE = 0.05
#: Strength of the pull of each group's shared log-efficiency toward 0 (the roofline): only decides a group no row
#: uses.
GROUP_RIDGE = 1e-5
#: Features whose rates share an efficiency: dense matrix work; memory-bound work. LRN, which implementations run
#: far from any roofline, is a group of its own (its rate is the data's alone); features in no group (the weight
#: reads, whose rates the machine's measured bandwidths predict well) are pulled toward their own prior rate.
RIDGE_GROUPS: tuple[tuple[int, ...], ...] = (
    tuple(_INDEX[f] for f in ("conv_flops", "gemm_flops", "gemv_flops")),
    tuple(_INDEX[f] for f in ("conv_dw_flops", "norm_flops", "other_flops", "activation_bytes")),
    (_INDEX["lrn_flops"],),
)
#: Strength of the pull of the overheads toward zero, in units of the largest share of a row's time they could
#: explain.
OVERHEAD_RIDGE = 0.01
#: A group is used for predictions only with this many rows from this many architecture families.
MIN_GROUP_ROWS = 8
MIN_GROUP_FAMILIES = 3
#: A workload whose roofline time is this many times shorter than that of every row a group was fitted on lies
#: below the fitted range: its time would be mostly the overheads, which such a group cannot have learned, so the
#: prior answers instead. (Longer workloads extrapolate well: the overheads vanish and the rates stay.)
BELOW_RANGE_FACTOR = 10.0


@dataclass(frozen=True)
class RouteKey:
    """What a measurement's route is, in the planner's terms."""

    framework: str
    compiler: str
    layout: str
    precision: str

    def describe(self) -> str:
        return f"{self.framework}/{self.compiler}/{self.layout}/{self.precision}"


def query_features(
    flops_by_class: Mapping[str, float],
    flops_per_sample: float,
    activation_bytes_per_sample: float,
    params: float,
    batch: int,
    precision: str,
    nodes: float = 0.0,
    ops_by_class: Mapping[str, float] | None = None,
) -> np.ndarray:
    """The feature vector (``FEATURES`` order) of one query of ``batch`` samples.

    Node counts come from ``ops_by_class`` (by op class) when given, else ``nodes`` counts as non-convolution nodes.
    ``params`` is accepted for callers that have it; the cost model reads weights through the ``gemv`` class (the
    weights of other ops are reused across many outputs, so reading them hides behind their compute).
    """
    del params
    x = np.zeros(len(FEATURES))
    classified = 0.0
    for klass, flops in flops_by_class.items():
        x[_CLASS_TO_FEATURE.get(klass, _OTHER)] += flops * batch
        classified += flops
    if not flops_by_class:
        x[_CLASS_TO_FEATURE["gemm"]] = flops_per_sample * batch  # unknown split: count it as GEMM work
    elif flops_per_sample > classified * 1.001:
        x[_OTHER] += (flops_per_sample - classified) * batch
    scale = BYTES_PER_ELEMENT.get(precision, 4) / 4
    x[_ACT] = activation_bytes_per_sample * batch * scale
    weights = _GEMV_WEIGHT_BYTES_PER_FLOP * float(flops_by_class.get("gemv", 0.0)) * scale
    x[_HOT] = min(weights, HOT_PARAM_BYTES)
    x[_CACHED] = min(max(weights - HOT_PARAM_BYTES, 0.0), CACHED_PARAM_BYTES - HOT_PARAM_BYTES)
    x[_STREAMED] = max(0.0, weights - CACHED_PARAM_BYTES)
    if ops_by_class:
        x[_CONV_NODES] = sum(float(v) for k, v in ops_by_class.items() if k in _CONV_CLASSES)
        x[_NODES] = sum(float(v) for k, v in ops_by_class.items() if k not in _CONV_CLASSES)
    else:
        x[_NODES] = nodes
    x[_QUERIES] = 1.0
    return x


def workload_features(workload: Workload, precision: str) -> np.ndarray:
    return query_features(
        workload.flops_by_class,
        workload.flops_per_sample,
        workload.activation_bytes_per_sample,
        workload.params,
        workload.batch_size,
        precision,
        ops_by_class=workload.ops_by_class,
    )


def roofline_seconds(x: np.ndarray, peak_flops: float, bandwidth: float) -> float:
    """The workload's size on a machine: max(FLOPs at the peak, activations written and read + weights read at the
    bandwidth), without overheads. What ``BELOW_RANGE_FACTOR`` compares."""
    compute = float(x[FLOP_FEATURES].sum()) / peak_flops
    memory = (2 * float(x[_ACT]) + float(x[_HOT] + x[_CACHED] + x[_STREAMED])) / bandwidth
    return max(compute, memory)


def prior_seconds(x: np.ndarray, peak_flops: float, bandwidth: float) -> float:
    """The roofline prior for a feature vector at a machine's measured peaks (efficiency 1, no overheads)."""
    workload = Workload(
        flops_per_sample=float(x[FLOP_FEATURES].sum()),
        activation_bytes_per_sample=float(x[_ACT]),
        params=float(x[_HOT] + x[_CACHED] + x[_STREAMED]) / 4,
        mode="inference",
        batch_size=1,
    )
    route = Route("any", "none", (), "fp32", "NCHW", efficiency=1.0)
    device = Device("measured", "cpu", {"fp32": peak_flops}, bandwidth)
    return RooflinePrior().predict(workload, route, device).step_seconds


@dataclass(frozen=True)
class GroupFit:
    """The fitted weights for one target × route × thread count."""

    target: str
    route: RouteKey
    threads: int
    coef: tuple[float, ...]
    #: Median measured GEMM peak (FLOP/s) and bandwidth (bytes/s) of the rows: the prior's machine.
    peak_flops: float
    bandwidth: float
    rows: int
    #: Median measured bandwidth of a copy that stays in the caches (bytes/s): the prior's weight reads.
    cache_bandwidth: float
    models: tuple[str, ...]
    families: tuple[str, ...]
    train_rmspe: float
    #: Shortest and longest measured query time (s) of the rows.
    measured_range: tuple[float, float] = (0.0, math.inf)
    #: Shortest and longest ``roofline_seconds`` of the rows: the workload sizes the fit has seen.
    size_range: tuple[float, float] = (0.0, math.inf)
    #: The kernel ISA flags of the host most of the rows were measured on (empty when not recorded).
    cpu_flags: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str, str, str, int]:
        """(target, framework, compiler, layout, precision, threads): the key unit models share."""
        r = self.route
        return (self.target, r.framework, r.compiler, r.layout, r.precision, self.threads)

    @property
    def usable(self) -> bool:
        """Enough rows and architecture families for the weights to mean something (else predictions skip it)."""
        return self.rows >= MIN_GROUP_ROWS and len(self.families) >= MIN_GROUP_FAMILIES

    def seconds(self, x: np.ndarray) -> float:
        return float(np.dot(self.coef, x))

    def prior(self, x: np.ndarray) -> float:
        return prior_seconds(x, self.peak_flops, self.bandwidth)

    def whole_seconds(self, x: np.ndarray) -> float:
        """The whole-model estimate the planner combines with the kernel units: the fit, or below the fitted range
        (``below_range``) the prior at this group's peaks, since the fit cannot have learned such a workload's
        overheads."""
        return self.prior(x) if self.below_range(x) else self.seconds(x)

    def below_range(self, x: np.ndarray) -> bool:
        """Whether ``x`` is far smaller than every workload the group was fitted on (see ``BELOW_RANGE_FACTOR``)."""
        return roofline_seconds(x, self.peak_flops, self.bandwidth) * BELOW_RANGE_FACTOR < self.size_range[0]

    def overhead_seconds(self, x: np.ndarray) -> float:
        """The part of ``seconds(x)`` that is per-node and per-query overhead."""
        return float(np.dot(np.asarray(self.coef)[OVERHEAD_FEATURES], x[OVERHEAD_FEATURES]))

    def overhead_share(self, x: np.ndarray) -> float:
        """The share of ``seconds(x)`` that is overhead (0 when the estimate is not positive)."""
        total = self.seconds(x)
        return self.overhead_seconds(x) / total if total > 0 else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "route": self.route.describe(),
            "threads": self.threads,
            "coef": dict(zip(FEATURES, self.coef, strict=True)),
            "peak_gflops": self.peak_flops / 1e9,
            "bandwidth_gbs": self.bandwidth / 1e9,
            "cache_bandwidth_gbs": self.cache_bandwidth / 1e9,
            "rows": self.rows,
            "models": list(self.models),
            "families": list(self.families),
            "measured_range_s": list(self.measured_range),
            "size_range_s": list(self.size_range),
            "usable": self.usable,
            "train_rmspe": self.train_rmspe,
            "cpu_flags": list(self.cpu_flags),
        }


@dataclass(frozen=True)
class FitResult:
    groups: tuple[GroupFit, ...]
    #: Rows the fit used (one per target × route × threads × model × batch), with their feature vectors (None in a
    #: model loaded from the plan cache, which keeps only the groups).
    data: pd.DataFrame | None = field(repr=False, compare=False, default=None)
    #: Each graph compiler route's time as a fitted ratio to its framework's plain route (``compiler_ratio``).
    ratios: tuple[CompilerRatio, ...] = ()

    def targets(self) -> set[str]:
        return {g.target for g in self.groups}

    def for_target(self, target: str) -> list[GroupFit]:
        return [g for g in self.groups if g.target == target]

    def median_ratio_for(self, group: GroupFit, compiler: str) -> CompilerRatio | None:
        """For a compiler whose own rows are too few to fit, measured against ``group`` (its framework's plain
        route): the ratio model whose median ratio stands (``CompilerRatio.median_ratio``; one taken against the
        group's layout first), or None."""
        r = group.route
        if r.compiler not in ("none", ""):
            return None
        found = [q for q in self.ratios if q.target == group.target and q.route.framework == r.framework
                 and q.route.compiler == compiler and q.route.precision == r.precision and q.median_ratio is not None]
        return min(found, key=lambda q: (q.base_layout != r.layout, -q.pairs), default=None)

    def ratio_for(self, group: GroupFit) -> tuple[CompilerRatio, GroupFit] | None:
        """For a graph compiler's group: its usable ratio model and the usable group of its framework's plain route
        at the same threads the ratio multiplies (None for a plain route, or when either is missing)."""
        r = group.route
        if r.compiler in ("none", ""):
            return None
        key = (group.target, r.framework, r.compiler, r.layout, r.precision)
        ratio = next((q for q in self.ratios if q.key == key and q.usable), None)
        if ratio is None:
            return None
        base_key = (group.target, r.framework, "none", ratio.base_layout, r.precision, group.threads)
        base = next((g for g in self.groups if g.key == base_key and g.usable), None)
        return None if base is None else (ratio, base)


def _json(value: object) -> dict[str, float]:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return {}
    parsed = json.loads(str(value)) if not isinstance(value, dict) else value
    return {str(k): float(v) for k, v in parsed.items()}


Statistic = Literal["auto", "wall", "cpu"]


def measured_under_load(frame: pd.DataFrame) -> pd.Series:
    """Rows measured while other processes competed for the CPUs.

    ``other_cpu`` (other processes' CPU use during the measurement) above ``BUSY_OTHER_CPU`` where it was recorded;
    for rows written before it existed (schema v1), a 1-minute load average above the core count. Later rows
    without it were too short for the probe (kernel sweeps); their load average is no evidence either way (it
    counts the measurement's own threads), so they count as quiet.
    """
    other = frame["other_cpu"].astype("Float64") if "other_cpu" in frame else pd.Series(pd.NA, index=frame.index)
    by_other = other > BUSY_OTHER_CPU
    by_load = frame["load_avg"].astype("Float64") > frame["cores"].astype("Float64")
    if "schema_version" in frame:
        by_load = by_load & (frame["schema_version"].astype("Int64") < 2).fillna(True)
    return by_other.where(other.notna(), by_load).fillna(False).astype(bool)


def effective_ms(frame: pd.DataFrame, statistic: Statistic = "auto") -> pd.Series:
    """Per row, the time a fit uses (ms): the wall-clock median, or for one thread under load its CPU time.

    ``auto``: a single-threaded row measured under load (``measured_under_load``) uses its median process CPU time
    (other processes stretch wall time, not the CPU time one thread needs); other rows use wall time. ``cpu`` uses
    CPU time for every single-threaded row, ``wall`` for none.
    """
    wall = frame["median_ms"].astype("Float64")
    if statistic == "wall" or "cpu_ms" not in frame:
        return wall
    cpu = frame["cpu_ms"].astype("Float64")
    use_cpu = cpu.notna() & (frame["threads"].astype("Int64") == 1)
    if statistic == "auto":
        use_cpu = use_cpu & measured_under_load(frame)
    return wall.where(~use_cpu.fillna(False), cpu)


def unreliable(frame: pd.DataFrame) -> pd.Series:
    """Multi-threaded rows measured under load: their threads waited on each other behind other processes, so
    neither wall nor CPU time recovers the quiet-machine time. They stay in the database but are not fitted."""
    return (measured_under_load(frame) & (frame["threads"].astype("Int64") > 1).fillna(False)).astype(bool)


def invalid_run(verdict: object, reason: object) -> bool:
    """LoadGen judged the run INVALID for more than its length: a latency bound not met, or a reason that names no
    length check (an error, or none given)."""
    if verdict != "INVALID":
        return False
    text = reason if isinstance(reason, str) else ""
    return LATENCY_BOUND in text or not any(check in text for check in LENGTH_CHECKS)


def flagged(frame: pd.DataFrame) -> pd.Series:
    """Rows whose run LoadGen judged INVALID for more than its length (``invalid_run``) or that carry a warning flag
    (``busy``: schema v4); the fit leaves them out unless asked to keep them. Rows from before schema v4 have neither
    and are judged by ``unreliable``."""
    bad = pd.Series(False, index=frame.index)
    if "verdict" in frame:
        reasons = frame["verdict_reason"] if "verdict_reason" in frame else pd.Series(None, index=frame.index)
        verdicts = frame["verdict"].astype("string").fillna("")
        bad |= pd.Series([invalid_run(v, r) for v, r in zip(verdicts, reasons, strict=True)], index=frame.index)
    if "flags" in frame:
        bad |= frame["flags"].astype("string").fillna("").str.split().map(lambda f: "busy" in f).astype(bool)
    return bad.astype(bool)


def training_rows(frame: pd.DataFrame, statistic: Statistic = "auto", include_flagged: bool = False) -> pd.DataFrame:
    """The rows a fit can use, one per configuration (median over repeats), with ``x`` (features) and ``y`` (s).

    Rows ``flagged`` INVALID or busy are left out unless ``include_flagged``."""
    needed = ["effective_ms", "flops_per_sample", "batch", "threads", "peak_gflops"]
    if not include_flagged and len(frame):
        frame = frame[~flagged(frame)]
    frame = frame.assign(effective_ms=effective_ms(frame, statistic)) if len(frame) else frame.assign(effective_ms=[])
    if statistic == "auto" and len(frame):
        frame = frame[~unreliable(frame)]
    rows = frame[
        (frame["source"] == "measured")
        & ~on_gpu(frame)  # GPU rows are perfmodels.gpu_fit's
        & (frame["scenario"] == "SingleStream")
        & (frame["mode"].fillna("inference") == "inference")
    ].dropna(subset=needed)
    if rows.empty:
        return pd.DataFrame(
            columns=[
                "target",
                "framework",
                "compiler",
                "layout",
                "precision",
                "threads",
                "model",
                "family",
                "batch",
                "y",
                "x",
                "peak_flops",
                "bandwidth",
                "cache_bandwidth",
                "units",
                "cpu_flags",
            ]
        )
    keys = ["target", "framework", "compiler", "layout", "precision", "threads", "model", "batch"]
    records = []
    for key, group in rows.groupby(keys, dropna=False, sort=True):
        first = group.iloc[0]
        x = query_features(
            _json(first["flops_by_class"]),
            float(first["flops_per_sample"]),
            float(first["activation_bytes_per_sample"] or 0.0),
            float(first["params"] or 0.0),
            int(first["batch"]),
            str(first["precision"]),
            ops_by_class=_json(first["ops_by_class"]),
        )
        bandwidth = group["bandwidth_gbs"].astype("float64").median()
        bandwidth = float(bandwidth) if not math.isnan(bandwidth) else 10.0
        cache = group["cache_bandwidth_gbs"].astype("float64").median() if "cache_bandwidth_gbs" in group else math.nan
        records.append(
            {
                **dict(zip(keys, key, strict=True)),
                "family": str(first["family"] or first["model"]),
                "y": float(group["effective_ms"].astype("float64").median()) / 1e3,
                "x": x,
                "peak_flops": float(group["peak_gflops"].astype("float64").median()) * 1e9,
                "bandwidth": bandwidth * 1e9,
                # rows recorded before the cache bandwidth was measured: the memory bandwidth stands in
                "cache_bandwidth": (float(cache) if not math.isnan(cache) else bandwidth) * 1e9,
                "repeats": len(group),
                "units": str(first["units"]) if "units" in group and isinstance(first["units"], str) else "",
                "cpu_flags": str(first["cpu_flags"]) if isinstance(first.get("cpu_flags"), str) else "",
            }
        )
    out = pd.DataFrame.from_records(records)
    for col in ("target", "framework", "compiler", "layout", "precision", "model", "family"):
        out[col] = out[col].fillna("").astype(str)
    out["compiler"] = out["compiler"].replace("", "none")
    return out


def _prior_weights(peak_flops: float, bandwidth: float, cache_bandwidth: float, threads: int = 1) -> np.ndarray:
    """The machine's own rates (s per unit of each feature), the values the fit's pulls start from.

    Dense convolutions, GEMMs and gemv FLOPs at the GEMM peak; depthwise convolutions, normalisation, LRN and
    elementwise work are memory-bound (about half a byte, one byte, one byte and four bytes read per FLOP) at the
    copy bandwidth; activations are written and read once; weights at twice the cache bandwidth while they fit a
    core's own cache, at the cache bandwidth while they fit the shared cache, else at the memory bandwidth; overheads
    have no prior (0). The bandwidths are measured by one thread; cached weights are read by ``threads`` cores, each
    from its own caches, so their rates scale with the threads (the GEMM peak is measured at the group's threads).
    """
    cache_bandwidth *= max(threads, 1)
    rates = dict.fromkeys(FEATURES, 0.0)
    rates.update(
        conv_flops=1 / peak_flops,
        conv_dw_flops=0.5 / bandwidth,
        gemm_flops=1 / peak_flops,
        gemv_flops=1 / peak_flops,
        norm_flops=1 / bandwidth,
        lrn_flops=1 / bandwidth,
        other_flops=4 / bandwidth,
        activation_bytes=2 / bandwidth,
        gemv_weight_bytes_hot=0.5 / cache_bandwidth,
        gemv_weight_bytes_cached=1 / cache_bandwidth,
        gemv_weight_bytes_streamed=1 / bandwidth,
    )
    return np.array([rates[f] for f in FEATURES])


def nnls(a: np.ndarray, b: np.ndarray, max_iter: int = 500) -> np.ndarray:
    """Non-negative least squares, min ||a·w − b|| with w ≥ 0 (Lawson & Hanson's active-set method).

    Written out (a few variables, a few dozen rows) so loading the planner's model imports neither SciPy nor
    scikit-learn; ``tests/perfmodels`` checks it against ``scipy.optimize.nnls``.
    """
    n = a.shape[1]
    w = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    tolerance = 10 * np.finfo(float).eps * np.linalg.norm(a, 1) * max(a.shape)
    for _ in range(max_iter):
        gradient = a.T @ (b - a @ w)
        if passive.all() or gradient[~passive].max(initial=-np.inf) <= tolerance:
            break
        candidates = np.where(~passive, gradient, -np.inf)
        passive[int(np.argmax(candidates))] = True
        while True:
            z = np.zeros(n)
            z[passive] = np.linalg.lstsq(a[:, passive], b, rcond=None)[0]
            if z[passive].min() > 0:
                w = z
                break
            blocking = passive & (z <= 0)
            alpha = np.min(w[blocking] / (w[blocking] - z[blocking]))
            w = w + alpha * (z - w)
            passive &= w > tolerance
            w[~passive] = 0.0
    return w


def fit_weights(
    x: np.ndarray,
    y: np.ndarray,
    prior: np.ndarray,
    ridge: float = DEFAULT_RIDGE,
    overhead_ridge: float = OVERHEAD_RIDGE,
    groups: tuple[tuple[int, ...], ...] | None = None,
) -> np.ndarray:
    """Non-negative weights minimising the rows' squared relative error plus pulls that keep them physical.

    Each feature with a prior rate is fitted as a multiple ``v = exp(θ)`` of it. Features of one group
    (``RIDGE_GROUPS``: dense matrix work, memory-bound work, weight reads) share a log-efficiency ``η`` (fitted too)
    and each ``θ`` is pulled toward its group's ``η`` (strength ``ridge``); ``η`` is pulled very weakly toward 0 (the
    roofline), other features toward 0 directly. The pulls act on logarithms, so a rate may sit an order of magnitude
    from the roofline where the rows say so (LRN in a NumPy runtime), while a rate the rows barely exercise takes
    the efficiency its route shows on the related costs it does exercise (a runtime slow at convolutions is taken to
    be slow at GEMMs) instead of drifting arbitrarily. Features without a prior (the overheads) are fitted in units
    of the largest share of a row's time they could explain and pulled toward 0 (strength ``overhead_ridge``).

    Minimises Σ_rows (x·w/y − 1)² + n·(ridge·Σ_j (θ_j − η_g(j))² + GROUP_RIDGE·Σ_g η_g² + overhead_ridge·Σ_k v_k²)
    by Levenberg–Marquardt, started from the plain NNLS solution.
    """
    groups = RIDGE_GROUPS if groups is None else groups
    n_rows, n_features = x.shape
    a = x / y[:, None]
    column_max = np.maximum(np.abs(a).max(axis=0), 1e-30)
    has_prior = prior > 0
    unit = np.where(has_prior, prior, 1 / column_max)
    au = a * unit  # rows in units of each feature's prior (or scale)
    member_of = np.full(n_features, -1)
    grouped = [[j for j in g if has_prior[j]] for g in groups]
    grouped = [g for g in grouped if g]
    for g, members in enumerate(grouped):
        member_of[members] = g
    n_groups = len(grouped)
    scale = math.sqrt(n_rows)

    # the pulls' rows, whose layout does not change between iterations: one per feature, then one per group
    ridge_strength = scale * math.sqrt(ridge)
    overhead_strength = scale * math.sqrt(overhead_ridge)
    group_strength = scale * math.sqrt(GROUP_RIDGE)
    features = np.arange(n_features)
    in_group = has_prior & (member_of >= 0)
    pull_jac = np.zeros((n_features + n_groups, n_features + n_groups))
    pull_jac[features[has_prior], features[has_prior]] = ridge_strength
    pull_jac[features[in_group], n_features + member_of[in_group]] = -ridge_strength
    pull_jac[n_features + np.arange(n_groups), n_features + np.arange(n_groups)] = group_strength
    no_prior = features[~has_prior]

    def residuals(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        v = np.exp(theta[:n_features])
        eta = theta[n_features:]
        pulls = np.where(has_prior, ridge_strength * theta[:n_features], overhead_strength * v)
        pulls[in_group] -= ridge_strength * eta[member_of[in_group]]
        jac = np.zeros((n_rows + n_features + n_groups, n_features + n_groups))
        jac[:n_rows, :n_features] = au * v
        jac[n_rows:] = pull_jac
        jac[n_rows + no_prior, no_prior] = overhead_strength * v[no_prior]
        return np.concatenate([au @ v - 1.0, pulls, group_strength * eta]), jac

    start = nnls(au, np.ones(n_rows))
    theta = np.concatenate([np.log(np.maximum(start, 1e-3)), np.zeros(n_groups)])
    for g, members in enumerate(grouped):
        theta[n_features + g] = float(np.mean(theta[members]))
    r, jac = residuals(theta)
    cost, damping = float(r @ r), 1e-3
    for _ in range(200):
        jtj, gradient = jac.T @ jac, jac.T @ r
        step = np.linalg.solve(jtj + damping * (np.diag(np.diag(jtj)) + 1e-12 * np.eye(len(theta))), -gradient)
        trial = theta + np.clip(step, -5.0, 5.0)
        r_trial, jac_trial = residuals(trial)
        trial_cost = float(r_trial @ r_trial)
        if trial_cost < cost:
            converged = cost - trial_cost < 1e-12 * max(cost, 1e-30)
            theta, r, jac, cost = trial, r_trial, jac_trial, trial_cost
            damping = max(damping / 3, 1e-9)
            if converged:
                break
        else:
            damping *= 4
            if damping > 1e12:
                break
    return np.exp(theta[:n_features]) * unit


def _rmspe(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sqrt(np.mean(((predicted - measured) / measured) ** 2))) if len(measured) else math.nan


def fit(
    frame: pd.DataFrame,
    ridge: float = DEFAULT_RIDGE,
    data: pd.DataFrame | None = None,
    statistic: Statistic = "auto",
    overhead_ridge: float = OVERHEAD_RIDGE,
    share_routes: bool = True,
) -> FitResult:
    """Fit every target × route × threads group that has measurements (``frame``: a results DataFrame).

    With ``share_routes`` the fit runs twice: the first pass fits each group toward the machine's roofline rates;
    the second pulls each group toward the rates the fp32 routes of its machine and thread count reach *together*
    (per feature, the median over those routes of the first pass's efficiency). A cost a route's rows barely
    exercise so takes the efficiency other frameworks show on the same hardware, not the roofline's (weights a
    framework never streams are still read at the bandwidth the others measure).
    Each graph compiler's route also gets its time as a ratio to its framework's plain route
    (``compiler_ratio.fit_ratios``, ``FitResult.ratio_for``), from the same rows.
    """
    from perfmodels.compiler_ratio import fit_ratios  # (it reads this module's FEATURES)

    rows = training_rows(frame, statistic) if data is None else data
    if rows.empty:
        return FitResult((), rows)
    groups = [(key, group) for key, group in rows.groupby(_GROUP_KEYS, sort=True)]
    first = [_fit_group(key, group, ridge, overhead_ridge) for key, group in groups]
    ratios = fit_ratios(rows)
    if not share_routes:
        return FitResult(tuple(first), rows, ratios)
    shared = _shared_efficiency(first)
    second = [
        _fit_group(key, group, ridge, overhead_ridge, shared.get((fitted.target, fitted.threads)))
        for (key, group), fitted in zip(groups, first, strict=True)
    ]
    return FitResult(tuple(second), rows, ratios)


_GROUP_KEYS = ["target", "framework", "compiler", "layout", "precision", "threads"]


def _shared_efficiency(groups: list[GroupFit]) -> dict[tuple[str, int], np.ndarray]:
    """Per (target, threads): the median over the usable fp32 groups of each feature's log(rate / roofline rate)
    (0 for features without a roofline rate).

    Graph compilers' groups stay out of the median when the frameworks' own are there: what the machine reaches is
    what its frameworks reach, and a compiler's rates (untuned TVM's are 50-100x below them) would otherwise move every
    other route's prediction with each compiler measured (docs/decisions.md)."""
    logs: dict[tuple[str, int], list[np.ndarray]] = {}
    plain = {(g.target, g.threads) for g in groups if g.route.compiler in ("none", "") and g.usable}
    for g in groups:
        if g.route.precision != "fp32" or not g.usable:
            continue
        if g.route.compiler not in ("none", "") and (g.target, g.threads) in plain:
            continue
        prior = _prior_weights(g.peak_flops, g.bandwidth, g.cache_bandwidth, g.threads)
        coef = np.maximum(np.asarray(g.coef), 1e-300)
        logs.setdefault((g.target, g.threads), []).append(
            np.where(prior > 0, np.log(coef / np.where(prior > 0, prior, 1.0)), 0.0)
        )
    return {key: np.clip(np.median(np.vstack(v), axis=0), -5.0, 5.0) for key, v in logs.items()}


def _fit_group(
    key: tuple[object, ...],
    group: pd.DataFrame,
    ridge: float,
    overhead_ridge: float,
    shared_log_efficiency: np.ndarray | None = None,
) -> GroupFit:
    """One group's weights; ``shared_log_efficiency`` (see ``_shared_efficiency``) moves the rates the pulls aim at."""
    target, framework, compiler, layout, precision, threads = key
    x = np.vstack(group["x"].to_list())
    y = group["y"].to_numpy(dtype=float)
    peak = float(group["peak_flops"].median())
    bandwidth = float(group["bandwidth"].median())
    cache = float(group["cache_bandwidth"].median()) if "cache_bandwidth" in group else bandwidth
    prior = _prior_weights(peak, bandwidth, cache, int(str(threads)))
    if shared_log_efficiency is not None:
        prior = prior * np.exp(shared_log_efficiency)
    w = fit_weights(x, y, prior, ridge, overhead_ridge)
    sizes = [roofline_seconds(row, peak, bandwidth) for row in x]
    return GroupFit(
        target=str(target),
        route=RouteKey(str(framework), str(compiler), str(layout), str(precision)),
        threads=int(str(threads)),
        coef=tuple(float(v) for v in w),
        peak_flops=peak,
        bandwidth=bandwidth,
        cache_bandwidth=cache,
        rows=len(group),
        models=tuple(sorted(set(group["model"]))),
        families=tuple(sorted(set(group["family"]))),
        train_rmspe=_rmspe(x @ w, y),
        measured_range=(float(y.min()), float(y.max())),
        size_range=(min(sizes), max(sizes)),
        cpu_flags=_common_flags(group),
    )


def _common_flags(group: pd.DataFrame) -> tuple[str, ...]:
    """The kernel ISA flags most of a group's rows were measured with."""
    if "cpu_flags" not in group:
        return ()
    recorded = group["cpu_flags"].fillna("").astype(str)
    recorded = recorded[recorded != ""]
    return kernel_flags(str(recorded.mode().iloc[0]).split()) if len(recorded) else ()
