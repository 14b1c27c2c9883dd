"""appopt-runtime's training kernels swept as units: each sampled unit's forward (training mode) and backward time.

A *backward unit* is the gradient kernels the runtime's autodiff emits for one forward kernel unit
(``analysis.units``): a convolution's ``ConvGrad`` (dX and dW, its bias's sum) and the ``ReluGrad`` of its fused
activation, a matrix product's dX/dW products, a pool's, a normalisation's, an element-wise node's gradient. Each
sampled unit is built as its one-unit ONNX model (``benchmarks.unit_sweep.unit_model``) with every input made a
trainable tensor, so the gradient of the unit's input is computed as it is for every unit of a model but the first;
every convolution gets the batch normalisation CNNs train it with (inference graphs fold it away, so the unit cannot
say; ``_normalise_convolutions``); the model gets an ``mse`` loss, is differentiated by the runtime
(``runtime.training.build_training_graph``) and run under the runtime's profiler. The unit's nodes are its forward;
the nodes named after them (``<node>__<Grad>``) and the gradient outputs of its own weights are its backward; the loss
and its gradient are left out (a model has one). Rows (``mode`` ``training``, ``scenario`` ``kernel``) keep the
forward unit in ``units``, so ``perfmodels.training_units`` learns each part per unit kind as the inference units are
learned (``perfmodels.unitfit``).

The optimiser is swept apart (``OPTIMIZER_SHAPES``): SGD with momentum (the suite's trainers') over sets of equal
tensors, the runtime's per-tensor NumPy calls and per-element traffic.

Only one thread is swept: the runtime's measured training steps gain 0-8% from a second thread, and multi-threaded
rows measured under load are not fitted (``perfmodels.fit.unreliable``). Every row records ``other_cpu`` over its own
measurement. Command (a few minutes on one core)::

    python -m benchmarks.backward_units --out rows_backward.csv [--notes TEXT] [--scale 0.5]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from analysis.units import Unit, encode_units, unit_flops
from benchmarks.unit_sweep import draw_units, unit_model
from perfmodels.training_units import (
    BACKWARD_FAMILY,
    MIXED_PRECISIONS,
    OPTIMIZER_FAMILY,
    TRAIN_FORWARD_FAMILY,
    TRAINING_UNIT_THREADS,
    trained,
)

#: Units drawn per sampler (``benchmarks.unit_sweep`` samplers): the kinds the training suite's models are made of,
#: with the small-model and full-resolution samplers, at about a tenth of the inference sweep's sizes.
BACKWARD_SWEEP = {
    "conv": 24,
    "conv_large": 8,
    "conv_small": 10,
    "conv_stem": 6,
    "dwpw": 10,
    "dwpw_small": 6,
    "gemm": 12,
    "gemm_large": 4,
    "bmm": 8,
    "pool": 8,
    "eltwise": 8,
    "layernorm": 8,
    "softmax": 8,
    "move": 8,
    "permute": 8,
    "skipnorm": 8,
}
#: The sweep's seed (not the inference sweep's 0: other shapes than those the inference units were fitted on).
SEED = 17
#: Units drawn per sampler of this module's own (``WIDE_SAMPLERS``), from a stream seeded ``SEED + 1``: weight-heavy
#: kernels over few pixels or rows (a CNN's last stages at reduced resolution, small-batch fully-connected layers),
#: half of them with power-of-two widths. There the runtime's weight gradient is an outer product over so few pixels
#: that writing it and its copies is the kernel's time, up to 30x its roofline, and 4-5x more at power-of-two
#: widths; the samplers above draw few such shapes (docs/decisions.md, backward units).
WIDE_SWEEP = {"conv_wide": 40, "gemm_wide": 12}
#: (tensors, elements per tensor) of the optimiser sweep: a few large tensors to many small ones.
OPTIMIZER_SHAPES = (
    (1, 1 << 20),
    (4, 1 << 20),
    (1, 1 << 23),
    (4, 1 << 22),
    (16, 1 << 16),
    (64, 4096),
    (160, 1024),
    (160, 16384),
    (300, 256),
    (50, 1 << 18),
)
#: A unit is run until ``MIN_RUNS`` runs and ``MIN_SECONDS`` have passed (at most ``MAX_RUNS``), after one warm-up.
MIN_RUNS, MAX_RUNS, MIN_SECONDS = 3, 50, 0.2
_UNIT_PREFIX = "unit"
#: How ``runtime.passes.amp`` names the casts it inserts (``fresh(f"{value}__cast")``).
_AMP_CAST = re.compile(r"__cast(_\d+)?$")
#: Every row's ``notes`` unless told otherwise (the shipped rows were swept with ``--notes "swept under load
#: (LOADED: shared 2-core machine) by benchmarks.backward_units"``; each row's ``other_cpu`` says how loaded).
DEFAULT_NOTES = "benchmarks.backward_units"


@dataclass(frozen=True)
class TrainingUnitModel:
    """A one-unit model ready for the autodiff: its ONNX model, its nodes' names, its own weights, the tensors
    standing for its inputs (trainable, so their gradients are computed) and its output's shape."""

    proto: onnx.ModelProto
    forward_nodes: tuple[str, ...]
    weights: tuple[str, ...]
    inputs: dict[str, tuple[int, ...]]
    output_shape: tuple[int, ...]


