"""A training step's forward pass priced by the kernel-unit models the inference sweeps learned on the same host.

The training rows' models are cut into kernel units (``analysis.unitgraph``) like any inference model; each unit's
time on the trainer's framework comes from that framework's unit model (``perfmodels.unitfit``) at the row's thread
count. So a held-out family borrows the rates other models' kernels of similar shape were measured at, instead of one
FLOP rate for the whole model. The forward pass's priced seconds are one feature of ``perfmodels.training_fit``'s
unit-priced model; the backward pass is learned as a multiple of it.

Only frameworks whose backward pass runs the kernels their inference units measured are priced this way
(``UNIT_PRICED_FRAMEWORKS``): PyTorch's autograd calls the same ATen/oneDNN convolution and matrix kernels as its
forward, while appopt-runtime's gradients run NumPy im2col and ``matmul`` kernels (``runtime/kernels/grad_conv.py``)
that no unit sweep timed. Why: docs/decisions.md (2026-11-26, training step time priced by kernel units). A
framework with no unit sweep of its own whose kernels are the same library borrows a swept one's units
(``BORROWED_UNITS``: TensorFlow's, PyTorch's), keeping coefficients of its own.

appopt-runtime's own training kernels are swept apart (``benchmarks.backward_units``): each sampled unit's forward
pass in training mode and its backward pass (the gradient kernels the autodiff emits for it), and the optimiser's
update. ``fit_training_units`` learns each part per unit kind, as the inference units are learned, and
``TrainingUnitRoute`` prices a step's forward, backward and optimiser update from them.

Where a row's units come from: its ``units`` column when recorded, else ``TRAINING_UNITS``, the units of the
training suite's shipped models keyed by task name (written by ``python -m benchmarks.training_units``).
"""

from __future__ import annotations

import importlib.resources
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from analysis.units import Unit, decode_units, roofline_seconds, unfuse, unfused, unit_bytes, unit_features
from perfmodels.fit import nnls

if TYPE_CHECKING:
    import pandas as pd

    from perfmodels.unitfit import UnitFit, UnitRoute

#: Frameworks whose training step is priced by their inference kernel units (see the module docstring).
UNIT_PRICED_FRAMEWORKS = ("pytorch",)


@dataclass(frozen=True)
class Lender:
    """The inference unit sweep whose units price a trainer: the route (``framework``, ``compiler``) of a swept
    framework's plain kernels, and the unit ``kinds`` the trainer's own compiler emits kernels of its own for, priced
    by the units of the sweep of that compiler (``own``: its route's framework and compiler). ``own_threads``: the
    trainer's steps do not gain from threads as the lender's kernels do, so its forward is priced by the units at
    one thread and sped up by its own rows' thread exponent (``perfmodels.training_fit``). ``apart``: unit kinds the
    lender's units price by shape while the trainer runs them on kernels of another library, so the step fit gives
    their priced time a coefficient of its own (``training_fit.UNIT_FEATURES``' ``apart_units``)."""

    framework: str
    compiler: str = "none"
    own: tuple[str, str] | None = None
    kinds: tuple[str, ...] = ()
    own_threads: bool = False
    apart: tuple[str, ...] = ()


