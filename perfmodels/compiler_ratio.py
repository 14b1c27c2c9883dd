"""A graph compiler's route estimated through its framework's own: the framework's estimate times a fitted ratio.

A compiler measured only as whole models (torch.compile, TVM, IREE, XLA) has a few dozen rows, too few for the
whole-model fit's fourteen rates, and its fit errs 20-125% on a family it has not seen. What a compiler changes is
learned here as a ratio: each of its rows is paired with its framework's plain route (compiler ``none``) on the same
model, batch and threads, and the log of ``compiler time / framework time`` is fitted as a ridge regression over a
few workload features (``RATIO_FEATURES``: the op classes' FLOP shares, the model's size and node count, batch,
threads).

The framework's own estimate (whole-model fit and kernel units, as the planner makes it) times the fitted ratio is
a second estimate of the compiler route, with errors largely independent of its own whole-model fit's; the planner
takes their geometric mean (``through_framework``). Routes swept kernel by kernel (OpenVINO) keep their unit sums,
taken as the compiled graph pays them (``perfmodels.in_graph``).

The regression is robust: the intercept starts at the median ratio, a Huber loss down-weights outlying pairs, and
the ridge pulls the slopes of the model's descriptors toward zero (toward the median ratio); batch and threads,
measured at the same values on every route, are not pulled (``UNPENALISED``).

Example::

    >>> ratios = fit_ratios(training_rows(frame))                          # doctest: +SKIP
    >>> ratios[0].ratio(x, batch=8, threads=1)                             # doctest: +SKIP
    0.71
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from perfmodels.fit import FEATURES, RouteKey
from perfmodels.lazy import lazy_import
from perfmodels.op_mix import FLOP_CLASSES

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")

#: The features the log ratio is regressed on (``ratio_features``).
RATIO_FEATURES = (
    "conv_share",
    "conv_dw_share",
    "gemm_share",
    "gemv_share",
    "norm_share",
    "other_share",
    "log_flops_per_sample",
    "log_bytes_per_flop",
    "log_nodes",
    "log_batch",
    "log_threads",
)
#: Strength of the pull of the descriptors' slopes toward zero (per pair, on standardised features). Chosen on the
#: shipped data's held-out figures, as ``unitfit.WHOLE_WEIGHT`` was; choosing it per route by leave-one-family-out
#: among the training families (``fit_ratio(choose_ridge=True)``) picked values from 0.01 to 100 and scored worse
#: (docs/decisions.md, 2026-11-26, compiler ratios).
RIDGE = 0.1
#: Ridge strengths the leave-one-family-out choice picks among.
RIDGE_GRID = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 100.0)
#: The ratio estimate's weight against the compiler route's own whole-model fit in their geometric mean (their
#: errors are largely independent, and neither erred clearly less on held-out families).
RATIO_WEIGHT = 0.5
#: Huber's threshold, in robust standard deviations of the residuals (1.345: 95% efficiency on normal errors).
HUBER_K = 1.345
#: A ratio model is used with this many pairs from this many architecture families (as a whole-model group).
MIN_PAIRS = 8
MIN_FAMILIES = 3
#: Below that, a compiler measured on this many pairs from this many families still carries its median ratio to a
#: route whose own rows are too few to fit (``CompilerRatio.median_ratio``): a few measured pairs say more than none
#: (tuned TVM's six pairs measure it 3-4x slower than onnxruntime on tiny models, where plans tied them).
MIN_MEDIAN_PAIRS = 4
MIN_MEDIAN_FAMILIES = 2

_AT = {name: i for i, name in enumerate(FEATURES)}
_ACTIVATION_BYTES = _AT["activation_bytes"]
_NODES = (_AT["conv_nodes"], _AT["other_nodes"])

RatioKey = tuple[str, str, str, str, str]


def ratio_features(x: np.ndarray, batch: int, threads: int) -> np.ndarray:
    """The ``RATIO_FEATURES`` of one query: ``x`` is its ``perfmodels.fit.query_features`` vector."""
    flops = float(sum(x[i] for idx in FLOP_CLASSES.values() for i in idx))
    total = max(flops, 1.0)
    shares = [float(sum(x[i] for i in idx)) / total for idx in FLOP_CLASSES.values()]
    per_sample = total / max(batch, 1)
    return np.array(
        [
            *shares,
            math.log10(per_sample),
            math.log10(max(float(x[_ACTIVATION_BYTES]), 1.0) / total),
            math.log10(1.0 + float(sum(x[i] for i in _NODES))),
            math.log2(max(batch, 1)),
            math.log2(max(threads, 1)),
        ]
    )


@dataclass(frozen=True)
class CompilerRatio:
    """The fitted ratio of one compiler route's time to its framework's plain route's, over threads and batches."""

    target: str
    #: The compiler's route, and the layout of its framework's plain route the ratio is taken against.
    route: RouteKey
    base_layout: str
    #: log ratio = intercept + coef · ratio_features (the fit's standardisation folded in).
    intercept: float
    coef: tuple[float, ...]
    #: The smallest and largest log ratio of the pairs: a prediction is kept within them (``log_ratio``).
    bounds: tuple[float, float]
    ridge: float
    pairs: int
    families: tuple[str, ...]
    #: Root-mean-square log error of the ratio on the pairs of families held out one at a time (NaN with too few).
    heldout_log_error: float = math.nan
    #: The median log ratio of the pairs (``median_ratio``).
    median_log_ratio: float = math.nan

    @property
    def key(self) -> RatioKey:
        r = self.route
        return (self.target, r.framework, r.compiler, r.layout, r.precision)

    @property
    def usable(self) -> bool:
        return self.pairs >= MIN_PAIRS and len(self.families) >= MIN_FAMILIES

    @property
    def median_ratio(self) -> float | None:
        """The pairs' median ratio, for a route too thinly measured for the regression (None with fewer than
        ``MIN_MEDIAN_PAIRS`` pairs from ``MIN_MEDIAN_FAMILIES`` families)."""
        if self.pairs < MIN_MEDIAN_PAIRS or len(self.families) < MIN_MEDIAN_FAMILIES or math.isnan(
                self.median_log_ratio):
            return None
        return math.exp(self.median_log_ratio)

    def describe(self) -> str:
        """One line: what the ratio is taken against, from what, and how it did on held-out families."""
        r = self.route
        return (
            f"{self.target} {r.describe()}: time as a ratio to {r.framework}/none/{self.base_layout}/{r.precision}"
            f" from {self.pairs} pairs of {len(self.families)} families, held-out log error"
            f" {self.heldout_log_error:.2f}" + ("" if self.usable else " (too little data: not used)")
        )

    def log_ratio(self, x: np.ndarray, batch: int, threads: int) -> float:
        """The fitted log ratio, kept within the pairs' own: a model unlike any pair (a pure-gemv MLP where every
        pair is convolutional) would otherwise extrapolate its slopes far past any ratio measured."""
        fitted = float(self.intercept + np.dot(self.coef, ratio_features(x, batch, threads)))
        return min(max(fitted, self.bounds[0]), self.bounds[1])

    def ratio(self, x: np.ndarray, batch: int, threads: int) -> float:
        """Predicted compiler time / framework time for a query (``x`` from ``perfmodels.fit.query_features``)."""
        return math.exp(self.log_ratio(x, batch, threads))


