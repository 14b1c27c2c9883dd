"""Training step time fitted from measured ``mode=training`` rows, evaluated held out by architecture family.

The model
---------
One step of ``batch`` samples (forward, backward, optimiser update) on a route (backend, precision) is a
non-negative sum of costs, each a feature in seconds on the measuring host times a fitted coefficient::

    step_s = a · 3·conv_flops·batch / core_peak     (convolutions; backward ≈ 2× forward)
           + b · 3·matmul_flops·batch / core_peak   (matrix products, ``gemm`` and ``gemv``)
           + c · 3·depthwise_flops·8·batch / bandwidth   (depthwise convolutions: a 4-byte read and write per FLOP)
           + d · 3·activation_bytes·batch / bandwidth   (written forward, read and written backward)
           + e · 24·params / bandwidth          (optimiser traffic: weight r/w, gradient r, momentum r/w, gradient w)
           + f · kernel_nodes                   (per-node dispatch of every node but shape bookkeeping (``other``),
                                                 and but element-wise ones on a compiled route: ``kernel_nodes``)

and never below the convolution and matrix FLOPs at the host's peak (a roofline floor for extrapolating).
``core_peak`` is the host's GEMM GFLOP/s at the row's thread count divided by the threads. The four per-sample
terms (a-d) run at ``threads ** x`` times one core's speed, ``x`` the route's ``thread_exponent`` measured from its
own rows of one model at several thread counts; the per-step terms (e, f) do not speed up. Convolutions and matrix
products have a coefficient each; element-wise and normalisation FLOPs have no term of their own (their traffic is
in the activations). ``peak`` and ``bandwidth`` are the host's, stored in the row, so coefficients carry across
hosts: a measured host is predicted with its own peaks, and another host transfers through its peaks (the
calibration path). The FLOPs and nodes are split by the op classes of the rows' ``flops_by_class`` and
``ops_by_class`` (a row without them counts every FLOP a matrix product and no node). Why this shape:
docs/decisions.md (2026-11-26, training step time on corrected features). The fit
minimises relative error, so RMSPE is what it optimises. The coefficients are shared by the routes of one framework
measured quietly, each route scaling them by a factor of its own (``fit_routes``, ``fit_frameworks``): a handful of
families cannot pin six coefficients per route (docs/decisions.md), and frameworks run different backward kernels. A
compiled route measured on enough families (``FAMILIES_FOR_OWN_COEFFICIENTS``) has coefficients of its own: its
compiler fuses what its framework's eager route runs node by node (``pricing_group``).

Where the inference unit sweeps measured a framework's kernels on the host (``perfmodels.training_units``; or a
framework of the same kernel library's, ``BORROWED_UNITS``), its steps have a second, unit-priced model
(``UNIT_FEATURES``)::

    step_s = a' · forward_s + (e' · optimizer + g' · 4·passed_elements·batch / bandwidth) / speed_up
             + f' · kernel_nodes + h' · 1 ms + c' · apart_s + t' · weight_tensors · 1 us

``forward_s`` the forward pass of ``batch`` samples priced unit by unit by the framework's unit model at the row's
threads: a held-out family borrows the rates of other models' kernels of similar shape, where the FLOP model has one
rate per op class. ``passed_elements`` the elements a step passes over in kernels of its own
(``perfmodels.training_units.passed_elements``): the convolutions' outputs, which training normalises and
activates apart (an inference unit folds them into its convolution), and the outputs of unfolded normalisations,
activations and concatenations, whose gradients are further passes. ``h'`` a per-step constant (the loss, zeroing
the gradients, the loop), which with ``f'`` the per-node probes pin. ``speed_up`` the forward
units' own speed-up from one thread to the row's, so each model's extra work scales with threads as its kernels do
(no exponent fitted). ``apart_s`` the part of the forward of the kinds the lender's units price but the trainer runs
on kernels of another library (``training_units.Lender.apart``: XLA's dense convolutions), taken out of ``forward_s``
(0 for every other trainer). ``weight_tensors`` the tensors the step updates (``training_units.weight_tensors``):
the optimiser, the gradients' zeroing and their accumulation run once per tensor. Plans and the held-out evaluation
use it where the workload has kernel units.

Where a framework's own training kernels were swept as units (``benchmarks.backward_units``; appopt-runtime, whose
NumPy gradients no inference sweep times), its steps have a third model (``TRAIN_UNIT_FEATURES``)::

    step_s = a'' · (forward_train_s + backward_s) + e'' · optimizer_s + f'' · kernel_nodes + h'' · 1 ms
             + m'' · 3·activation_bytes·batch / bandwidth   (mixed-precision rows only: its casts)
             + r'' · 3·activation_bytes·batch / bandwidth   (the activations kept for the backward, read again)
             + t'' · weight_tensors · 1 us
             + k'' · 3·cast_bytes / bandwidth   (mixed-precision rows only: the low-precision kinds' operands)

the forward pass in training mode and the backward pass priced unit by unit, and the optimiser update priced by its
own sweep (``perfmodels.training_units.TrainingUnitRoute``, per precision where swept, else fp32's). The two passes
share one coefficient: both are priced by sweeps of the same kernels, and with one each the fit put everything on
the forward (3.0, backward 0.03), which overprices a family whose backward is light for its forward (the GRU's
element-wise gates; docs/decisions.md, 2026-11-26, one coefficient for the priced passes). A mixed-precision route
shares its framework's fp32 coefficients and scale: its half kernels compute in fp32, so it differs by its casts
alone (``cast_bytes``: the convolutions' and products' operands, cast down and up again; ``_scale_keys``). Each
framework's rows are fitted with the most specific of the three that prices them all (``FEATURE_SETS``); the
held-out evaluation also reports the model chosen per framework by an inner leave-one-family-out, the unbiased
figure for that choice.

A route measured only under load is fitted alone (``fit_group``; below
``ROWS_PER_COEFFICIENT`` rows per coefficient, one scale of the roofline terms). Rows measured under load
(``other_cpu`` > ``BUSY_OTHER_CPU``) are left out of a route's fit unless the route has no other rows (its
predictions then say so); the held-out evaluation leaves them out unless asked.

Time to solution = epochs × steps per epoch × step time + what the measured first step took beyond one step
(compilation, first-touch allocation).
"""

from __future__ import annotations

import functools
import json
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from perfmodels.features import Device, Route, Workload
from perfmodels.fit import nnls
from perfmodels.lazy import lazy_import
from perfmodels.prediction import Prediction
from perfmodels.results_db import BUSY_OTHER_CPU, on_gpu
from perfmodels.targets import local_target_key, target_key
from perfmodels.training_intervals import TrainingResiduals, with_interval
from perfmodels.training_units import (
    MIXED_PRECISIONS,
    PROBE_FAMILY,
    Lender,
    PricesUnits,
    TrainingRouteKey,
    TrainingUnitRoute,
    UnitRouteKey,
    cast_bytes,
    fit_training_units,
    forward_seconds,
    fused_kinds,
    lender_of,
    passed_elements,
    read_training_units,
    row_units,
    threads_own,
    training_route,
    training_units,
    unit_route,
    units_framework,
    weight_tensors,
)

if TYPE_CHECKING:
    import pandas as pd

    from analysis.units import Unit
    from perfmodels.calibration import Calibration
    from perfmodels.unitfit import UnitFit
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