def training_unit_model(unit: Unit, seed: int = 0, normalise: bool = True) -> TrainingUnitModel:
    """``unit``'s one-unit model with named nodes and its inputs turned into initializers (see the module
    docstring); ``normalise``: with a batch normalisation after every convolution."""
    proto, inputs = unit_model(trained(unit))
    running = _normalise_convolutions(proto) if normalise else set()
    names = []
    for index, node in enumerate(proto.graph.node):
        node.name = f"{_UNIT_PREFIX}{index}"
        names.append(node.name)
    weights = tuple(
        t.name
        for t in proto.graph.initializer
        if t.data_type == onnx.TensorProto.FLOAT and t.dims and t.name not in running
    )
    rng = np.random.default_rng(seed)
    kept = [v for v in proto.graph.input if v.name not in inputs]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    for name, shape in inputs.items():
        value = rng.standard_normal(shape).astype(np.float32)
        proto.graph.initializer.append(numpy_helper.from_array(value, name))
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    return TrainingUnitModel(proto, tuple(names), weights, dict(inputs), tuple(int(d.dim_value) for d in dims))


def _normalise_convolutions(proto: onnx.ModelProto) -> set[str]:
    """Put a ``BatchNormalization`` after every ``Conv`` of ``proto`` (before its residual add and activation), as
    CNNs train them; returns the names of the running statistics (not trained). An inference graph folds the
    normalisation into the convolution (``analysis.unitgraph``), so a unit cannot say whether it had one; every
    convolution of the training suite's CNNs has one, and in training it is two passes forward and three backward
    over the convolution's output (a quarter of ResNet-8's step: docs/decisions.md, backward units)."""
    from onnx import helper

    shapes = {t.name: tuple(t.dims) for t in proto.graph.initializer}
    running: set[str] = set()
    nodes = []
    for index, node in enumerate(proto.graph.node):
        nodes.append(node)
        if node.op_type != "Conv":
            continue
        channels = shapes[node.input[1]][0]
        stats = [f"bn{index}_{part}" for part in ("scale", "bias", "mean", "var")]
        for name, value in zip(stats, (1.0, 0.0, 0.0, 1.0), strict=True):
            proto.graph.initializer.append(numpy_helper.from_array(np.full(channels, value, np.float32), name))
        running.update(stats[2:])
        raw = f"{node.output[0]}__conv"
        nodes.append(helper.make_node("BatchNormalization", [raw, *stats], [node.output[0]]))
        node.output[0] = raw
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return running


def split_profile(
    nodes: Mapping[str, float],
    forward: tuple[str, ...],
    weights: tuple[str, ...],
    casts: tuple[str, ...] = (),
) -> tuple[float, float]:
    """(forward, backward) seconds of one profiled run from its per-node ``nodes`` seconds: the unit's own nodes
    and the ``casts`` mixed precision put around them, then the nodes the autodiff rules emitted for those (named
    ``<node>__...``) with its weights' gradient outputs. The loss's nodes and their gradients are neither."""
    own = set(forward) | set(casts)
    grad_outputs = {f"{w}__grad_out" for w in weights}
    fwd = sum(s for label, s in nodes.items() if label in own)
    bwd = sum(s for label, s in nodes.items() if label in grad_outputs or _gradient_of(label, own))
    return fwd, bwd


def _gradient_of(label: str, own: set[str]) -> bool:
    """Whether node ``label`` is a gradient kernel the autodiff emitted for one of the ``own`` nodes (its label is
    that node's, then ``__`` and the rule's part)."""
    return label not in own and any(label.startswith(f"{node}__") for node in own)


@dataclass(frozen=True)
class PartTimes:
    """Median wall and CPU milliseconds of a unit's forward and backward nodes per run, and the runs taken."""

    forward_ms: float
    backward_ms: float
    forward_cpu_ms: float
    backward_cpu_ms: float
    runs: int
    duration_s: float