def paired_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Each compiler row of ``rows`` (``perfmodels.fit.training_rows``) beside its framework's plain row on the same
    target, precision, threads, model and batch: columns of the compiler row plus ``base_layout``, ``base_y`` and
    ``log_ratio``. Where the plain route was measured in several layouts, the one paired most often (then the
    fastest in total) is the route's base for all its pairs."""
    keys = ["target", "framework", "precision", "threads", "model", "batch"]
    plain = rows[rows["compiler"] == "none"][[*keys, "layout", "y"]].rename(
        columns={"layout": "base_layout", "y": "base_y"}
    )
    compiled = rows[rows["compiler"] != "none"]
    if compiled.empty or plain.empty:
        return pd.DataFrame(columns=[*rows.columns, "base_layout", "base_y", "log_ratio"])
    joined = compiled.merge(plain, on=keys, how="inner")
    if joined.empty:
        return pd.DataFrame(columns=[*rows.columns, "base_layout", "base_y", "log_ratio"])
    route = ["target", "framework", "compiler", "layout", "precision"]
    chosen = []
    for _, part in joined.groupby(route, sort=True):
        tally = part.groupby("base_layout").agg(n=("base_y", "size"), total=("base_y", "sum"))
        best = min(tally.index, key=lambda layout: (-tally.loc[layout, "n"], tally.loc[layout, "total"], layout))
        chosen.append(part[part["base_layout"] == best])
    out = pd.concat(chosen, ignore_index=True)
    return out.assign(log_ratio=np.log(out["y"].astype(float) / out["base_y"].astype(float)))


#: Features whose slopes are not pulled toward zero: the query's configuration (batch, threads), which every route
#: measures at the same few values, so its effect is always identified; the model's own descriptors are pulled.
UNPENALISED = ("log_batch", "log_threads")
_FREE = np.array([name in UNPENALISED for name in RATIO_FEATURES])