#: Bytes moved per parameter per SGD-momentum step at fp32 (see the module docstring).
OPTIMIZER_BYTES_PER_PARAM = 24.0
TRAINING_FLOP_FACTOR = 3.0
#: Bytes moved per FLOP of memory-bound (depthwise) work: one fp32 read and one write.
LIGHT_BYTES_PER_FLOP = 8.0
FEATURES = ("conv_compute", "matmul_compute", "depthwise", "activations", "optimizer", "kernel_nodes")
#: The first ``PER_SAMPLE`` features grow with the batch and speed up with threads (``thread_exponent``).
PER_SAMPLE = 4
#: The unit-priced model's features (``perfmodels.training_units``): the forward pass priced by the framework's
#: inference kernel units at the row's threads, ``FEATURES``' optimiser and per-node terms, the traffic of the
#: elements training passes over apart (``passed_elements``: the normalisation and activations an inference unit
#: folds, unfolded ones, concatenations), and a per-step constant. The optimiser and that traffic are divided by the
#: forward units' own speed-up from one thread to the row's; the forward's units of its lender's ``apart`` kinds, a
#: coefficient of their own; the weight tensors the step updates (``weight_tensors``) at a microsecond each.
UNIT_FEATURES = (
    "forward_units", "optimizer", "kernel_nodes", "passed_elements", "step", "apart_units", "weight_tensors",
)  # fmt: skip
#: Columns of a row's ``priced_forward``: its forward pass priced by units at its threads and at one thread, the
#: traffic of its passed elements, the part of the pass at its threads in its lender's ``apart`` kinds, and its
#: weight tensors in microseconds (``weight_tensors``; per step, as the per-node term).
FORWARD_COLUMNS = 5
#: A weight tensor's unit in the unit-priced model's ``weight_tensors`` column, as ``FEATURES``' nodes: a microsecond.
TENSOR_S = 1e-6
#: The unit-priced model's per-step constant (``step``: the loss, zeroing the gradients, the trainer's own loop),
#: in units of a millisecond; the per-node probes (``PROBE_FAMILY``) pin it with the per-node term.
STEP_CONSTANT_S = 1e-3
#: Bytes per element a training step passes over (fp32), as ``passed_elements`` counts them.
PASSED_BYTES_PER_ELEMENT = 4.0
#: The training-unit model's features (``perfmodels.training_units.TrainingUnitRoute``): the forward pass in
#: training mode plus the backward pass, priced unit by unit by the framework's own swept training kernels, its
#: optimiser update priced by the optimiser sweep, ``FEATURES``' per-node term and the per-step constant, the
#: activations' traffic (see ``train_unit_matrix``), and the weight tensors at ``TENSOR_S`` each, as
#: ``UNIT_FEATURES``' (the optimiser sweep prices its per-tensor loop, not the gradients' zeroing and accumulation),
#: and under mixed precision the operands its low-precision kinds cast (``training_units.cast_bytes``).
TRAIN_UNIT_FEATURES = (
    "passes_units",
    "optimizer_units",
    "kernel_nodes",
    "step",
    "mixed_precision_traffic",
    "activation_traffic",
    "weight_tensors",
    "mixed_precision_casts",
)
#: Columns of the training units' priced parts (``priced_training``): forward, backward, optimiser seconds,
#: whether the row trains in mixed precision (1) or not (0), its weight tensors in seconds (``TENSOR_S`` each), and
#: its low-precision kinds' operands read and written forward and backward (``cast_bytes``) at the host's bandwidth.
PART_COLUMNS = 6
#: The columns of each feature set that grow with the batch and speed up with ``threads ** thread_exponent``. The
#: unit-priced model's forward (both its columns, ``forward_units`` and ``apart_units``) carries its thread count's
#: speed from the units (exponent 0), except a route that takes its own threading (``training_units.threads_own``:
#: priced at one thread, it takes its rows' exponent). The training units' passes are priced at their swept thread
#: count, ``TRAINING_UNIT_THREADS``, so they take the route's measured exponent: appopt-runtime's steps run 1.0-1.3x
#: faster on a second thread. Its optimiser and casts are NumPy's, one thread.
PER_SAMPLE_COLUMNS: dict[str, tuple[int, ...]] = {
    "flops": tuple(range(PER_SAMPLE)),
    "units": (0, 5),
    "train_units": (0,),
}
#: Feature sets from the most specific to the least: a framework's rows are fitted with the first that prices all
#: of them (``fit_frameworks``).
FEATURE_SETS = ("train_units", "units", "flops")
#: Op classes whose FLOPs run as matrix products; the op class of shape bookkeeping nodes (no kernel of their own).
MATMUL_CLASSES = ("gemm", "gemv")
BOOKKEEPING_CLASS = "other"
#: The op class of element-wise nodes, which a graph compiler fuses (``kernel_nodes``).
ELEMENTWISE_CLASS = "elementwise"
#: Rows needed per coefficient before the full model is fitted; with fewer, one shared scale of the roofline sum.
ROWS_PER_COEFFICIENT = 2
#: A compiled route fits coefficients of its own (its compiler fuses and emits kernels of its own: inductor fuses a
#: GRU's gates, which eager PyTorch runs node by node) where its rows cover this many architecture families; with
#: fewer it shares its framework's, at a scale of its own (docs/decisions.md, 2026-11-26, compiled routes' own
#: coefficients).
FAMILIES_FOR_OWN_COEFFICIENTS = 4
#: Alternations of the shared-coefficient and per-route-scale solves in ``fit_routes`` (it converges in tens).
ROUTE_FIT_ROUNDS = 300


def _by_class(value: object) -> dict[str, float]:
    """A row's ``flops_by_class`` / ``ops_by_class`` (a JSON string in the database) as a dict."""
    if isinstance(value, str) and value:
        value = json.loads(value)
    return {str(k): float(v or 0.0) for k, v in value.items()} if isinstance(value, Mapping) else {}


def feature_row(
    flops: float,
    activation_bytes: float,
    params: float,
    batch: int,
    peak_gflops: float,
    gbs: float,
    flops_by_class: Mapping[str, float] | None = None,
    ops_by_class: Mapping[str, float] | None = None,
    threads: int = 1,
    compiler: str = "none",
) -> np.ndarray:
    """The step's features in seconds on a host of ``peak_gflops`` (at ``threads``) and ``gbs`` (``FEATURES``
    order); compute at one core's share of the peak; the nodes a route of ``compiler`` dispatches
    (``kernel_nodes``)."""
    core_peak, bandwidth = peak_gflops * 1e9 / max(int(threads), 1), gbs * 1e9
    flops_sums, ops_sums = _sums(flops_by_class or {}), _sums(ops_by_class or {})
    matmul = flops_sums.matmul if flops_sums.given else flops
    columns = _feature_columns(
        flops_sums.conv, matmul, flops_sums.depthwise, activation_bytes, params, kernel_nodes(ops_sums, compiler),
        batch, core_peak, bandwidth,
    )  # fmt: skip
    return np.array(columns)


def _feature_columns(
    conv: Any, matmul: Any, depthwise: Any, activation_bytes: Any, params: Any, nodes: Any, batch: Any,
    core_peak: Any, bandwidth: Any,
) -> list[Any]:  # fmt: skip
    """``FEATURES`` in seconds, of one row (floats) or of many (arrays): compute at one core's peak, the traffic at
    the host's bandwidth, nodes at a microsecond each."""
    return [
        TRAINING_FLOP_FACTOR * conv * batch / core_peak,
        TRAINING_FLOP_FACTOR * matmul * batch / core_peak,
        TRAINING_FLOP_FACTOR * depthwise * LIGHT_BYTES_PER_FLOP * batch / bandwidth,
        TRAINING_FLOP_FACTOR * activation_bytes * batch / bandwidth,
        OPTIMIZER_BYTES_PER_PARAM * params / bandwidth,
        nodes * 1e-6,
    ]


def step_seconds(
    coef: np.ndarray | tuple[float, ...],
    x: np.ndarray,
    threads: np.ndarray | float = 1.0,
    exponent: np.ndarray | float = 0.0,
    floor: np.ndarray | float | None = None,
    features: str = "flops",
) -> np.ndarray:
    """Fitted step seconds of feature rows ``x`` (of the ``features`` set) at ``threads`` (per-sample work sped up by
    ``threads ** exponent``, the route's ``thread_exponent``), never below ``floor``: the convolution and matrix
    FLOPs at the host's peak on all cores (``roofline_floor``; read from ``x`` for the FLOP features)."""
    x = np.asarray(x)
    if floor is None:
        floor = roofline_floor(x, threads)
    return np.maximum(_sped_up(x, threads, exponent, PER_SAMPLE_COLUMNS[features]) @ np.asarray(coef), floor)


def roofline_floor(flops_x: np.ndarray, threads: np.ndarray | float) -> np.ndarray:
    """The convolution and matrix FLOPs of ``FEATURES`` rows at the host's peak on all ``threads``."""
    flops_x = np.asarray(flops_x)
    return np.asarray((flops_x[..., 0] + flops_x[..., 1]) / np.asarray(threads))


def _sped_up(
    x: np.ndarray,
    threads: np.ndarray | float,
    exponent: np.ndarray | float,
    columns: tuple[int, ...] = PER_SAMPLE_COLUMNS["flops"],
) -> np.ndarray:
    """``x`` with its per-sample ``columns`` (compute at one core's peak, depthwise and activation traffic) divided
    by ``threads ** exponent``; the per-step terms (optimiser, per-node dispatch) do not speed up, nor does work
    priced by kernel units measured at the row's threads."""
    out = np.array(x, dtype=float)
    cols = list(columns)
    out[..., cols] = out[..., cols] / np.power(np.asarray(threads, dtype=float), exponent)[..., None]
    return out


def unit_matrix(flops_x: np.ndarray, forward: np.ndarray) -> np.ndarray:
    """``UNIT_FEATURES`` rows from ``FEATURES`` rows and each row's ``priced_forward`` columns: its forward pass priced
    by kernel units at its threads and at one thread, the traffic of its passed elements at one pass, and the part of
    the pass at its threads in its lender's ``apart`` kinds (seconds), which the forward column then leaves out.
    The optimiser and output traffic speed up as the forward's units do at the row's threads: PyTorch runs them on
    the same thread pool, and a model whose kernels slow down on a second thread here (MobileNetV2's) or barely
    gain (the MLP's) is priced so, where one exponent per route cannot be both."""
    flops_x = np.asarray(flops_x).reshape(-1, len(FEATURES))
    forward = np.asarray(forward, dtype=float).reshape(-1, FORWARD_COLUMNS)
    with np.errstate(divide="ignore", invalid="ignore"):
        speed_up = forward[:, 1] / forward[:, 0]
    constant = np.full(len(forward), STEP_CONSTANT_S)
    apart = forward[:, 3]
    return np.c_[
        forward[:, 0] - apart,
        flops_x[:, 4] / speed_up,
        flops_x[:, 5],
        forward[:, 2] / speed_up,
        constant,
        apart,
        forward[:, 4],
    ]


def train_unit_matrix(flops_x: np.ndarray, parts: np.ndarray) -> np.ndarray:
    """``TRAIN_UNIT_FEATURES`` rows from ``FEATURES`` rows and each row's (forward, backward, optimiser) seconds
    priced by the framework's training units (``TrainingUnitRoute.parts``; the two passes summed) with its mixed
    precision flag and weight tensors (``PART_COLUMNS``), the per-step constant, and the activations' traffic
    (``FEATURES``' ``activations``) twice:

    * under mixed precision only: the casts it puts around each low-precision node, which cost by the elements cast,
      not by the FLOPs (appopt-runtime's AMP steps took 1.5-4.4x its fp32 ones, VGG's least; docs/decisions.md,
      2026-11-26, mixed precision's casts);
    * every row: the activations a step keeps for its backward, which the rest of the pass evicts before the
      backward reads them again; the sweeps time each unit alone, its operands in cache (docs/decisions.md,
      2026-11-27, the activations' traffic);

    and under mixed precision the operands of its convolutions and products (``PART_COLUMNS``' last), which it
    casts to half and its kernels back to fp32: a weight-heavy model casts its weights every step, which its
    activations do not say (ResNet-50 at reduced resolution: its AMP steps 2.2-2.7x its fp32 ones, VGG's 1.5-2.0x)."""
    flops_x = np.asarray(flops_x).reshape(-1, len(FEATURES))
    parts = np.asarray(parts, dtype=float).reshape(-1, PART_COLUMNS)
    constant = np.full(len(parts), STEP_CONSTANT_S)
    passes, optimizer, mixed, activations = parts[:, 0] + parts[:, 1], parts[:, 2], parts[:, 3], flops_x[:, 3]
    return np.c_[
        passes, optimizer, flops_x[:, 5], constant, activations * mixed, activations, parts[:, 4],
        parts[:, 5] * mixed,
    ]  # fmt: skip