def measure_unit(unit: Unit, threads: int = TRAINING_UNIT_THREADS, precision: str = "fp32") -> PartTimes:
    """Train-step ``unit`` alone on the runtime at ``threads`` and ``precision`` (``fp16``/``bf16``: mixed
    precision, ``runtime.passes.amp``) and time its forward and backward nodes."""
    from benchmarks.kernels import blas_threads
    from runtime.executor import compile_model
    from runtime.training.graph import build_training_graph

    model = training_unit_model(unit)
    graph = build_training_graph(model.proto, loss="mse", precision=precision)
    missing = [w for w in (*model.weights, *model.inputs) if w not in graph.program.gradients]
    if missing:
        raise ValueError(f"{unit.signature()}: no gradient for {', '.join(missing)}")
    proto = graph.to_onnx()
    casts = mixed_precision_casts(graph, proto)
    with blas_threads(threads):
        exe = compile_model(proto, threads, passes=())
        feeds = _feeds(graph, model.output_shape)
        exe.run(feeds)  # warm-up
        walls: list[tuple[float, float]] = []
        cpus: list[tuple[float, float]] = []
        started = time.perf_counter()
        while len(walls) < MAX_RUNS and (len(walls) < MIN_RUNS or time.perf_counter() - started < MIN_SECONDS):
            cpu0, wall0 = time.process_time(), time.perf_counter()
            with exe.profiling() as profile:
                exe.run(feeds)
            cpu_share = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)
            parts = split_profile(
                {n.label: n.seconds for n in profile.nodes.values()}, model.forward_nodes, model.weights, casts
            )
            walls.append(parts)
            cpus.append((parts[0] * cpu_share, parts[1] * cpu_share))
    wall, cpu = np.median(np.array(walls), axis=0) * 1e3, np.median(np.array(cpus), axis=0) * 1e3
    return PartTimes(
        float(wall[0]), float(wall[1]), float(cpu[0]), float(cpu[1]), len(walls), time.perf_counter() - started
    )


def mixed_precision_casts(graph: Any, proto: onnx.ModelProto | None = None) -> tuple[str, ...]:
    """The names of the ``Cast`` nodes mixed precision put into ``graph``'s forward pass (``runtime.passes.amp``
    names them ``<value>__cast``, then ``_1``...; the autodiff names their gradients ``<cast>__Cast``); none at
    fp32. They are the unit's: a model pays them around each of its low-precision nodes. ``proto``: the graph's
    ``to_onnx()`` when the caller has it."""
    if graph.amp is None:
        return ()
    nodes = (proto or graph.to_onnx()).graph.node
    return tuple(n.name for n in nodes if n.op_type == "Cast" and _AMP_CAST.search(n.name))


def _feeds(graph: Any, out_shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    """The training graph's feeds: its parameters, the loss seed and an mse target of the output's shape. Under
    mixed precision the seed is the trainer's first loss scale (``DynamicLossScaler``): seeded with 1, a unit's
    gradients are small enough to be fp16 subnormals, whose casts are many times slower than the scaled ones'
    (docs/decisions.md, 2026-11-26, mixed precision's casts)."""
    from runtime.training.loss_scale import DynamicLossScaler

    target = np.full(out_shape, 0.5, dtype=np.float32)
    seed = 1.0 if graph.amp is None else DynamicLossScaler().scale
    return {**graph.params, graph.loss.target: target, graph.program.seed: np.float32(seed)}


def optimizer_seconds(tensors: int, elements: int, repeats: int = 5) -> tuple[float, float]:
    """Median wall and CPU seconds of one SGD-with-momentum update of ``tensors`` fp32 tensors of ``elements``."""
    from runtime.training.config import TrainConfig
    from runtime.training.optimizers import make_optimizer

    rng = np.random.default_rng(0)
    params = {f"p{i}": rng.standard_normal(elements).astype(np.float32) for i in range(tensors)}
    grads = {k: rng.standard_normal(elements).astype(np.float32) for k in params}
    optimizer = make_optimizer(TrainConfig(optimizer="sgd", momentum=0.9), params)
    optimizer.apply(params, grads, 1e-3, 1.0)
    walls, cpus = [], []
    for _ in range(repeats):
        cpu0, wall0 = time.process_time(), time.perf_counter()
        optimizer.apply(params, grads, 1e-3, 1.0)
        walls.append(time.perf_counter() - wall0)
        cpus.append(time.process_time() - cpu0)
    return float(np.median(walls)), float(np.median(cpus))


def _log_int(rng: np.random.Generator, low: float, high: float) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(high))))