#: Trainer routes (framework, compiler) with no inference unit sweep of their own, priced by the units of another
#: swept route (with coefficients of their framework's own and a scale per route, as
#: ``perfmodels.training_fit.fit_routes`` fits every framework). TensorFlow's CPU convolutions and matrix products,
#: and their gradients, are oneDNN/MKL calls as PyTorch's are. XLA emits its own kernels: its matrix products and
#: dense convolutions run near PyTorch's speed, so PyTorch's units price their shape and XLA's scale its speed; its
#: depthwise convolutions run 9-50x slower than PyTorch's here, so those are priced by the units of JAX's XLA route
#: (``jax-xla``, swept as the ONNX graph's ``xla`` compiler). Not its small kernels: a unit swept alone through JAX
#: pays a dispatch per input that XLA's fused training step does not (docs/decisions.md, 2026-11-26, XLA's depthwise
#: convolutions priced by JAX's XLA units). TensorFlow's eager steps gain 1.05x from a second thread (thread exponent
#: 0.07 on the recording host) where PyTorch's kernels gain up to 2x (its steps' exponent 0.56), so its forward takes
#: its own threading; XLA's steps gain as PyTorch's do (0.50) and keep the per-kernel speed-ups (docs/decisions.md,
#: 2026-11-27, TensorFlow's threading). XLA's dense convolutions are Eigen's spatial convolution, not the oneDNN
#: kernels PyTorch's units time: 1.1-1.5x TensorFlow's eager (oneDNN) step of one convolution, and 20x on a 3x3
#: convolution over a 2x2 map (ResNet-50's last stages at reduced resolution; ``python -m benchmarks.xla_kernels``);
#: its matrix products fuse as PyTorch's do not. One coefficient for both priced XLA's ResNets at 0.5x their steps,
#: so its convolutions are ``apart`` (docs/decisions.md, 2026-11-29, XLA's dense convolutions apart). TensorFlow's
#: eager convolutions are apart too: though both call oneDNN, on an AMD EPYC they ran slower against PyTorch's units
#: than its products did (its CNNs' steps at 0.55-0.75x held out, its transformers' at 1.3-1.45x; docs/decisions.md,
#: 2026-11-29, a per-tensor term). XLA's depthwise convolutions join its dense ones apart: JAX's units time their
#: forward, while a step also runs their gradients, XLA kernels of their own that the coefficient of the whole
#: forward (set by the products) left out; held out by family its MobileNets were predicted at 0.77x on the Xeon and
#: 0.34x on the AMD EPYC (docs/decisions.md, 2026-11-29, XLA's depthwise convolutions apart).
BORROWED_UNITS: dict[tuple[str, str], Lender] = {
    ("tensorflow", "none"): Lender("pytorch", own_threads=True, apart=("conv",)),
    ("tensorflow", "xla"): Lender(
        "pytorch", own=("onnxruntime", "xla"), kinds=("dwconv", "dwpw"), apart=("conv", "dwconv", "dwpw")
    ),
}
#: The training suite's models cut into kernel units, by task name (``python -m benchmarks.training_units``).
TRAINING_UNITS = Path(str(importlib.resources.files("benchmarks.results").joinpath("training_units.json")))
#: The layout and precision of the unit sweeps' routes a trainer is priced by (NCHW, fp32).
_SWEPT_ROUTE = ("NCHW", "fp32")

#: (target, lender, threads) of a unit route that priced training rows.
UnitRouteKey = tuple[str, Lender, int]