@dataclass(frozen=True)
class PricedRows:
    """Rows' features in every set: ``FEATURES`` (``flops``), the forward pass priced by inference units
    (``forward``: ``priced_forward``'s columns, NaN rows where not priced) and the step's parts priced by training
    units (``parts``, NaN rows where not priced)."""

    flops: np.ndarray
    forward: np.ndarray
    parts: np.ndarray

    def matrix(self, features: str) -> np.ndarray:
        """The rows' features of ``features`` (NaN where that set does not price a row)."""
        if features == "units":
            return unit_matrix(self.flops, self.forward)
        if features == "train_units":
            return train_unit_matrix(self.flops, self.parts)
        return self.flops

    def priced(self, features: str) -> np.ndarray:
        """Which rows ``features`` prices."""
        return np.isfinite(self.matrix(features)).all(axis=1)

    def take(self, mask: np.ndarray) -> PricedRows:
        return PricedRows(self.flops[mask], self.forward[mask], self.parts[mask])


def thread_exponent(rows: pd.DataFrame) -> float:
    """How a route's steps speed up with threads, from its own rows: the median over (model, batch) measured at
    several thread counts of log(t_fewest / t_most) / log(most / fewest), clipped to [0, 1]; 0 (one core's speed)
    with no such pair. PyTorch's steps here run 1.0-1.75x faster on a second thread, appopt-runtime's not at all."""
    if rows.empty:
        return 0.0
    # one grouping for every (model, batch): the held-out evaluation asks for thousands of routes' exponents
    times = rows.groupby(["model", "batch", "threads"])["value"].median()
    keys = times.index.droplevel("threads").to_numpy()
    threads = times.index.get_level_values("threads").to_numpy(dtype=float)
    values = times.to_numpy(dtype=float)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)] - 1
    slopes = [
        math.log(values[a] / values[b]) / math.log(threads[b] / threads[a])
        for a, b in zip(starts, ends, strict=True)
        if b > a and threads[a] > 0
    ]
    return float(np.clip(np.median(slopes), 0.0, 1.0)) if slopes else 0.0


def step_rows(frame: pd.DataFrame, include_busy: bool = False) -> pd.DataFrame:
    """Measured training ms-per-step rows that carry the features the fit needs (busy rows only on request)."""
    if frame.empty or "mode" not in frame:
        return frame.iloc[0:0]
    rows = frame[
        (frame["mode"] == "training")
        & (frame["metric"] == "ms_per_step")
        & (frame["source"] == "measured")
        & ~on_gpu(frame)  # GPU rows are perfmodels.gpu_fit's
    ]
    needed = ["flops_per_sample", "activation_bytes_per_sample", "params", "peak_gflops", "bandwidth_gbs", "batch"]
    rows = rows.dropna(subset=needed)
    if not include_busy:
        rows = rows[~(rows["other_cpu"].astype(float) > BUSY_OTHER_CPU)]
    return rows


def _matrix(rows: pd.DataFrame) -> np.ndarray:
    """``feature_row`` of every row, computed a column at a time (the held-out evaluation builds thousands)."""
    n = len(rows)
    if n == 0:
        return np.zeros((0, len(FEATURES)))
    by_flops = [_classes(v) for v in (rows["flops_by_class"] if "flops_by_class" in rows else [None] * n)]
    by_ops = [_classes(v) for v in (rows["ops_by_class"] if "ops_by_class" in rows else [None] * n)]
    threads = np.maximum(rows["threads"].to_numpy(dtype=float).astype(int), 1)
    core_peak = rows["peak_gflops"].to_numpy(dtype=float) * 1e9 / threads
    bandwidth = rows["bandwidth_gbs"].to_numpy(dtype=float) * 1e9
    batch = rows["batch"].to_numpy(dtype=float).astype(int)
    flops = rows["flops_per_sample"].to_numpy(dtype=float)
    conv = np.array([c.conv for c in by_flops])
    matmul = np.array([c.matmul if c.given else f for c, f in zip(by_flops, flops, strict=True)])
    depthwise = np.array([c.depthwise for c in by_flops])
    compilers = [_compiler(c) for c in (rows["compiler"] if "compiler" in rows else [None] * n)]
    nodes = np.array([kernel_nodes(c, compiler) for c, compiler in zip(by_ops, compilers, strict=True)])
    activation_bytes = rows["activation_bytes_per_sample"].to_numpy(dtype=float)
    params = rows["params"].to_numpy(dtype=float)
    return np.column_stack(
        _feature_columns(conv, matmul, depthwise, activation_bytes, params, nodes, batch, core_peak, bandwidth)
    )


@dataclass(frozen=True)
class _Classes:
    """The sums ``feature_row`` takes of one ``flops_by_class`` / ``ops_by_class`` value."""

    given: bool
    conv: float
    matmul: float
    depthwise: float
    nodes: float
    elementwise: float = 0.0


@functools.lru_cache(maxsize=4096)
def _classes_of(text: str) -> _Classes:
    return _sums(_by_class(text))


def _classes(value: object) -> _Classes:
    """``_Classes`` of a row's ``*_by_class`` value (a JSON string, cached: a database repeats a few hundred)."""
    return _classes_of(value) if isinstance(value, str) else _sums(_by_class(value))


def _sums(by: Mapping[str, float]) -> _Classes:
    return _Classes(
        given=bool(by),
        conv=float(by.get("conv", 0.0)),
        matmul=sum(float(by.get(k, 0.0)) for k in MATMUL_CLASSES),
        depthwise=float(by.get("conv_dw", 0.0)),
        nodes=sum(float(v) for k, v in by.items() if k != BOOKKEEPING_CLASS),
        elementwise=float(by.get(ELEMENTWISE_CLASS, 0.0)),
    )


def kernel_nodes(classes: _Classes, compiler: str) -> float:
    """The nodes a step dispatches one by one (``FEATURES``' ``kernel_nodes``): every node but shape bookkeeping,
    less the element-wise ones a graph compiler fuses into its kernels (``compiler`` other than none; the unit
    kinds it fuses, ``training_units.fused_kinds``, are priced at none too). A GRU's gates are 188 element-wise
    nodes of its 285: counted for torch.compile, the per-node term priced its held-out GRU at 1.3-2.2x its steps
    (docs/decisions.md, 2026-11-29, a compiled step dispatches no element-wise node)."""
    return classes.nodes - (classes.elementwise if fused_kinds(compiler) else 0.0)


@dataclass(frozen=True)
class TrainingGroupFit:
    """Coefficients for one route (backend, precision), fitted on ``rows`` rows of ``families``."""

    backend: str
    framework: str
    precision: str
    coef: tuple[float, ...]
    rows: int
    families: tuple[str, ...]
    targets: tuple[str, ...]
    train_rmspe: float
    #: Fitted on rows measured under load (the route had no quiet rows).
    under_load: bool = False
    #: The trainer's graph compiler (``inductor`` for torch.compile; ``none`` for eager).
    compiler: str = "none"
    #: Per-sample work speeds up by ``threads ** thread_exponent`` (``thread_exponent``).
    thread_exponent: float = 0.0
    #: The feature set of ``coef``: ``flops`` (``FEATURES``) or ``units`` (``UNIT_FEATURES``).
    features: str = "flops"
    #: The activations' memory layout its rows were measured in (``""``: not recorded).
    layout: str = ""

    def seconds(self, x: np.ndarray, threads: int = 1, floor: float | None = None) -> float:
        return float(step_seconds(self.coef, x, threads, self.thread_exponent, floor, self.features))


def fit_group(rows: pd.DataFrame) -> TrainingGroupFit:
    """Relative-error NNLS of the coefficients (or one shared scale of the roofline terms when rows are few)."""
    alpha = thread_exponent(rows)
    x = _matrix(rows)
    y = rows["value"].to_numpy(dtype=float) / 1e3
    scaled = _sped_up(x, _threads(rows), alpha) / y[:, None]
    if len(rows) >= ROWS_PER_COEFFICIENT * len(FEATURES):
        coef = nnls(scaled, np.ones(len(y)))
    else:  # one scale of the roofline sum (compute + traffic): a constant fitted on few rows of large models
        # swamps a small one (held out on the demonstration rows: RMSPE 48% with the scale alone, 390% with it)
        roofline = 5  # conv, matmul, depthwise, activations, optimizer
        scale = nnls(scaled[:, :roofline].sum(axis=1, keepdims=True), np.ones(len(y)))
        coef = np.concatenate([np.full(roofline, scale[0]), np.zeros(len(FEATURES) - roofline)])
    predicted = step_seconds(coef, x, _threads(rows), alpha)
    return replace(_describe(rows, coef, alpha), train_rmspe=float(np.sqrt(np.mean(((predicted - y) / y) ** 2))))