def _width(rng: np.random.Generator, low: int, high: int) -> int:
    """A channel count or layer width: a power of two half the time (as most networks are built), else a multiple
    of 8 (the stride alignment of the runtime's gradient copies matters: ``training_unit_features``)."""
    if rng.uniform() < 0.5:
        return int(2 ** rng.integers(round(math.log2(low)), round(math.log2(high)) + 1))
    return 8 * max(1, round(_log_int(rng, low, high) / 8))


def _conv_wide(rng: np.random.Generator) -> Unit:
    """A convolution of 64 to 2048 channels each way over 1 to 8 output pixels a side (1x1 or 3x3, batch 1-8)."""
    n, k = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 3], p=[0.6, 0.4]))
    stride = int(rng.choice([1, 2], p=[0.8, 0.2]))
    out = _log_int(rng, 1, 8)
    size = max(k, (out - 1) * stride + 1) if k == 1 else max(k, (out - 1) * stride + k - 2)
    oh = (size + (0 if k == 1 else 2) - k) // stride + 1
    cin, cout = _width(rng, 64, 2048), _width(rng, 64, 2048)
    dims = {"n": n, "cin": cin, "cout": cout, "h": size, "w": size, "kh": k, "kw": k, "stride": stride, "group": 1}
    return Unit("conv", {**dims, "oh": oh, "ow": oh, "act": int(rng.uniform() < 0.7), "residual": 0, "init_w": 1})


def _gemm_wide(rng: np.random.Generator) -> Unit:
    """A fully-connected layer of 128 to 4096 inputs and outputs over 1 to 64 rows."""
    m, k, n = _log_int(rng, 1, 64), _width(rng, 128, 4096), _width(rng, 128, 4096)
    return Unit("gemm", {"m": m, "k": k, "n": n, "act": int(rng.uniform() < 0.5), "init_w": 1})


WIDE_SAMPLERS = {"conv_wide": _conv_wide, "gemm_wide": _gemm_wide}


def backward_sweep_units(scale: float = 1.0, seed: int = SEED) -> list[Unit]:
    """The sweep's sampled units: ``BACKWARD_SWEEP`` per ``benchmarks.unit_sweep`` sampler (seeded ``seed``), then
    ``WIDE_SWEEP`` per ``WIDE_SAMPLERS`` sampler (seeded ``seed + 1``), each count times ``scale`` (at least one)."""
    sizes = {k: max(1, math.ceil(v * scale)) for k, v in BACKWARD_SWEEP.items()}
    rng = np.random.default_rng(seed + 1)
    wide = [WIDE_SAMPLERS[k](rng) for k, v in WIDE_SWEEP.items() for _ in range(max(1, math.ceil(v * scale)))]
    return draw_units(sizes, seed) + wide


def sweep_common(
    route: dict[str, Any], threads: int, notes: str, hardware: tuple[float, float, float] | None = None
) -> dict[str, Any]:
    """The fields every row of a training-unit sweep on ``route`` (its backend, framework, library, versions and
    precision) shares: provenance, the kernel scenario at ``threads``, the machine's ``hardware`` (GEMM GFLOP/s at
    ``threads``, copy and cache bandwidth GB/s; measured here when not given) and ``notes``."""
    from benchmarks.kernels import measure_bandwidth, measure_cache_bandwidth, measure_gemm_peak
    from benchmarks.results.provenance import collect

    prov = collect()
    peak, bandwidth, cache_bandwidth = hardware or (
        measure_gemm_peak(threads),
        measure_bandwidth() / 1e9,
        measure_cache_bandwidth() / 1e9,
    )
    return {
        "source": "measured",
        "target": prov.target,
        **prov.as_dict(),
        "compiler": "none",
        "layout": "NCHW",
        **route,
        "threads": threads,
        "mode": "training",
        "batch": 1,
        "scenario": "kernel",
        "metric": "ms",
        "unit": "ms",
        "peak_gflops": peak,
        "bandwidth_gbs": bandwidth,
        "cache_bandwidth_gbs": cache_bandwidth,
        "notes": notes,
    }