def read_training_units(path: Path = TRAINING_UNITS) -> dict[str, tuple[Unit, ...]]:
    """Units per task from ``path`` (none when the file is missing); ValueError naming the task for a bad entry."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected an object of task name -> units")
    out = {}
    for task, encoded in data.items():
        try:
            out[str(task)] = tuple(decode_units(encoded))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {task}: {error}") from None
    return out


#: Unit kinds a training step is priced apart into (``analysis.units.unfuse``): the training models were fitted on
#: rows whose recurrent layers were their products and gates, and no training sweep measures the layer whole.
TRAINING_UNFUSED = ("recurrent",)


def training_units(units: Sequence[Unit]) -> tuple[Unit, ...]:
    """``units`` as the training models price them (``TRAINING_UNFUSED`` kinds in their parts)."""
    return tuple(unfuse(units, TRAINING_UNFUSED))


def row_units(rows: pd.DataFrame, shipped: Mapping[str, tuple[Unit, ...]]) -> list[Sequence[Unit]]:
    """Each row's units as its model holds them: its own ``units`` when recorded, else the shipped ones of its model
    (or none). The training models price them as ``training_units`` cuts them and count their ``weight_tensors``
    before that cut (a recurrent layer's weights serve every step)."""
    recorded = rows["units"] if "units" in rows else [None] * len(rows)
    return [
        decode_units(text) if isinstance(text, str) and text else shipped.get(str(model), ())
        for text, model in zip(recorded, rows["model"], strict=True)
    ]


def units_framework(framework: str, compiler: str = "none") -> Lender | None:
    """The swept routes whose inference kernel units price a (``framework``, ``compiler``) trainer's step: its own
    framework's plain route for a ``UNIT_PRICED_FRAMEWORKS`` framework, the lender ``BORROWED_UNITS`` names, else None
    (the FLOP model)."""
    if framework in UNIT_PRICED_FRAMEWORKS:
        return Lender(framework)
    return BORROWED_UNITS.get((framework, compiler or "none"))


def threads_own(framework: str, compiler: str = "none") -> bool:
    """Whether a (``framework``, ``compiler``) trainer priced by another framework's units takes its own threading
    (``Lender.own_threads``): its forward priced at one thread, sped up by its own rows' thread exponent."""
    lender = units_framework(framework, compiler)
    return lender is not None and lender.own_threads


def lender_of(framework: str, compiler: str = "none", any_framework: bool = False) -> Lender | None:
    """Whose unit routes price a (``framework``, ``compiler``) trainer: ``units_framework``, or with
    ``any_framework`` (the held-out evaluation's candidates) the framework's own plain route where no lender prices
    it."""
    return units_framework(framework, compiler) or (Lender(framework) if any_framework else None)


def unit_route(
    units: UnitFit | None,
    target: str,
    framework: str,
    threads: int,
    any_framework: bool = False,
    compiler: str = "none",
) -> PricesUnits | None:
    """The unit model a (``framework``, ``compiler``) trainer's kernels are priced by on ``target`` at ``threads``:
    the route of its ``lender_of``, with the kinds its compiler emits its own kernels for priced by that compiler's
    sweep (``KindsPricedApart``: at one thread, sped up as the lender's same units where it swept one thread). None:
    not swept (either sweep), or no lender prices it."""
    lender = lender_of(framework, compiler, any_framework)
    if units is None or lender is None:
        return None
    fit = units

    def swept(owner: tuple[str, str], count: int) -> UnitRoute | None:
        return fit.route((target, *owner, *_SWEPT_ROUTE, count))

    lent, threads = (lender.framework, lender.compiler), int(threads)
    route = swept(lent, threads)
    if route is None or lender.own is None:
        return route
    kinds = frozenset(lender.kinds)
    own_one = swept(lender.own, 1)
    base_one = None if threads == 1 else swept(lent, 1)  # at one thread the lender's speed-up is 1
    if own_one is not None and (threads == 1 or base_one is not None):
        return KindsPricedApart(route, own_one, kinds, base_one)
    own = swept(lender.own, threads)  # as they ran at this count
    return None if own is None else KindsPricedApart(route, own, kinds)


class PricesUnits(Protocol):
    """What prices a forward pass unit by unit: a ``perfmodels.unitfit.UnitRoute`` or a ``KindsPricedApart``."""

    def unit_seconds(self, units: Sequence[Unit], batch: int) -> np.ndarray: ...


@dataclass(frozen=True)
class KindsPricedApart:
    """A lender's unit route (``base``) whose units of ``kinds`` are priced by another sweep's route (``own``).

    With ``base_one`` (the lender's route at one thread), ``own`` is the other sweep's route at one thread, and its
    units take the speed-up the lender's same units gain from one thread to ``base``'s count: JAX's XLA units, swept
    one operation per call, gain nothing from a second thread (depthwise median 1.02x), where XLA's training steps
    of the same depthwise nets gain 1.5-1.85x (docs/decisions.md, 2026-11-28, XLA's depthwise units' threads)."""

    base: UnitRoute
    own: UnitRoute
    kinds: frozenset[str]
    base_one: UnitRoute | None = None

    def unit_seconds(self, units: Sequence[Unit], batch: int) -> np.ndarray:
        """``UnitRoute.unit_seconds``: each unit by ``own`` where its kind is one of ``kinds`` (sped up as the
        lender's, with ``base_one``), else by ``base``."""
        out = self.base.unit_seconds(units, batch)
        apart = [i for i, unit in enumerate(units) if unit.kind in self.kinds]
        if apart:
            picked = [units[i] for i in apart]
            own = self.own.unit_seconds(picked, batch)
            if self.base_one is not None:
                own = own * out[apart] / self.base_one.unit_seconds(picked, batch)
            out[apart] = own
        return out


def convolution_outputs(units: Sequence[Unit]) -> float:
    """Elements per sample of ``units``' convolution outputs (a ``dwpw``'s depthwise output too): the tensors a CNN's
    batch normalisation, activation and residual add run over in training, forward and backward, in kernels of
    their own. An inference unit folds those into its convolution, so the forward it prices leaves them out."""
    total = 0.0
    for unit in units:
        if unit.kind == "conv":
            total += unit.count * unit["n"] * unit["cout"] * unit["oh"] * unit["ow"]
        elif unit.kind == "dwconv":
            total += unit.count * unit["n"] * unit["c"] * unit["mult"] * unit["oh"] * unit["ow"]
        elif unit.kind == "dwpw":
            total += unit.count * unit["n"] * (unit["c"] + unit["cout"]) * unit["oh"] * unit["ow"]
    return total


def passed_elements(units: Sequence[Unit]) -> float:
    """Elements per sample a training step passes over in kernels of their own beyond what the forward units price:
    the convolution outputs (``convolution_outputs``), and the outputs of one-input element-wise units
    (normalisations and activations not folded into a convolution: DenseNet's BN-ReLU over concatenated inputs) and
    of data movement (concatenations, copies), whose backward passes are as long again."""
    total = convolution_outputs(units)
    for unit in units:
        if unit.kind == "move" or (unit.kind == "eltwise" and unit["inputs"] == 1):
            total += unit.count * unit["elements"]
    return total


#: Weight tensors per unit of each kind that trains weights: a convolution's or product's weight and its bias (or the
#: scale and shift of the normalisation it folds), two of each in a separable block, a layer normalisation's scale
#: and shift, a recurrent layer's input and hidden weights and their biases per direction.
WEIGHT_TENSORS = {"conv": 2, "dwconv": 2, "dwpw": 4, "gemm": 2, "layernorm": 2, "skipnorm": 2}
RECURRENT_TENSORS_PER_DIRECTION = 4


def weight_tensors(units: Sequence[Unit]) -> float:
    """The weight tensors a step of ``units`` (as the model holds them, before ``training_units``) updates. A
    trainer's optimiser, its gradient zeroing and its autograd's accumulation each run once per tensor, not per
    element: the digits MLP's few tensors cost far less than its parameter bytes at the fits' per-byte coefficient,
    which ResNet-50's weight-heavy layers set (docs/decisions.md, 2026-11-29, a per-tensor term)."""
    total = 0.0
    for unit in units:
        if unit.kind == "recurrent":
            total += unit.count * RECURRENT_TENSORS_PER_DIRECTION * unit["directions"]
        else:
            total += unit.count * WEIGHT_TENSORS.get(unit.kind, 0)
    return total


#: Unit kinds a mixed-precision step runs low (``runtime.passes.amp``'s ``LOW_PRECISION_OPS``: convolutions and
#: products): each casts its operands down and its kernel computes them in fp32 (NumPy has no fast half GEMM).
LOW_PRECISION_KINDS = ("conv", "dwconv", "dwpw", "gemm", "bmm")


def cast_bytes(units: Sequence[Unit], batch: int) -> float:
    """fp32 bytes of the operands (inputs, outputs, weights) of ``units``' low-precision kinds at ``batch``: what a
    mixed-precision step casts, forward and backward, where its fp32 step casts nothing."""
    return sum(unit_bytes(u, batch) for u in units if u.kind in LOW_PRECISION_KINDS)


def kernel_units(units: Sequence[Unit]) -> list[Unit]:
    """``units`` less the nodes dispatched for no work (``noop``: an ONNX export's shape arithmetic and views): a
    training step runs the model's own code, and the step fits carry dispatch in their per-node term."""
    return [u for u in units if u.kind != "noop"]


#: A max pool's weight in a forward pass priced for a training step. The step fits scale the forward by about 3
#: (backward ≈ 2x forward: one gradient for the inputs and one for the weights), but a max pool has no weights and its
#: backward only scatters each window's gradient to the input its forward picked: PyTorch's max pools run a step
#: (forward with its indices, then backward) in 0.95-1.55x their forward, where its average pools take 2.0-3.1x
#: (docs/decisions.md, 2026-11-27). So a max pool weighs 1.25/3; an average pool keeps the fits' factor.
MAX_POOL_FORWARD_SHARE = 1.25 / 3.0


def _is_max_pool(unit: Unit) -> bool:
    """Whether ``unit`` is a max pool (``MAX_POOL_FORWARD_SHARE``)."""
    return unit.kind == "pool" and not unit.dims.get("avg", 0)


#: Unit kinds a graph compiler's training step fuses into the kernels around them: elementwise ops and copies (a
#: GRU's gates, its slices and reshapes), which an eager framework runs as one kernel each and its unit sweep timed
#: so, dispatch included. A compiled route's forward is priced without them; its per-node term and the passed
#: elements' traffic carry what is left of them. Held out by family, torch.compile's GRU went from +58% to +32% and
#: XLA's from +57% to +22% (docs/decisions.md, 2026-11-27, compiled routes' fused pointwise units).
FUSED_KINDS = ("eltwise", "move")


def fused_kinds(compiler: str) -> tuple[str, ...]:
    """The unit kinds a trainer compiled by ``compiler`` fuses away (``FUSED_KINDS``; none for an eager one)."""
    return FUSED_KINDS if compiler not in ("", "none") else ()


def forward_seconds(route: PricesUnits, units: Sequence[Unit], batch: int, fused: Sequence[str] = ()) -> float:
    """Seconds of one forward pass of ``batch`` samples through ``units`` on ``route``, as a training step's fit
    scales it: the sum of its units' times, max pools at ``MAX_POOL_FORWARD_SHARE``, units of the ``fused`` kinds at
    none (``fused_kinds``), without the per-query call cost (the training fit's per-node term carries dispatch). NaN
    when ``units`` is empty or holds a kind the route has not learned."""
    units = kernel_units(units)
    if not units:
        return math.nan
    units = [u for u in units if u.kind not in fused]
    if not units:
        return 0.0
    times = route.unit_seconds(units, batch)
    if np.isnan(times).any():
        return math.nan
    weights = np.array([u.count * (MAX_POOL_FORWARD_SHARE if _is_max_pool(u) else 1.0) for u in units], dtype=float)
    return float(weights @ times)


# --- a framework's own training kernels, swept as units (``benchmarks.backward_units``) ---------------------------

#: Families of the training-unit sweep's rows: each unit's forward nodes in training mode, its backward nodes (the
#: gradient kernels the autodiff emits for it), and the optimiser's update over sets of tensors.
TRAIN_FORWARD_FAMILY = "kernel-unit-train-forward"
BACKWARD_FAMILY = "kernel-unit-backward"
OPTIMIZER_FAMILY = "kernel-optimizer"
#: The family of the training suite's per-node probes (chains of tiny layers at two depths): no architecture, but
#: what a step pays per node, which few-node families cannot pin. Always fitted, never held out nor predicted.
PROBE_FAMILY = "node-probe"
#: The thread count the training units are swept at: appopt-runtime's steps gain 0-8% from a second thread (its
#: gradients are NumPy), so one thread's units price every thread count (docs/decisions.md, backward units).
TRAINING_UNIT_THREADS = 1
#: A part's time is taken as at least this (s): a two-input add's gradient passes through with no node of its own
#: (0 measured), and the fit learns log(time / roofline time).
PART_FLOOR_S = 1e-7
#: A kind is learned from at least this many rows (as ``perfmodels.unitfit.MIN_KIND_ROWS``).
MIN_PART_ROWS = 6
#: Weight tensors (with their biases) of one unit of each kind: what the optimiser loops over.
PARAM_TENSORS = {"conv": 2, "dwconv": 2, "dwpw": 4, "gemm": 2, "layernorm": 2, "skipnorm": 2}
#: The dimensions of each kind that are a row stride of the arrays its gradient kernels transpose and copy.
STRIDED_DIMS = {
    "conv": ("cin", "cout"),
    "dwpw": ("c", "cout"),
    "dwconv": ("c",),
    "gemm": ("k", "n"),
    "bmm": ("k", "n"),
    "layernorm": ("cols",),
    "softmax": ("cols",),
    "skipnorm": ("cols",),
}
#: ``alignment`` counts powers of two up to this: 2**12 floats is 16 KiB, past the L1 cache's set span.
MAX_ALIGNMENT = 12


def alignment(size: int) -> int:
    """How many times 2 divides ``size`` (at most ``MAX_ALIGNMENT``)."""
    size, count = int(size), 0
    while size > 0 and size % 2 == 0 and count < MAX_ALIGNMENT:
        size, count = size // 2, count + 1
    return count


def trained(unit: Unit) -> Unit:
    """``unit`` as a trainer runs it: its weights stored and trained (``init_w`` 1). A forward graph may compute a
    weight (a transposed ``MatMul`` weight is ``init_w`` 0), but training reads the stored tensor and writes its
    gradient, which a unit with computed weights would not have (its backward then has no weight gradient)."""
    if unit.dims.get("init_w", 1) == 1:
        return unit
    return Unit(unit.kind, {**unit.dims, "init_w": 1}, unit.count)


def training_unit_features(unit: Unit) -> list[float]:
    """What a training part's regressor sees: the inference units' features (``analysis.units.unit_features``) and
    the power-of-two alignment of the unit's row strides (``STRIDED_DIMS``). The runtime's weight gradients
    transpose and copy weight-sized arrays; at 512-2048 channels, a power of two, those copies hit the same cache
    sets row after row, and a convolution's backward took 3.7-5.2x as long as with 8 channels more or fewer
    (docs/decisions.md, backward units)."""
    return [*unit_features(unit), *(float(alignment(unit[d])) for d in STRIDED_DIMS.get(unit.kind, ()))]


@dataclass(frozen=True)
class PartModel:
    """One part (forward in training mode, or backward) of a framework's training kernels on a target: per unit
    kind, log(time / roofline time) learned from ``training_unit_features`` (as ``perfmodels.unitfit`` learns
    inference units, without a call cost: the profiler timed the nodes alone)."""

    peak_flops: float
    bandwidth: float
    kinds: dict[str, Any] = field(compare=False)
    rows: int = 0

    def unit_seconds(self, units: Sequence[Unit], batch: int) -> np.ndarray:
        """Seconds of each unit at ``batch``; NaN for a kind not learned (a ``skipnorm`` then as its ``unfused``
        parts where those are learned)."""
        out = np.full(len(units), math.nan)
        for i, unit in enumerate(units):
            model = self.kinds.get(unit.kind)
            if model is None:
                parts = unfused(unit)
                if parts is not None and all(p.kind in self.kinds for p in parts):
                    counts = np.array([p.count for p in parts], dtype=float)
                    out[i] = float(counts @ self.unit_seconds(parts, batch))
                continue
            scaled = trained(unit).at_batch(batch)
            features = np.array([training_unit_features(scaled)])
            prior = roofline_seconds(scaled, 1, self.peak_flops, self.bandwidth)
            out[i] = prior * float(np.exp(model.predict(features)[0]))
        return out

    def seconds(self, units: Sequence[Unit], batch: int) -> float:
        """The sum of ``units``' times (counts included); NaN when empty or a kind is not learned."""
        if not units:
            return math.nan
        times = self.unit_seconds(units, batch)
        return math.nan if np.isnan(times).any() else float(np.array([u.count for u in units], dtype=float) @ times)


def fit_part(rows: pd.DataFrame) -> PartModel:
    """A ``PartModel`` from one part's sweep rows (``perfmodels.unitfit.sweep_rows`` form: ``unit``, ``t``,
    ``peak_flops``, ``bandwidth``)."""
    from perfmodels.trees import compile_ensemble
    from perfmodels.unitfit import _regressor

    peak, bandwidth = float(rows["peak_flops"].median()), float(rows["bandwidth"].median())
    kinds: dict[str, Any] = {}
    for kind, group in rows.groupby([u.kind for u in rows["unit"]]):
        if len(group) < MIN_PART_ROWS:
            continue
        units = list(group["unit"])
        features = np.array([training_unit_features(u) for u in units])
        prior = np.array([roofline_seconds(u, 1, peak, bandwidth) for u in units])
        target = np.log(np.maximum(group["t"].to_numpy(dtype=float), PART_FLOOR_S) / prior)
        regressor = _regressor().fit(features, target)
        kinds[str(kind)] = compile_ensemble(regressor, features) or regressor
    return PartModel(peak, bandwidth, kinds, len(rows))


@dataclass(frozen=True)
class OptimizerCost:
    """One optimiser update: seconds per parameter tensor (its NumPy calls) and per element (its traffic)."""

    tensor_s: float
    element_s: float

    def seconds(self, tensors: float, elements: float) -> float:
        return self.tensor_s * tensors + self.element_s * elements


def fit_optimizer(rows: pd.DataFrame) -> OptimizerCost | None:
    """Non-negative least squares of ``OPTIMIZER_FAMILY`` rows' seconds on (tensors, elements), relative error;
    None with fewer than two shapes."""
    if len(rows) < 2:
        return None
    settings = [json.loads(text) for text in rows["settings"]]
    a = np.array([[float(s["tensors"]), float(s["tensors"]) * float(s["elements"])] for s in settings])
    t = _seconds(rows)
    tensor_s, element_s = nnls(a / t[:, None], np.ones(len(t)))
    return OptimizerCost(float(tensor_s), float(element_s))


def param_tensors(units: Sequence[Unit]) -> int:
    """How many parameter tensors ``units`` hold (``PARAM_TENSORS`` per unit)."""
    return sum(PARAM_TENSORS.get(u.kind, 0) * u.count for u in units)


@dataclass(frozen=True)
class TrainingUnitRoute:
    """A framework's training step priced by its own swept training kernels on one target: the forward in
    training mode and the backward unit by unit, and the optimiser update."""

    forward: PartModel
    backward: PartModel
    optimizer: OptimizerCost | None

    def parts(self, units: Sequence[Unit], batch: int, params: float) -> tuple[float, float, float]:
        """(forward, backward, optimiser) seconds of one step of ``batch`` through ``units`` with ``params``
        parameters; NaN for a part that cannot be priced (no units, or a kind not swept)."""
        optimizer = math.nan if self.optimizer is None else self.optimizer.seconds(param_tensors(units), params)
        kernels = kernel_units(units)
        return self.forward.seconds(kernels, batch), self.backward.seconds(kernels, batch), optimizer


def _seconds(rows: pd.DataFrame) -> np.ndarray:
    """Rows' times in seconds by ``perfmodels.fit``'s rule (a one-thread row measured under load: its CPU time)."""
    from perfmodels.fit import effective_ms

    return effective_ms(rows).to_numpy(dtype=float) / 1e3


#: Precisions whose training is mixed (low-precision products, fp32 master weights: ``runtime.passes.amp``).
MIXED_PRECISIONS = ("fp16", "bf16")
#: A training-unit route's key: (target, framework, precision); mixed precision (``fp16``) is swept apart, as its
#: casts and low-precision kernels cost by kind what no fp32 unit says.
TrainingRouteKey = tuple[str, str, str]


def fit_training_units(frame: pd.DataFrame) -> dict[TrainingRouteKey, TrainingUnitRoute]:
    """The training-unit models of every (target, framework, precision) ``frame`` swept both parts of, at
    ``TRAINING_UNIT_THREADS``. A precision with no optimiser rows of its own takes its framework's fp32 ones (the
    mixed-precision trainer updates fp32 master weights)."""
    from perfmodels.unitfit import UNIT_FAMILY, sweep_rows

    if frame.empty or "family" not in frame:
        return {}
    measured = frame[(frame["source"] == "measured") & (frame["threads"] == TRAINING_UNIT_THREADS)]
    measured = measured.assign(precision=_precisions(measured))
    parts = {}
    for family in (TRAIN_FORWARD_FAMILY, BACKWARD_FAMILY):
        rows = sweep_rows(measured[measured["family"] == family].assign(family=UNIT_FAMILY))
        parts[family] = {
            (str(k[0]), str(k[1]), str(k[2])): g for k, g in rows.groupby(["target", "framework", "precision"])
        }
    optimizer_rows = measured[measured["family"] == OPTIMIZER_FAMILY]
    out = {}
    for key in sorted(set(parts[TRAIN_FORWARD_FAMILY]) & set(parts[BACKWARD_FAMILY])):
        target, framework, precision = key
        route = optimizer_rows[(optimizer_rows["target"] == target) & (optimizer_rows["framework"] == framework)]
        mine = route[route["precision"] == precision]
        out[key] = TrainingUnitRoute(
            fit_part(parts[TRAIN_FORWARD_FAMILY][key]),
            fit_part(parts[BACKWARD_FAMILY][key]),
            fit_optimizer(mine if len(mine) else route[route["precision"] == "fp32"]),
        )
    return out


def training_route(
    routes: Mapping[TrainingRouteKey, TrainingUnitRoute], target: str, framework: str, precision: str = "fp32"
) -> TrainingUnitRoute | None:
    """The training units a (``framework``, ``precision``) route's steps on ``target`` are priced by: its
    precision's own sweep, else its framework's fp32 sweep (a mixed-precision route then differs by its fitted
    scale alone); None where neither was swept."""
    return routes.get((target, framework, precision)) or routes.get((target, framework, "fp32"))


def _precisions(rows: pd.DataFrame) -> pd.Series:
    """Rows' ``precision``, ``fp32`` where not recorded."""
    import pandas

    if "precision" not in rows:
        return pandas.Series("fp32", index=rows.index)
    return rows["precision"].fillna("fp32").replace("", "fp32").astype(str)