def fit_routes(rows: pd.DataFrame, x: np.ndarray | None = None, features: str = "flops") -> dict[str, TrainingGroupFit]:
    """Every route of ``rows`` at once: shared coefficients ``c`` and a scale ``s_r`` per route (the first route's is
    1), step = s_r * (x . c), minimising the rows' squared relative error. Alternates the two convex halves: the NNLS
    of ``c`` with the scales fixed, then each route's least-squares scale with ``c`` fixed (an exact zero stays
    reachable, which a fit of log-coefficients never reaches). Routes keyed as ``_route_key``; a mixed-precision
    route of the training-unit model takes its fp32 route's scale (``_scale_keys``). ``x``: the rows' features of the
    ``features`` set (default: ``FEATURES`` from the rows)."""
    keys = _route_key(rows).to_numpy()
    routes = list(dict.fromkeys(keys))
    index = np.array([routes.index(k) for k in keys])
    alphas = np.array([_exponent(rows[keys == k], features) for k in routes])
    flops_x = _matrix(rows)
    x = flops_x if x is None else np.asarray(x)
    columns = PER_SAMPLE_COLUMNS[features]
    y = rows["value"].to_numpy(dtype=float) / 1e3
    relative = _sped_up(x, _threads(rows), alphas[index], columns) / y[:, None]
    scale_keys = _scale_keys(rows, keys, features)
    scaled_as = list(dict.fromkeys(scale_keys))
    group = np.array([scaled_as.index(k) for k in scale_keys])
    scales = np.ones(len(scaled_as))
    shared = np.zeros(x.shape[1])
    for _ in range(ROUTE_FIT_ROUNDS):
        shared = nnls(relative * scales[group][:, None], np.ones(len(y)))
        explained = relative @ shared
        previous = scales.copy()
        for r in range(len(scaled_as)):
            part = explained[group == r]
            if float(part @ part) > 0:
                scales[r] = float(part.sum() / (part @ part))
        if np.allclose(scales, previous, rtol=1e-10, atol=0.0):
            break
    shared, scales = shared * scales[0], scales / scales[0]
    scales = np.array([scales[group[index == r][0]] for r in range(len(routes))])
    fits = {}
    floor = roofline_floor(flops_x, _threads(rows))
    for r, key in enumerate(routes):
        part = rows[index == r]
        coef = scales[r] * shared
        predicted = step_seconds(coef, x[index == r], _threads(part), alphas[r], floor[index == r], features)
        error = float(np.sqrt(np.mean((predicted / y[index == r] - 1.0) ** 2)))
        described = replace(_describe(part, coef, float(alphas[r])), features=features)
        fits[str(key)] = replace(described, train_rmspe=error)
    return fits


def _scale_keys(rows: pd.DataFrame, keys: np.ndarray, features: str) -> np.ndarray:
    """The scale each row's route (``keys``, ``_route_key``) takes in ``fit_routes``: its own, except a
    mixed-precision route of the training-unit model, which takes its framework's fp32 route's where ``rows`` hold
    one. appopt-runtime's half kernels compute in fp32 (NumPy has no fast half GEMM), so what a mixed-precision step
    adds is its casts, the model's ``mixed_precision_*`` columns; a scale of its own priced every pass at 2x, which
    put VGG's steps, heavy in products and light in casts, at 1.4x (docs/decisions.md, 2026-11-29, mixed
    precision's casts by operand)."""
    if features != "train_units":
        return keys
    compilers = [_compiler(c) for c in (rows["compiler"] if "compiler" in rows else [None] * len(rows))]
    routes = list(zip(rows["framework"].astype(str), compilers, rows["precision"].map(_precision), strict=True))
    fp32 = {(f, c): k for (f, c, p), k in zip(routes, keys, strict=True) if p == "fp32"}
    return np.array(
        [fp32.get((f, c), k) if p in MIXED_PRECISIONS else k for (f, c, p), k in zip(routes, keys, strict=True)],
        dtype=object,
    )


def _exponent(rows: pd.DataFrame, features: str) -> float:
    """The thread exponent of one route's rows as ``features`` applies it: none where units price its forward at its
    thread count (they carry the kernels' speed-up), unless the route takes its own threading (``threads_own``);
    else ``thread_exponent``."""
    if features == "units":
        first = rows.iloc[0]
        if not threads_own(str(first["framework"]), _compiler(first.get("compiler"))):
            return 0.0
    return thread_exponent(rows)


def fit_frameworks(
    rows: pd.DataFrame,
    forward: np.ndarray | None = None,
    parts: np.ndarray | None = None,
    choice: Mapping[str, str] | None = None,
) -> dict[str, TrainingGroupFit]:
    """``fit_routes`` per framework (routes share coefficients only with routes of their own framework: appopt-runtime
    and PyTorch run different backward kernels). Each framework's rows are fitted with the first of
    ``FEATURE_SETS`` that prices all of them, or the set ``choice`` names for it: the training-unit model where
    ``parts`` (each row's forward, backward and optimiser seconds priced by training units) are finite, the
    unit-priced model where ``forward`` (``priced_forward``: the forward pass priced by inference units) is and the
    routes have units to be priced by (``perfmodels.training_units.units_framework``: their own or borrowed), else
    the FLOP model. Frameworks are split where their routes are priced by different units, and compiled routes
    measured on enough families fitted apart (``pricing_group``)."""
    priced = PricedRows(
        _matrix(rows),
        np.full((len(rows), FORWARD_COLUMNS), math.nan)
        if forward is None
        else np.asarray(forward, dtype=float).reshape(-1, FORWARD_COLUMNS),
        np.full((len(rows), PART_COLUMNS), math.nan)
        if parts is None
        else np.asarray(parts, dtype=float).reshape(-1, PART_COLUMNS),
    )
    fits: dict[str, TrainingGroupFit] = {}
    groups = pricing_groups(rows)
    for group in dict.fromkeys(groups):
        mask = groups == group
        mine = priced.take(mask)
        usable = usable_features(mine)
        wanted = (choice or {}).get(group)
        first = rows[mask].iloc[0]
        unit_priced = units_framework(str(first["framework"]), _compiler(first.get("compiler"))) is not None
        preferred = [f for f in usable if f != "units" or unit_priced]
        features = wanted if wanted in usable else preferred[0]
        fits.update(fit_routes(rows[mask], mine.matrix(features), features))
    return fits


def pricing_group(framework: str, compiler: str, families: int = 0) -> str:
    """The rows a (``framework``, ``compiler``) route shares coefficients with: its framework's, unless it is compiled
    and measured on ``families`` architecture families, at least ``FAMILIES_FOR_OWN_COEFFICIENTS``, or its kernels
    are priced otherwise than its framework's plain route (``units_framework``: TensorFlow's XLA route prices its
    depthwise convolutions by XLA's own units); then ``"framework compiler"``'s own."""
    compiled = compiler != "none" and families >= FAMILIES_FOR_OWN_COEFFICIENTS
    if compiled or units_framework(framework, compiler) != units_framework(framework):
        return f"{framework} {compiler}"
    return framework


def pricing_groups(rows: pd.DataFrame) -> np.ndarray:
    """Each row's ``pricing_group``, with the architecture families its route's rows cover (the probes not
    counted)."""
    compilers = [_compiler(c) for c in (rows["compiler"] if "compiler" in rows else [None] * len(rows))]
    routes = list(zip(rows["framework"].astype(str), compilers, strict=True))
    families: dict[tuple[str, str], set[str]] = {}
    for route, family in zip(routes, rows["family"].astype(str), strict=True):
        if family != PROBE_FAMILY:
            families.setdefault(route, set()).add(family)
    groups = [pricing_group(f, c, len(families.get((f, c), ()))) for f, c in routes]
    return np.array(groups, dtype=object)


def mixed_precision(precision: object) -> float:
    """1.0 where ``precision`` trains in mixed precision (``MIXED_PRECISIONS``), else 0.0."""
    return 1.0 if _precision(precision) in MIXED_PRECISIONS else 0.0


def _precision(value: object) -> str:
    """A row's ``precision`` value, ``fp32`` where empty."""
    return value if isinstance(value, str) and value else "fp32"


def _compiler(value: object) -> str:
    """A row's ``compiler`` value, ``none`` where empty."""
    return value if isinstance(value, str) and value else "none"


def usable_features(priced: PricedRows) -> list[str]:
    """The ``FEATURE_SETS`` that price every one of ``priced``'s rows (the FLOP model always does)."""
    return [f for f in FEATURE_SETS if f == "flops" or (len(priced.flops) and priced.priced(f).all())]


def _describe(rows: pd.DataFrame, coef: np.ndarray, exponent: float = 0.0) -> TrainingGroupFit:
    """A route's fit record (its coefficients given; ``train_rmspe`` left for the caller)."""
    first = rows.iloc[0]
    return TrainingGroupFit(
        backend=str(first["backend"]),
        framework=str(first.get("framework") or first["backend"]),
        precision=str(first.get("precision") or "fp32"),
        compiler=_compiler(first.get("compiler")),
        coef=tuple(float(c) for c in coef),
        rows=len(rows),
        families=tuple(sorted(set(rows["family"].astype(str)))),
        targets=tuple(sorted(set(rows["target"].astype(str)))),
        train_rmspe=math.nan,
        thread_exponent=exponent,
        layout=_layout(rows),
    )


def _layout(rows: pd.DataFrame) -> str:
    """The memory layout ``rows`` were measured in: their most common recorded one (``""``: none recorded)."""
    if "layout" not in rows:
        return ""
    recorded = rows["layout"].dropna().astype(str)
    recorded = recorded[recorded != ""]
    return str(recorded.mode().iloc[0]) if len(recorded) else ""


def _threads(rows: pd.DataFrame) -> np.ndarray:
    return rows["threads"].to_numpy(dtype=float)


def _route_key(rows: pd.DataFrame) -> pd.Series:
    return rows["backend"].astype(str) + "|" + rows["precision"].fillna("fp32").astype(str)