def sweep_rows(
    units: list[Unit],
    threads: int = TRAINING_UNIT_THREADS,
    optimizer: bool = True,
    log: Any = None,
    notes: str = DEFAULT_NOTES,
    hardware: tuple[float, float, float] | None = None,
    precision: str = "fp32",
) -> Iterator[dict[str, Any]]:
    """Measure ``units`` (then the optimiser shapes) at ``precision`` and yield their result rows: two per unit
    (forward, backward), one per optimiser shape, each with ``notes``. Mixed-precision rows are the
    ``appopt-runtime-amp`` route's, as its training steps are. A unit whose training graph cannot be built or run is
    reported to ``log`` and skipped. ``hardware``: the (GEMM GFLOP/s at ``threads``, copy and cache bandwidth GB/s)
    to record, measured here when not given."""
    from benchmarks.results.provenance import ProbeWindow, load_average

    route = {
        "backend": "appopt-runtime" if precision == "fp32" else "appopt-runtime-amp",
        "framework": "appopt-runtime",
        "library": "numpy",
        "backend_version": np.__version__,
        "library_versions": {"numpy": np.__version__, "onnx": onnx.__version__},
        "precision": precision,
    }
    common = sweep_common(route, threads, notes, hardware)
    for unit in units:
        window = ProbeWindow()
        try:
            times = measure_unit(unit, threads, precision)
        except Exception as error:  # a unit the autodiff cannot take is reported, the sweep goes on
            if log is not None:
                log(f"{unit.signature()}: skipped ({type(error).__name__}: {error})")
            continue
        if not window.ready():
            time.sleep(max(0.0, 0.25 - window.elapsed()))
        other_cpu = window.read()
        for family, ms, cpu_ms in (
            (TRAIN_FORWARD_FAMILY, times.forward_ms, times.forward_cpu_ms),
            (BACKWARD_FAMILY, times.backward_ms, times.backward_cpu_ms),
        ):
            yield {
                **common,
                "model": f"train_{unit.signature()}",
                "family": family,
                "units": encode_units([unit]),
                "flops_per_sample": unit_flops(unit),
                "settings": json.dumps({"min_runs": MIN_RUNS, "min_seconds": MIN_SECONDS, "seed": SEED}),
                "value": ms,
                "median_ms": ms,
                "cpu_ms": cpu_ms,
                "queries": times.runs,
                "duration_s": times.duration_s,
                "load_avg": load_average(),
                "other_cpu": other_cpu,
            }
        if log is not None:
            log(
                f"{unit.signature()}: forward {times.forward_ms:.3f} ms, backward {times.backward_ms:.3f} ms"
                f" (other_cpu {other_cpu})"
            )
    if optimizer:
        yield from optimizer_rows(common, optimizer_seconds)


def optimizer_rows(
    common: dict[str, Any], seconds: Callable[[int, int], tuple[float, float | None]]
) -> Iterator[dict[str, Any]]:
    """One row per ``OPTIMIZER_SHAPES`` entry: ``seconds(tensors, elements)`` of one SGD-with-momentum update (wall,
    and CPU where the trainer measures it), with ``common``'s fields."""
    from benchmarks.results.provenance import ProbeWindow, load_average

    for tensors, elements in OPTIMIZER_SHAPES:
        window = ProbeWindow()
        wall, cpu = seconds(tensors, elements)
        if not window.ready():
            time.sleep(max(0.0, 0.25 - window.elapsed()))
        yield {
            **common,
            "model": f"sgd_momentum_{tensors}x{elements}",
            "family": OPTIMIZER_FAMILY,
            "params": float(tensors * elements),
            "settings": json.dumps({"tensors": tensors, "elements": elements, "optimizer": "sgd", "momentum": 0.9}),
            "value": wall * 1e3,
            "median_ms": wall * 1e3,
            **({"cpu_ms": cpu * 1e3} if cpu is not None else {}),
            "queries": 5,
            "load_avg": load_average(),
            "other_cpu": window.read(),
        }


def main(argv: list[str] | None = None) -> int:
    from perfmodels.results_db import make_row, write_rows

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="result rows to write (CSV; a new file)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of BACKWARD_SWEEP's units per sampler")
    parser.add_argument("--only-wide", action="store_true", help="measure only the WIDE_SWEEP units")
    parser.add_argument("--notes", default=DEFAULT_NOTES, help="every row's notes (e.g. that the machine was shared)")
    parser.add_argument(
        "--precision",
        choices=("fp32", *MIXED_PRECISIONS),
        default="fp32",
        help="fp16/bf16: mixed precision, as appopt-runtime-amp trains (the optimiser is fp32's: not swept again)",
    )
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 4:
        parser.error(f"--scale: {args.scale} is not in (0, 4]")
    units = backward_sweep_units(args.scale)
    if args.only_wide:
        units = units[-sum(max(1, math.ceil(v * args.scale)) for v in WIDE_SWEEP.values()) :]
    optimizer = not args.only_wide and args.precision == "fp32"
    swept = sweep_rows(units, optimizer=optimizer, log=print, notes=args.notes, precision=args.precision)
    rows = [make_row(**row) for row in swept]
    write_rows(args.out, rows)
    print(f"{len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
