"""Fit the analytic prior's learned correction from benchmark rows, per target machine and route.

The model
---------
For one target (a machine, see ``perfmodels.targets``) and one measured route (framework, compiler, layout,
precision, threads) the time of one query of ``batch`` samples is modelled as a non-negative sum of costs::

    t = w_conv·conv FLOPs + w_gemm·gemm FLOPs + w_norm·norm FLOPs + w_other·other FLOPs
        + w_act·activation bytes + w_cached·parameter bytes up to 32 MiB + w_streamed·parameter bytes beyond
        + w_node·graph nodes

(FLOPs and activation bytes for the whole batch; parameters are read once per query, and the first 32 MiB of them
stay in the caches between queries; every node costs a dispatch). Each ``w`` is an inverse rate the route reaches
on that machine (s/FLOP, s/byte, s/node). Normalisation has its own weight because LRN and LayerNorm kernels cost
orders of magnitude more per FLOP than elementwise ones. The prediction is reported as the
roofline prior (``RooflinePrior`` at the machine's measured GEMM peak and bandwidth) times a correction
``t / t_prior``: the learned part. The weights are fitted by non-negative least squares on *relative* error
(Lawson–Hanson NNLS on rows scaled by 1/t), with a light ridge pull toward the
roofline's own rates so a family missing from the data does not leave a weight unconstrained.

Rows used: measured, SingleStream, inference, with model features, the median of repeated measurements. The time
of a row is its median wall-clock latency, except on a busy machine (1-minute load average above its core count):
there a single-threaded row uses its median process CPU time (``effective_ms``), and multi-threaded rows are left
out of the fit (``unreliable``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pandas as pd

from perfmodels.features import BYTES_PER_ELEMENT, Device, Route, Workload
from perfmodels.roofline import RooflinePrior

FEATURES = (
    "conv_flops",
    "gemm_flops",
    "norm_flops",
    "other_flops",
    "activation_bytes",
    "param_bytes_cached",
    "param_bytes_streamed",
    "nodes",
)
#: Op class -> feature index; elementwise, pool and anything else share "other_flops". Normalisation has its own
#: weight because its kernels differ by orders of magnitude per FLOP from elementwise ones (LRN, LayerNorm).
_CLASS_TO_FEATURE = {"conv": 0, "gemm": 1, "norm": 2}
_OTHER, _ACT, _PARAM, _STREAMED, _NODES = 3, 4, 5, 6, 7
#: Parameter bytes up to this size are taken to stay in the caches between queries; the rest streams from memory.
CACHED_PARAM_BYTES = 32 * 2**20
#: Strength of the pull toward the roofline's rates, relative to one row's squared relative error (chosen by
#: leave-one-architecture-out on the shipped data).
DEFAULT_RIDGE = 0.3


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
) -> np.ndarray:
    """The feature vector (``FEATURES`` order) of one query of ``batch`` samples (``nodes``: graph node count)."""
    x = np.zeros(len(FEATURES))
    classified = 0.0
    for klass, flops in flops_by_class.items():
        index = _CLASS_TO_FEATURE.get(klass, _OTHER)
        x[index] += flops * batch
        classified += flops
    if not flops_by_class:
        x[1] = flops_per_sample * batch  # unknown split: count it as GEMM work
    elif flops_per_sample > classified * 1.001:
        x[_OTHER] += (flops_per_sample - classified) * batch
    scale = BYTES_PER_ELEMENT.get(precision, 4) / 4
    x[_ACT] = activation_bytes_per_sample * batch * scale
    param_bytes = params * 4 * scale
    x[_PARAM] = min(param_bytes, CACHED_PARAM_BYTES)
    x[_STREAMED] = max(0.0, param_bytes - CACHED_PARAM_BYTES)
    x[_NODES] = nodes
    return x


def workload_features(workload: Workload, precision: str) -> np.ndarray:
    return query_features(
        workload.flops_by_class,
        workload.flops_per_sample,
        workload.activation_bytes_per_sample,
        workload.params,
        workload.batch_size,
        precision,
        sum(workload.ops_by_class.values()),
    )


def prior_seconds(x: np.ndarray, peak_flops: float, bandwidth: float) -> float:
    """The roofline prior for a feature vector at a machine's measured peaks (efficiency 1, no overheads)."""
    workload = Workload(
        flops_per_sample=float(x[: _OTHER + 1].sum()),
        activation_bytes_per_sample=float(x[_ACT]),
        params=float(x[_PARAM] + x[_STREAMED]) / 4,
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
    models: tuple[str, ...]
    families: tuple[str, ...]
    train_rmspe: float

    def seconds(self, x: np.ndarray) -> float:
        return float(np.dot(self.coef, x))

    def prior(self, x: np.ndarray) -> float:
        return prior_seconds(x, self.peak_flops, self.bandwidth)

    def as_dict(self) -> dict[str, object]:
        return {
            "target": self.target,
            "route": self.route.describe(),
            "threads": self.threads,
            "coef": dict(zip(FEATURES, self.coef, strict=True)),
            "peak_gflops": self.peak_flops / 1e9,
            "bandwidth_gbs": self.bandwidth / 1e9,
            "rows": self.rows,
            "models": list(self.models),
            "train_rmspe": self.train_rmspe,
        }


@dataclass(frozen=True)
class FitResult:
    groups: tuple[GroupFit, ...]
    #: Rows the fit used (one per target × route × threads × model × batch), with their feature vectors.
    data: pd.DataFrame = field(repr=False, compare=False, default_factory=pd.DataFrame)

    def targets(self) -> set[str]:
        return {g.target for g in self.groups}

    def for_target(self, target: str) -> list[GroupFit]:
        return [g for g in self.groups if g.target == target]


def _json(value: object) -> dict[str, float]:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return {}
    parsed = json.loads(str(value)) if not isinstance(value, dict) else value
    return {str(k): float(v) for k, v in parsed.items()}


Statistic = Literal["auto", "wall", "cpu"]


def effective_ms(frame: pd.DataFrame, statistic: Statistic = "auto") -> pd.Series:
    """Per row, the time a fit uses (ms): the wall-clock median, or for one thread on a busy machine its CPU time.

    ``auto``: a single-threaded row measured while the 1-minute load average exceeded the core count uses its median
    process CPU time (other processes stretch wall time, not the CPU time one thread needs); other rows use wall
    time. ``cpu`` uses CPU time for every single-threaded row, ``wall`` for none.
    """
    wall = frame["median_ms"].astype("Float64")
    if statistic == "wall" or "cpu_ms" not in frame:
        return wall
    cpu = frame["cpu_ms"].astype("Float64")
    use_cpu = cpu.notna() & (frame["threads"].astype("Int64") == 1)
    if statistic == "auto":
        busy = frame["load_avg"].astype("Float64") > frame["cores"].astype("Float64")
        use_cpu = use_cpu & busy.fillna(False)
    return wall.where(~use_cpu.fillna(False), cpu)


def unreliable(frame: pd.DataFrame) -> pd.Series:
    """Multi-threaded rows measured on a busy machine: their threads waited on each other behind other processes,
    so neither wall nor CPU time recovers the quiet-machine time. They stay in the database but are not fitted."""
    busy = frame["load_avg"].astype("Float64") > frame["cores"].astype("Float64")
    return (busy.fillna(False) & (frame["threads"].astype("Int64") > 1).fillna(False)).astype(bool)


def training_rows(frame: pd.DataFrame, statistic: Statistic = "auto") -> pd.DataFrame:
    """The rows a fit can use, one per configuration (median over repeats), with ``x`` (features) and ``y`` (s)."""
    needed = ["effective_ms", "flops_per_sample", "batch", "threads", "peak_gflops"]
    frame = frame.assign(effective_ms=effective_ms(frame, statistic)) if len(frame) else frame.assign(effective_ms=[])
    if statistic == "auto" and len(frame):
        frame = frame[~unreliable(frame)]
    rows = frame[
        (frame["source"] == "measured")
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
            sum(_json(first["ops_by_class"]).values()),
        )
        bandwidth = group["bandwidth_gbs"].astype("float64").median()
        records.append(
            {
                **dict(zip(keys, key, strict=True)),
                "family": str(first["family"] or first["model"]),
                "y": float(group["effective_ms"].astype("float64").median()) / 1e3,
                "x": x,
                "peak_flops": float(group["peak_gflops"].astype("float64").median()) * 1e9,
                "bandwidth": (float(bandwidth) if not math.isnan(bandwidth) else 10.0) * 1e9,
                "repeats": len(group),
            }
        )
    out = pd.DataFrame.from_records(records)
    for col in ("target", "framework", "compiler", "layout", "precision", "model", "family"):
        out[col] = out[col].fillna("").astype(str)
    out["compiler"] = out["compiler"].replace("", "none")
    return out


def _prior_weights(peak_flops: float, bandwidth: float) -> np.ndarray:
    """The roofline's own rates: compute at the GEMM peak, activations written and read once at the bandwidth."""
    return np.array([1 / peak_flops] * 4 + [2 / bandwidth, 1 / bandwidth, 1 / bandwidth, 0.0])


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


def fit_weights(x: np.ndarray, y: np.ndarray, prior: np.ndarray, ridge: float = DEFAULT_RIDGE) -> np.ndarray:
    """Non-negative weights minimising Σ(x·w/y − 1)² + ridge·n·Σ((w − prior)·scale)² (scale: column size)."""
    a = x / y[:, None]
    scale = np.maximum(np.abs(a).max(axis=0), 1e-30)  # columns to comparable size
    a_scaled = a / scale
    b = np.ones(len(y))
    if ridge > 0:
        strength = math.sqrt(ridge * len(y))
        a_scaled = np.vstack([a_scaled, strength * np.eye(len(scale))])
        b = np.concatenate([b, strength * prior * scale])
    return nnls(a_scaled, b) / scale


def _rmspe(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.sqrt(np.mean(((predicted - measured) / measured) ** 2))) if len(measured) else math.nan


def fit(
    frame: pd.DataFrame, ridge: float = DEFAULT_RIDGE, data: pd.DataFrame | None = None, statistic: Statistic = "auto"
) -> FitResult:
    """Fit every target × route × threads group that has measurements (``frame``: a results DataFrame)."""
    rows = training_rows(frame, statistic) if data is None else data
    groups: list[GroupFit] = []
    if rows.empty:
        return FitResult((), rows)
    keys = ["target", "framework", "compiler", "layout", "precision", "threads"]
    for key, group in rows.groupby(keys, sort=True):
        target, framework, compiler, layout, precision, threads = key
        x = np.vstack(group["x"].to_list())
        y = group["y"].to_numpy(dtype=float)
        peak = float(group["peak_flops"].median())
        bandwidth = float(group["bandwidth"].median())
        w = fit_weights(x, y, _prior_weights(peak, bandwidth), ridge)
        groups.append(
            GroupFit(
                target=str(target),
                route=RouteKey(str(framework), str(compiler), str(layout), str(precision)),
                threads=int(threads),
                coef=tuple(float(v) for v in w),
                peak_flops=peak,
                bandwidth=bandwidth,
                rows=len(group),
                models=tuple(sorted(set(group["model"]))),
                families=tuple(sorted(set(group["family"]))),
                train_rmspe=_rmspe(x @ w, y),
            )
        )
    return FitResult(tuple(groups), rows)