def priced_forward(
    rows: pd.DataFrame,
    units: UnitFit | None,
    shipped: Mapping[str, tuple[Unit, ...]],
    routes: dict[UnitRouteKey, PricesUnits],
    any_framework: bool = False,
) -> np.ndarray:
    """Each row's forward pass priced by its framework's kernel units (``perfmodels.training_units``) at its threads
    and at one thread, the traffic of its passed elements and the part of its lender's ``apart`` kinds
    (``FORWARD_COLUMNS``, seconds); NaN where it cannot be (or no framework's units price its route,
    ``units_framework``, unless ``any_framework``). The unit routes used are added to ``routes``."""
    out = np.full((len(rows), FORWARD_COLUMNS), math.nan)
    if units is None or rows.empty:
        return out
    for i, (row, model) in enumerate(zip(rows.itertuples(), row_units(rows, shipped), strict=True)):
        out[i] = unit_priced_forward(
            units, routes, str(row.target), str(row.framework), int(row.threads), training_units(model),
            int(row.batch), float(row.bandwidth_gbs), any_framework, _compiler(getattr(row, "compiler", None)),
            tensors=weight_tensors(model),
        )  # fmt: skip
    return out


def unit_priced_forward(
    units: UnitFit | None,
    routes: dict[UnitRouteKey, PricesUnits],
    target: str,
    framework: str,
    threads: int,
    forward: tuple[Unit, ...],
    batch: int,
    bandwidth_gbs: float,
    any_framework: bool = False,
    compiler: str = "none",
    *,
    tensors: float,
) -> tuple[float, float, float, float, float]:
    """``forward``'s pass of ``batch`` samples (less the units ``compiler`` fuses away, ``fused_kinds``) priced by
    ``framework``'s unit routes on ``target`` at ``threads`` and at one thread (as at ``threads`` where only that
    count was swept: a speed-up of 1, which a fit of rows at one thread count absorbs; at one thread both for a route
    that takes its own threading, ``threads_own``, NaN where one thread was not swept), and the traffic of its passed
    elements (``passed_elements``) at ``bandwidth_gbs``, and the part of the pass at ``threads`` in the lender's
    ``apart`` kinds (NaN where a route was not swept), and its weight ``tensors`` at ``TENSOR_S`` each (counted on
    the units before ``training_units`` cut them: ``weight_tensors``); routes (keyed by
    the framework whose units they are, ``units_framework``) looked up in ``routes`` first, found ones added to it
    (``units`` None: only ``routes``)."""
    lender = lender_of(framework, compiler, any_framework)
    fused = fused_kinds(compiler)
    counts = (1, 1) if threads_own(framework, compiler) else (threads, 1)
    by_count: dict[int, float] = {}
    for n in dict.fromkeys(counts):  # each thread count priced once (both are one for a single thread)
        key = (target, lender or Lender(""), n)
        if lender is not None and key not in routes and units is not None:
            found = unit_route(units, target, framework, n, any_framework, compiler)
            if found is not None:
                routes[key] = found
        by_count[n] = forward_seconds(routes[key], forward, batch, fused) if key in routes else math.nan
    priced = [by_count[n] for n in counts]
    apart_kinds = lender.apart if lender is not None else ()
    apart_units = [u for u in forward if u.kind in apart_kinds]
    apart = math.nan
    if (first := (target, lender or Lender(""), counts[0])) in routes:
        apart = forward_seconds(routes[first], apart_units, batch, fused) if apart_units else 0.0
    if math.isnan(priced[1]) and threads != 1:  # units swept at this thread count only: no speed-up known (1)
        priced[1] = priced[0]
    traffic = PASSED_BYTES_PER_ELEMENT * passed_elements(forward) * batch / (bandwidth_gbs * 1e9)
    return priced[0], priced[1], traffic, apart, TENSOR_S * tensors


def priced_training(
    rows: pd.DataFrame,
    routes: Mapping[TrainingRouteKey, TrainingUnitRoute],
    shipped: Mapping[str, tuple[Unit, ...]],
) -> np.ndarray:
    """Each row's (forward, backward, optimiser) seconds priced by its framework's training units on its target at
    its precision (``perfmodels.training_units.training_route``), NaN where they cannot be, its mixed precision
    flag, its weight tensors and its casts' traffic (``PART_COLUMNS``)."""
    out = np.full((len(rows), PART_COLUMNS), math.nan)
    if not routes or rows.empty:
        return out
    for i, (row, model) in enumerate(zip(rows.itertuples(), row_units(rows, shipped), strict=True)):
        precision = getattr(row, "precision", None)
        route = training_route(routes, str(row.target), str(row.framework), _precision(precision))
        units = training_units(model)
        if route is not None and units:
            parts = route.parts(units, int(row.batch), float(row.params))
            casts = cast_seconds(units, int(row.batch), float(row.bandwidth_gbs))
            out[i] = (*parts, mixed_precision(precision), TENSOR_S * weight_tensors(model), casts)
    return out


def cast_seconds(units: Sequence[Unit], batch: int, bandwidth_gbs: float) -> float:
    """The casts' traffic of a mixed-precision step of ``batch`` through ``units`` at ``bandwidth_gbs`` (the
    training-unit model's ``mixed_precision_casts``): their low-precision operands (``cast_bytes``), forward and
    backward."""
    return TRAINING_FLOP_FACTOR * cast_bytes(units, batch) / (bandwidth_gbs * 1e9)