def _huber_ridge(
    z: np.ndarray, t: np.ndarray, ridge: float, iterations: int = 20, free: np.ndarray | None = None
) -> tuple[float, np.ndarray]:
    """Intercept and slopes minimising Σ huber(t − a − z·b) + n·ridge·|b|² (the intercept unpenalised), by
    iteratively reweighted least squares from the median (``z`` standardised)."""
    n, k = z.shape
    a, b = float(np.median(t)), np.zeros(k)
    design = np.hstack([np.ones((n, 1)), z])
    pulled = np.ones(k) if free is None else (~free).astype(float)
    penalty = np.diag([0.0, *(n * ridge * pulled)])
    for _ in range(iterations):
        r = t - a - z @ b
        sigma = 1.4826 * float(np.median(np.abs(r - np.median(r))))
        sigma = max(sigma, 1e-3)
        w = np.minimum(1.0, HUBER_K * sigma / np.maximum(np.abs(r), 1e-12))
        weighted = design * w[:, None]
        solution = np.linalg.solve(weighted.T @ design + penalty + 1e-9 * np.eye(k + 1), weighted.T @ t)
        step = max(abs(solution[0] - a), float(np.max(np.abs(solution[1:] - b), initial=0.0)))
        a, b = float(solution[0]), solution[1:]
        if step < 1e-8:
            break
    return a, b


def _standardise(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    center = f.mean(axis=0)
    scale = f.std(axis=0)
    return center, np.where(scale > 1e-9, scale, 1.0)


def _fit(
    f: np.ndarray, t: np.ndarray, ridge: float, free: np.ndarray | None = None
) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    center, scale = _standardise(f)
    a, b = _huber_ridge((f - center) / scale, t, ridge, free=free)
    return a, b, center, scale


def _family_errors(
    f: np.ndarray, t: np.ndarray, families: np.ndarray, ridge: float, free: np.ndarray | None = None
) -> np.ndarray:
    """Each pair's log error predicted by a fit without its family."""
    errors = np.empty(len(t))
    for family in np.unique(families):
        out = families == family
        a, b, center, scale = _fit(f[~out], t[~out], ridge, free)
        fitted = np.clip(a + ((f[out] - center) / scale) @ b, t[~out].min(), t[~out].max())  # as ``log_ratio``
        errors[out] = fitted - t[out]
    return errors


def fit_ratio(part: pd.DataFrame, choose_ridge: bool = False) -> CompilerRatio:
    """The ratio model of one compiler route's ``paired_rows`` (``RIDGE``, or with ``choose_ridge`` the one of
    ``RIDGE_GRID`` that predicts the route's families held out one at a time best); its held-out log error is
    scored by leave-one-family-out either way."""
    first = part.iloc[0]
    f = np.vstack(
        [ratio_features(x, int(b), int(th)) for x, b, th in zip(part["x"], part["batch"], part["threads"], strict=True)]
    )
    t = part["log_ratio"].to_numpy(dtype=float)
    families = part["family"].astype(str).to_numpy()
    ridge, heldout = RIDGE, math.nan
    if len(np.unique(families)) >= MIN_FAMILIES:
        grid = RIDGE_GRID if choose_ridge else (RIDGE,)
        errors = {r: float(np.sqrt(np.mean(_family_errors(f, t, families, r, _FREE) ** 2))) for r in grid}
        ridge = min(errors, key=lambda r: (errors[r], -r))
        heldout = errors[ridge]
    a, b, center, scale = _fit(f, t, ridge, _FREE)
    return CompilerRatio(
        target=str(first["target"]),
        route=RouteKey(*(str(first[k]) for k in ("framework", "compiler", "layout", "precision"))),
        base_layout=str(first["base_layout"]),
        intercept=float(a - np.dot(b / scale, center)),
        coef=tuple(float(v) for v in b / scale),
        bounds=(float(t.min()), float(t.max())),
        ridge=ridge,
        pairs=len(part),
        families=tuple(sorted(set(families))),
        heldout_log_error=heldout,
        median_log_ratio=float(np.median(t)),
    )


def fit_ratios(rows: pd.DataFrame, choose_ridge: bool = False) -> tuple[CompilerRatio, ...]:
    """One ratio model per target x framework x compiler x layout x precision with paired rows (``paired_rows``)."""
    pairs = paired_rows(rows)
    if pairs.empty:
        return ()
    route = ["target", "framework", "compiler", "layout", "precision"]
    return tuple(fit_ratio(part, choose_ridge) for _, part in pairs.groupby(route, sort=True))


def through_framework(own_whole: float, framework: float, ratio: float) -> float:
    """A compiler route's estimate: the geometric mean (``RATIO_WEIGHT``) of its own whole-model fit and its
    framework's plain-route estimate times the fitted ratio (either alone where the other is missing)."""
    via = framework * ratio
    if not (math.isfinite(via) and via > 0):
        return own_whole
    if not (math.isfinite(own_whole) and own_whole > 0):
        return via
    return math.exp(RATIO_WEIGHT * math.log(via) + (1 - RATIO_WEIGHT) * math.log(own_whole))