@dataclass
class TrainingFit:
    """Fitted groups by route (``groups``: the FLOP model; ``unit_groups``: the unit-priced model, for frameworks whose
    rows were priced by kernel units, with the ``unit_routes`` that priced them), plus the measured peaks of each
    (target, threads) for predicting there."""

    groups: dict[str, TrainingGroupFit] = field(default_factory=dict)
    peaks: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)
    unit_groups: dict[str, TrainingGroupFit] = field(default_factory=dict)
    unit_routes: dict[UnitRouteKey, PricesUnits] = field(default_factory=dict)
    #: The training-unit models (``perfmodels.training_units``) by (target, framework); ``unit_groups`` holds the
    #: groups fitted on them (``features`` ``train_units``).
    training_routes: dict[TrainingRouteKey, TrainingUnitRoute] = field(default_factory=dict)

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        units: UnitFit | None = None,
        shipped: Mapping[str, tuple[Unit, ...]] | None = None,
        training_routes: Mapping[TrainingRouteKey, TrainingUnitRoute] | None = None,
    ) -> TrainingFit:
        """The fit of ``frame``'s training rows; with ``units`` (the inference unit models), also the unit-priced
        model of the frameworks it prices, and with training-unit sweeps in ``frame`` (or ``training_routes``) the
        training-unit model of the frameworks swept (rows' units from ``shipped``, default
        ``read_training_units()``)."""
        rows = step_rows(frame, include_busy=True)
        fit = cls()
        if rows.empty:
            return fit
        quiet = rows[~(rows["other_cpu"].astype(float) > BUSY_OTHER_CPU)]
        if len(quiet):
            fit.groups.update(fit_frameworks(quiet))
            fit.training_routes = dict(fit_training_units(frame) if training_routes is None else training_routes)
        wants_units = units is not None or fit.training_routes
        shipped = read_training_units() if shipped is None and wants_units else shipped or {}
        fit.unit_groups.update(fit._priced_groups(quiet, units, shipped))
        busy_only = rows[~_route_key(rows).isin(list(fit.groups))]
        for key, group in busy_only.groupby(_route_key(busy_only)):
            # measured only under load: fitted alone, and its predictions say so
            fit.groups[str(key)] = replace(fit_group(group), under_load=True)
        busy_priced = fit._priced_groups(busy_only, units, shipped)  # its unit-priced model too, as its own
        fit.unit_groups.update({k: replace(g, under_load=True) for k, g in busy_priced.items()})
        for (target, threads), group in rows.groupby(["target", "threads"]):
            fit.peaks[(str(target), int(threads))] = (
                float(group["peak_gflops"].median()),
                float(group["bandwidth_gbs"].median()),
            )
        return fit

    def _priced_groups(
        self, rows: pd.DataFrame, units: UnitFit | None, shipped: Mapping[str, tuple[Unit, ...]]
    ) -> dict[str, TrainingGroupFit]:
        """The unit-priced and training-unit groups of ``rows``' frameworks that those models price (none: no row
        priced); the unit routes used are added to ``unit_routes``."""
        if rows.empty:
            return {}
        forward = priced_forward(rows, units, shipped, self.unit_routes)
        parts = priced_training(rows, self.training_routes, shipped)
        if not (np.isfinite(forward).all(axis=1).any() or np.isfinite(parts).all(axis=1).any()):
            return {}
        return {k: g for k, g in fit_frameworks(rows, forward, parts).items() if g.features != "flops"}

    def targets(self) -> set[str]:
        return {t for t, _ in self.peaks}

    def group_for(self, route: Route, groups: Mapping[str, TrainingGroupFit] | None = None) -> TrainingGroupFit | None:
        """The fitted group closest to ``route`` among ``groups`` (default: the FLOP model's) of its framework: its
        precision, then its compiler, then its memory layout (a group measured in it, else one whose layout was not
        recorded, else another)."""
        same = [g for g in (self.groups if groups is None else groups).values() if g.framework == route.framework]
        if not same:
            return None
        return min(
            same,
            key=lambda g: (
                g.precision != route.precision,
                g.compiler != route.compiler,
                0 if g.layout == route.layout else 1 if not g.layout else 2,
                g.backend != route.framework,
                -g.rows,
            ),
        )

    def predict(self, workload: Workload, route: Route, target: str, threads: int | None) -> Prediction | None:
        """Step time of ``workload`` on ``route`` at ``target`` with that target's measured peaks (None: no fit)."""
        group = self.group_for(route)
        measured = sorted(n for t, n in self.peaks if t == target)
        if group is None or not measured:
            return None
        n = min(measured, key=lambda m: (abs(m - threads), -m)) if threads else max(measured)
        peak, bandwidth = self.peaks[(target, n)]
        x = feature_row(
            workload.flops_per_sample,
            workload.activation_bytes_per_sample,
            workload.params,
            workload.batch_size,
            peak,
            bandwidth,
            workload.flops_by_class,
            workload.ops_by_class,
            n,
            route.compiler,
        )
        step = group.seconds(x, n)
        coef, how = np.asarray(group.coef), ""
        compute, memory = float(coef[:2] @ x[:2]), float(coef[2:5] @ x[2:5])
        priced = self._unit_priced(workload, route, target, n, x)
        if priced is not None:
            group, step, compute, memory = priced
            how = (
                ", forward and backward priced by its training kernel units"
                if group.features == "train_units"
                else ", forward priced by kernel units" + _apart_note(workload, route)
            )
        if step <= 0:
            return None
        basis = f"fitted-training:{target} ({group.backend} {group.precision}, {group.rows} rows{how})"
        return Prediction.for_step(
            workload,
            step,
            "compute" if compute >= memory else "memory",
            basis + _unmeasured(group, route),
            {"threads": float(n), "fitted_rows": float(group.rows), "train_rmspe": group.train_rmspe},
        )

    def _unit_priced(
        self, workload: Workload, route: Route, target: str, threads: int, x: np.ndarray
    ) -> tuple[TrainingGroupFit, float, float, float] | None:
        """(group, step seconds, compute and memory seconds) of the unit-priced or training-unit model, when
        ``route``'s framework has one, the workload has kernel units and the framework's units were swept on
        ``target`` (the inference units at ``threads``)."""
        group = self.group_for(route, self.unit_groups)
        if group is None or not workload.units:
            return None
        units = training_units(workload.units)
        floor = float(roofline_floor(x, threads))
        coef = np.asarray(group.coef)
        if group.features == "train_units":
            trained = training_route(self.training_routes, target, route.framework, route.precision)
            if trained is None:
                return None
            priced = trained.parts(units, workload.batch_size, workload.params)
            casts = cast_seconds(units, workload.batch_size, self.peaks[(target, threads)][1])
            parts = (*priced, mixed_precision(route.precision), TENSOR_S * weight_tensors(workload.units), casts)
            tx = train_unit_matrix(x, np.array(parts))[0]
            if not np.isfinite(tx).all():
                return None
            memory = float(coef[1] * tx[1] + coef[4] * tx[4] + coef[7] * tx[7])
            return group, group.seconds(tx, threads, floor), float(coef[0] * tx[0]), memory
        bandwidth = self.peaks[(target, threads)][1]
        forward = unit_priced_forward(
            None,
            self.unit_routes,
            target,
            route.framework,
            threads,
            units,
            workload.batch_size,
            bandwidth,
            compiler=route.compiler,
            tensors=weight_tensors(workload.units),
        )
        ux = unit_matrix(x, np.array([forward]))[0]
        if not np.isfinite(ux).all():
            return None
        step = group.seconds(ux, threads, floor)
        return group, step, float(coef[0] * ux[0] + coef[5] * ux[5]), float(coef[1] * ux[1] + coef[3] * ux[3])

    def transfer(
        self,
        workload: Workload,
        route: Route,
        device: Device,
        prior: Prediction,
        prior_for: Callable[[Device], Prediction],
    ) -> Prediction | None:
        """Step time on an unmeasured CPU ``device`` (or several): the prior there times the fit's ratio to the prior
        on the measuring host at its most threads (whose measured GEMM peak and bandwidth stand for its device).

        Data-parallel communication is the prior's own and is not scaled. None when the route has no fit.
        """
        group = self.group_for(route)
        sources = sorted((n, t) for t, n in self.peaks if group is not None and t in group.targets)
        if group is None or not sources:
            return None
        threads, source = sources[-1]
        fitted = self.predict(workload, route, source, threads)
        if fitted is None:
            return None
        peak, bandwidth = self.peaks[(source, threads)]
        measured = prior_for(Device(source, "cpu", {"fp32": peak * 1e9}, bandwidth * 1e9))
        factor = fitted.step_seconds / measured.step_seconds
        communication = float(prior.detail.get("communication_s", 0.0))
        step = (prior.step_seconds - communication) * factor + communication
        basis = (
            f"transferred-training:{source} -> {device.name} ({group.backend} {group.precision}, {group.rows} rows; "
            f"x{factor:.3g} of the roofline prior, as measured at {threads} thread(s))"
        )
        if device.count > 1:
            basis += f"; {device.count} devices scaled as the prior scales them"
        return Prediction.for_step(
            workload,
            step,
            prior.bound,
            basis + _unmeasured(group, route),
            {"transfer_factor": factor, "fitted_rows": float(group.rows), "train_rmspe": group.train_rmspe},
        )

    def calibrated(self, workload: Workload, route: Route, host: CalibratedHost) -> Prediction | None:
        """Step time on a calibrated host the training rows never saw, from the fit on the calibration's source at
        the thread count nearest the host's, carried as the fitted model says the step runs:

        * priced by inference kernel units (``units``): times the host's factor for the model's forward units
          (``calibration_factor``), the units the model prices; a route on its own threading (``threads_own``:
          TensorFlow's eager steps) times one core's GEMM peak there over here and its own thread exponent from the
          source's thread count to the host's, as the engines' kernels thread otherwise (the thread-count proxy 1:2
          had TensorFlow at 41.9% carried by them, 22.2% so; docs/decisions.md, 2026-11-27);
        * by FLOPs and bytes (``flops``): the same coefficients with the host's measured GEMM peak and bandwidth at
          its threads (the route's thread exponent included), as the model's features are defined;
        * by the framework's own training units (``train_units``, swept and priced at one thread, sped up by the
          route's thread exponent at the source's thread count nearest the host's): times one core's speed there
          over here (GEMM peak per thread). Carried by the framework's calibrated forward units instead, the
          thread-count proxy 1:2 went 28.7% -> 32.1% (docs/decisions.md, 2026-11-27).

        None: the source has no fit of the route's framework, or the forward units are not timed on the source."""
        calibration = host.calibration
        group = self.group_for(route)
        if group is None or calibration.source not in group.targets:
            return None
        fitted = self.predict(workload, route, calibration.source, host.threads)
        if fitted is None:
            return None
        n = int(fitted.detail["threads"])
        peak, _ = self.peaks[(calibration.source, n)]
        used = self._unit_priced_group(workload, route, calibration.source, n) or group
        per_core = (peak / n) / (host.peak_gflops / host.threads)  # one core's GEMM peak there over here
        # Units measured here and there at one thread count carry a step to another CPU; one core's GEMM peak
        # (NumPy's BLAS) does not (AMD EPYC: TensorFlow's eager steps 0.35-0.7x the Xeon's, our runtime's 0.43-1.1x,
        # its peak per core 1.27x; docs/decisions.md, 2026-11-28). Across thread counts the inference units' threading
        # is not a step's, so there one core's peak carries the steps that thread on their own.
        across_threads = n != host.threads
        if used.features == "units" and threads_own(route.framework, route.compiler) and across_threads:
            # its steps thread as its own rows say, not as the calibrated engines' kernels do (at two threads here
            # they ran 1.6-1.9x faster, TensorFlow's steps 1.05x): one core's speed carries it, its exponent the rest
            factor = per_core * (n / host.threads) ** used.thread_exponent
            how = (
                f"x{factor:.3g}, one core's GEMM peak there over here and its own threading from {n} to "
                f"{host.threads} thread(s)"
            )
        elif used.features == "units":
            carried = calibration_factor(calibration, host.units, workload, route, n)
            if carried is None:
                return None
            factor, how = carried
            how = f"x{factor:.3g}, the ratio of {how} measured here over there"
        elif (
            used.features == "train_units"
            and not across_threads
            and (own := own_units_factor(calibration, host.units, workload, route, n, per_core))
        ):
            factor, how = own
            products = " (its products at one core's GEMM peak)" if route.framework in BLAS_PRODUCTS else ""
            how = f"x{factor:.3g}, the ratio of {how}{products} measured here over there"
        elif used.features == "train_units":
            factor = per_core
            how = f"x{factor:.3g}, one core's GEMM peak there over here (its training kernels swept at one thread)"
        else:
            x = feature_row(
                workload.flops_per_sample, workload.activation_bytes_per_sample, workload.params, workload.batch_size,
                host.peak_gflops, host.bandwidth_gbs, workload.flops_by_class, workload.ops_by_class, host.threads,
                route.compiler,
            )  # fmt: skip
            factor = used.seconds(x, host.threads) / fitted.step_seconds
            how = f"x{factor:.3g}: its coefficients at the GEMM peak and bandwidth measured here"
        apart = _apart_note(workload, route) if used.features == "units" else ""
        basis = (
            f"transferred-training:{calibration.source} via {calibration.via} ({used.backend} {used.precision} "
            f"{used.features} model{apart}, {used.rows} rows at {n} thread(s); {how})"
        )
        return Prediction.for_step(
            workload,
            fitted.step_seconds * factor,
            fitted.bound,
            basis + _unmeasured(used, route),
            {
                "calibration_factor": factor,
                "source_step_s": fitted.step_seconds,
                "fitted_rows": float(used.rows),
                "train_rmspe": used.train_rmspe,
                "calibrated_units": float(calibration.units),
                "threads": float(host.threads),
            },
        )

    def _unit_priced_group(
        self, workload: Workload, route: Route, target: str, threads: int
    ) -> TrainingGroupFit | None:
        """The unit-priced or training-unit group ``predict`` uses for ``route`` on ``target`` (None: the FLOP
        model's)."""
        peak, bandwidth = self.peaks[(target, threads)]
        x = feature_row(
            workload.flops_per_sample, workload.activation_bytes_per_sample, workload.params, workload.batch_size,
            peak, bandwidth, workload.flops_by_class, workload.ops_by_class, threads, route.compiler,
        )  # fmt: skip
        priced = self._unit_priced(workload, route, target, threads, x)
        return None if priced is None else priced[0]


@dataclass(frozen=True)
class CalibratedHost:
    """What ``appopt calibrate`` measured on a host the training rows never saw: its ``calibration`` against the
    ``units`` (the unit models it compared with), and its GEMM peak and bandwidth at the ``threads`` it plans for."""

    calibration: Calibration
    units: UnitFit
    peak_gflops: float
    bandwidth_gbs: float
    threads: int


def calibration_factor(
    calibration: Calibration, units: UnitFit, workload: Workload, route: Route, threads: int
) -> tuple[float, str] | None:
    """How much faster or slower the calibrated host runs ``workload``'s forward kernel units than the source at
    ``threads``, and what said so: the calibration's factor (``Calibration.factor``: per-kind ratios weighted by
    the source's unit times, anchors included) of the framework's own calibrated route, else the geometric mean of
    every calibrated route's factor. A framework ``appopt calibrate`` does not run (PyTorch) borrows the host's
    speed on the same kinds of kernel from the engines it does run: one engine's quirks then weigh as one of
    several. None where no route's units are timed on the source."""
    from perfmodels.calibration import source_route, timed_units

    key = calibration.route_for((route.framework, route.compiler, route.layout, route.precision))
    keys = [key] if key is not None else sorted(calibration.ratios)
    logs = []
    for k in keys:
        source = source_route(units, calibration.source, k, threads)
        if source is None:
            continue
        factor = calibration.factor(k, timed_units(source, workload.units, workload.batch_size), flat=False)
        if factor is not None and factor > 0 and math.isfinite(factor):
            logs.append(math.log(factor))
    if not logs:
        return None
    how = f"{key[0]}'s forward units" if key is not None else f"its forward units on {len(logs)} calibrated engines"
    return math.exp(float(np.mean(logs))), how


#: Frameworks whose training products (Gemm, MatMul and their gradients) run on NumPy's BLAS, the one the host's
#: GEMM probe times (appopt-runtime: ``runtime/kernels/gemm.py``), and the unit kinds those products are.
BLAS_PRODUCTS = {"appopt-runtime": ("gemm",)}


def own_units_factor(
    calibration: Calibration, units: UnitFit, workload: Workload, route: Route, threads: int, blas_ratio: float
) -> tuple[float, str] | None:
    """``calibration_factor`` where the calibration measured ``route``'s own framework (None elsewhere): what
    carries a framework's training kernels to another CPU at the thread count the source fitted. One core's GEMM
    peak alone does not: on an AMD EPYC host (one core's peak 0.8x the recording Xeon's) our runtime's training
    steps ran 0.43-1.1x the Xeon's, carried so 107% RMSPE, by these units 32% (docs/decisions.md, 2026-11-28, an
    AMD EPYC pair). Across thread counts the inference units' threading is not the training kernels' (the
    thread-count proxy 1:2, 25.1% carried by GEMM peak, 27.9% by these units), so there the GEMM peak stays.

    A framework whose products run on NumPy's BLAS (``BLAS_PRODUCTS``) has those kinds at ``blas_ratio``, one
    core's GEMM peak there over here: its calibrated gemm units are inference's batch 1-8 products, bound by
    memory, while a step's products are batches, bound by the BLAS's arithmetic (on the AMD host its gemm units
    ran 0.63x the Xeon's, its GEMM peak per core 1.27x; BERT-like steps 1.1x)."""
    key = calibration.route_for((route.framework, route.compiler, route.layout, route.precision))
    if key is None or key[0] != route.framework:
        return None
    blas_kinds = BLAS_PRODUCTS.get(route.framework, ())
    if blas_kinds and blas_ratio > 0 and math.isfinite(blas_ratio):
        from perfmodels.calibration import KindRatio

        at_peak = KindRatio(math.log(blas_ratio), units=1)
        ratios = {**calibration.ratios, key: {**calibration.ratios[key], **dict.fromkeys(blas_kinds, at_peak)}}
        calibration = replace(calibration, ratios=ratios)
    return calibration_factor(calibration, units, workload, route, threads)


def _apart_note(workload: Workload, route: Route) -> str:
    """What a basis says of the workload's units that the route's lender prices apart (``Lender.apart``), after a
    comma; "" without any."""
    lender = units_framework(route.framework, route.compiler)
    if lender is None or not lender.apart:
        return ""
    kinds = sorted({u.kind for u in training_units(workload.units or ())} & set(lender.apart))
    if not kinds:
        return ""
    lenders = {"+".join(lender.own) if lender.own and k in lender.kinds else lender.framework for k in kinds}
    timed_by = " and ".join(f"{name}'s" for name in sorted(lenders))
    return f", its {', '.join(kinds)} units at a coefficient of their own ({timed_by} units time them unlike its step)"


def _unmeasured(group: TrainingGroupFit, route: Route) -> str:
    """What of ``route`` its fitted group did not measure: another precision, compiler or (recorded) memory layout, or
    no quiet rows."""
    notes = ""
    if group.precision != route.precision:
        notes += f"; {route.precision} not measured"
    if group.compiler != route.compiler:
        notes += f"; {route.compiler} not measured"
    if group.layout and group.layout != route.layout:
        notes += f"; {route.layout} not measured"
    return notes + (" (rows measured under load)" if group.under_load else "")


# --- held-out evaluation ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingEvaluation:
    """Leave-one-family-out step-time predictions, and time-to-accuracy predicted from them."""

    predictions: pd.DataFrame
    time_to_target: pd.DataFrame
    #: The same rows predicted by the feature set chosen per framework by an inner leave-one-family-out (None: not
    #: evaluated), the sets ``predictions`` used ("framework features"), and the inner choices per held-out family.
    nested: pd.DataFrame | None = None
    models: tuple[str, ...] = ()
    picks: tuple[str, ...] = ()

    @staticmethod
    def _rmspe(frame: pd.DataFrame) -> float:
        if frame.empty:
            return math.nan
        rel = (frame["predicted"] - frame["measured"]) / frame["measured"]
        return float(np.sqrt(np.mean(rel**2)))

    def step_rmspe(self) -> float:
        return self._rmspe(self.predictions)

    def tta_rmspe(self) -> float:
        return self._rmspe(self.time_to_target)

    def lines(self) -> list[str]:
        out = [
            f"training step time, held out by family: RMSPE {self.step_rmspe():.1%} over "
            f"{len(self.predictions)} rows (goal 20%)",
        ]
        for backend, part in self.predictions.groupby("backend"):
            out.append(f"  {backend:20s} {'(all)':12s} RMSPE {self._rmspe(part):6.1%} ({len(part)} rows)")
        for (backend, family), part in self.predictions.groupby(["backend", "family"]):
            out.append(f"  {backend:20s} {family:12s} RMSPE {self._rmspe(part):6.1%} ({len(part)} rows)")
        if self.models:
            rule = "each framework's most specific set that prices its rows, a fixed rule"
            out.append(f"  models ({rule}): " + "; ".join(self.models))
        if self.nested is not None:
            out.append(
                f"nested (the set chosen per framework by an inner leave-one-family-out instead): RMSPE "
                f"{self._rmspe(self.nested):.1%} over {len(self.nested)} rows"
            )
            for backend, part in self.nested.groupby("backend"):
                out.append(f"  {backend:20s} {'(all)':12s} RMSPE {self._rmspe(part):6.1%} ({len(part)} rows)")
            out.extend(f"  chosen without {pick}" for pick in self.picks)
        if not self.time_to_target.empty:
            out.append(
                f"time to target accuracy, predicted from held-out step times: RMSPE {self.tta_rmspe():.1%} over "
                f"{len(self.time_to_target)} rows (goal 25%)"
            )
        else:
            out.append("time to target accuracy: no measured rows reached a target")
        return out


def leave_one_family_out(
    frame: pd.DataFrame,
    include_busy: bool = False,
    units: UnitFit | None = None,
    shipped: Mapping[str, tuple[Unit, ...]] | None = None,
    training_routes: Mapping[TrainingRouteKey, TrainingUnitRoute] | None = None,
    nested: bool = True,
) -> TrainingEvaluation:
    """Fit each route's step time without one family, predict that family; repeat for every family (the per-node
    probes, ``PROBE_FAMILY``, stay in every fit and are never predicted).

    Each framework's rows are predicted by the most specific feature set that prices them all (``fit_frameworks``):
    the training-unit model with the training units ``training_routes`` (default: fitted from ``frame``'s
    training-unit sweeps), the unit-priced model with the inference unit models ``units`` (default: fitted from
    ``frame``'s unit sweeps), else the FLOP model; rows' units from ``shipped`` (default ``read_training_units()``;
    ``{}`` evaluates the FLOP model alone). With ``nested``, also the figure of the set chosen per framework by an
    inner leave-one-family-out on the other families (``_HeldOut.inner_choice``), among every set that prices the
    framework's rows (the inference units too where no framework's units price a route): the rule above was
    chosen after seeing held-out figures, and the nested figure is the one that was not.
    Raises ValueError when there are no usable training rows, or a route measured fewer than two families.
    """
    rows = step_rows(frame, include_busy=include_busy)
    if rows.empty:
        raise ValueError(
            "no measured training step rows with model features"
            + ("" if include_busy else " measured quietly (add --include-busy to use rows measured under load)")
        )
    keys = _route_key(rows)
    architectures = rows["family"].where(rows["family"] != PROBE_FAMILY)
    held_out = [k for k, part in architectures.groupby(keys) if part.nunique() >= 2]
    rows = rows[keys.isin(held_out)]
    if rows.empty:
        raise ValueError("every training route was measured on a single architecture family: nothing to hold out")
    shipped = read_training_units() if shipped is None else shipped
    if units is None and shipped:
        from perfmodels.unitfit import fit_units

        units = fit_units(frame)
    if training_routes is None:
        training_routes = fit_training_units(frame) if shipped else {}
    forward = priced_forward(rows, units, shipped, {}, any_framework=nested)  # every framework's, as a candidate
    priced = PricedRows(_matrix(rows), forward, priced_training(rows, training_routes, shipped))
    held = _HeldOut(rows, priced)
    predictions, nested_predictions, picks = [], [], []
    for family in held.architectures():
        test = held.families == family
        predictions.append(held.frame(test, held.predict(~test, test)))
        if nested:
            choice = held.inner_choice(~test)
            picks.append(f"{family}: " + ", ".join(f"{k} {v}" for k, v in sorted(choice.items())))
            nested_predictions.append(held.frame(test, held.predict(~test, test, choice)))
    step = pd.concat(predictions, ignore_index=True)
    models = fit_frameworks(rows, priced.forward, priced.parts)
    used = sorted({f"{_group_of(g)} {g.features}" for g in models.values()})
    return TrainingEvaluation(
        step,
        _time_to_target(frame, step, include_busy),
        pd.concat(nested_predictions, ignore_index=True) if nested_predictions else None,
        tuple(used),
        tuple(picks),
    )


def _group_of(group: TrainingGroupFit) -> str:
    """The ``pricing_group`` a fitted route was fitted in."""
    return pricing_group(group.framework, group.compiler, len(set(group.families) - {PROBE_FAMILY}))


class _HeldOut:
    """The evaluation's rows with their features in every set, and held-out predictions from fits on some of
    them."""

    def __init__(self, rows: pd.DataFrame, priced: PricedRows) -> None:
        self.rows, self.priced = rows, priced
        self.families = rows["family"].astype(str).to_numpy()
        self.frameworks = pricing_groups(rows)  # the groups that share coefficients (``fit_frameworks``)
        self.keys = _route_key(rows).to_numpy()
        self.threads = _threads(rows)
        self.floor = roofline_floor(priced.flops, self.threads)
        self.measured = rows["value"].to_numpy(dtype=float) / 1e3
        self.matrices = {f: priced.matrix(f) for f in FEATURE_SETS}

    def architectures(self, mask: np.ndarray | None = None) -> list[str]:
        """The families held out in turn (of the ``mask`` rows): every one but the per-node probes', which every
        fit keeps."""
        families = self.families if mask is None else self.families[mask]
        return sorted(set(families) - {PROBE_FAMILY})

    def predict(self, train: np.ndarray, test: np.ndarray, choice: Mapping[str, str] | None = None) -> np.ndarray:
        """Seconds of the ``test`` rows from fits on the ``train`` rows (``fit_frameworks`` with ``choice``); a row
        the chosen set does not price is predicted by the FLOP model (NaN: its route has no fit)."""
        p = self.priced
        fits = fit_frameworks(self.rows[train], p.forward[train], p.parts[train], choice)
        flops_fits = fit_frameworks(self.rows[train])
        out = np.full(int(test.sum()), math.nan)
        for j, i in enumerate(np.flatnonzero(test)):
            group = fits.get(self.keys[i])
            if group is not None and not np.isfinite(self.matrices[group.features][i]).all():
                group = flops_fits.get(self.keys[i])
            if group is not None:
                x = self.matrices[group.features][i]
                out[j] = group.seconds(x, int(self.threads[i]), float(self.floor[i]))
        return out

    def inner_choice(self, train: np.ndarray) -> dict[str, str]:
        """Per framework of the ``train`` rows, the feature set whose leave-one-family-out over those rows' families
        erred least (RMSPE)."""
        choice = {}
        for framework in dict.fromkeys(self.frameworks[train]):
            mine = train & (self.frameworks == framework)
            errors = {}
            for features in usable_features(self.priced.take(mine)):
                relative = []
                for family in self.architectures(mine):
                    test = mine & (self.families == family)
                    predicted = self.predict(mine & ~test, test, {framework: features})
                    relative.extend(predicted / self.measured[test] - 1.0)
                values = np.array(relative, dtype=float)
                values = values[np.isfinite(values)]
                errors[features] = float(np.sqrt(np.mean(values**2))) if len(values) else math.inf
            choice[str(framework)] = min(errors, key=lambda f: errors[f])
        return choice

    def frame(self, test: np.ndarray, predicted: np.ndarray) -> pd.DataFrame:
        held = self.rows[test]
        return pd.DataFrame(
            {
                "backend": held["backend"].to_numpy(),
                "framework": self.frameworks[test],
                "precision": held["precision"].fillna("fp32").astype(str).to_numpy(),
                "family": self.families[test],
                "model": held["model"].to_numpy(),
                "batch": held["batch"].to_numpy(),
                "threads": held["threads"].to_numpy(),
                "target": held["target"].to_numpy(),
                "measured": self.measured[test],
                "predicted": predicted,
            }
        ).dropna(subset=["predicted"])


def _time_to_target(frame: pd.DataFrame, step: pd.DataFrame, include_busy: bool) -> pd.DataFrame:
    """Measured seconds_to_target against epochs × steps per epoch × held-out step time + measured compile time."""
    training = frame[frame["mode"] == "training"]
    if not include_busy:
        training = training[~(training["other_cpu"].astype(float) > BUSY_OTHER_CPU)]
    keys = ["backend", "model", "batch", "threads", "target"]
    out = []
    for row in training[training["metric"] == "seconds_to_target"].itertuples():
        match = training[
            (training["backend"] == row.backend)
            & (training["model"] == row.model)
            & (training["batch"] == row.batch)
            & (training["threads"] == row.threads)
            & (training["target"] == row.target)
        ]
        epochs = match[match["metric"] == "epochs_to_target"]["value"]
        compile_s = match[match["metric"] == "compile_s"]["value"]
        held = step[(step[keys] == pd.Series({k: getattr(row, k) for k in keys})).all(axis=1)]
        settings = json.loads(row.settings) if isinstance(row.settings, str) and row.settings else {}
        per_epoch = settings.get("steps_per_epoch")
        if epochs.empty or held.empty or not per_epoch:
            continue
        one_step = float(held["predicted"].iloc[0])
        predicted = float(epochs.iloc[0]) * per_epoch * one_step
        predicted += max(0.0, float(compile_s.iloc[0]) - one_step) if not compile_s.empty else 0.0
        out.append({"backend": row.backend, "model": row.model, "measured": row.value, "predicted": predicted})
    return pd.DataFrame(out, columns=["backend", "model", "measured", "predicted"])


# --- the planner's hook ---------------------------------------------------------------------------------------


_FITS: dict[int, tuple[weakref.ref[pd.DataFrame], TrainingFit]] = {}


def fit_for(frame: pd.DataFrame | None, units: UnitFit | None = None) -> TrainingFit:
    """The training fit of ``frame`` (with ``units``, the unit-priced model too), computed once per frame object (a
    DataFrame is not hashable: keyed by id, checked through a weak reference so a reused id never returns another
    frame's fit)."""
    if frame is None:
        return TrainingFit()
    cached = _FITS.get(id(frame))
    if cached is not None and cached[0]() is frame:
        return cached[1]
    fit = TrainingFit.from_frame(frame, units)
    _FITS[id(frame)] = (weakref.ref(frame), fit)
    return fit


def training_prediction(
    fit: TrainingFit,
    workload: Workload,
    route: Route,
    device: Device,
    prior: Prediction,
    wanted_threads: Callable[[str], int | None],
    prior_for: Callable[[Device], Prediction] | None = None,
    calibrated: Callable[[], CalibratedHost | None] | None = None,
    residuals: TrainingResiduals | None = None,
) -> Prediction:
    """A training step from the measured training rows (``fit``: ``fit_for`` the results): fitted on a measured CPU
    host; on an unmeasured host that ``calibrated`` gives a calibration of (and the unit models it compared with),
    carried over by its kernel units (``TrainingFit.calibrated``), as on a host of a measured key calibrated
    (``appopt calibrate``, not the quick probe) against that key's own rows: one CPU model name can run at other
    speeds from one machine to the next. Else transferred to another CPU (or several) through the fit's ratio to the
    prior on the measuring host (``TrainingFit.transfer``); the prior on GPUs and for frameworks without measured
    training rows, its basis then saying why. With ``residuals`` (the stored held-out figures), a CPU step carries
    its p10-p90 interval (``perfmodels.training_intervals``)."""
    if not fit.groups:
        return prior
    if device.kind != "cpu":
        return replace(prior, basis=f"{prior.basis} (no GPU training measured for {route.framework} {route.precision})")
    targets = fit.targets()
    target = local_target_key() if device.name in ("local",) else device.name
    if target not in targets:
        target = next((t for t in targets if t.startswith(target_key(device.name, 0)[:-3])), "")
    predicted, carried = None, ""
    host = calibrated() if calibrated is not None and device.count == 1 else None
    if target and device.count == 1:
        if host is not None and host.calibration.source == target and host.calibration.via == "calibration":
            # a host of the measured key, calibrated against that key's rows: it may not run as the host that
            # recorded them did (a VM's "Intel Xeon Processor" 2-core host measured 1.7x less GEMM peak one day).
            # A quick probe's few units are not enough to move measured rows (docs/decisions.md, 2026-11-26).
            predicted, carried = fit.calibrated(workload, route, host), "calibration"
        if predicted is None:
            predicted, carried = fit.predict(workload, route, target, wanted_threads(target)), ""
    elif host is not None:
        predicted, carried = fit.calibrated(workload, route, host), "calibration"
    if predicted is None and not (target and device.count == 1) and prior_for is not None:
        predicted, carried = fit.transfer(workload, route, device, prior, prior_for), "roofline"
    if predicted is None:
        return replace(prior, basis=f"{prior.basis} (no training rows for {route.framework} on this host)")
    if residuals is not None:
        group = fit.group_for(route)
        band = (
            residuals.transfer.get(carried)
            if carried
            else residuals.fitted(group.backend, group.precision, group.framework)
            if group is not None
            else None
        )
        predicted = with_interval(predicted, band)
    return replace(predicted, detail={**predicted.detail, "prior_step_s": prior.step_seconds})
