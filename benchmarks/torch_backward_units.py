"""PyTorch eager's training kernels swept as units: each sampled unit's forward (with autograd) and backward time.

The same units as ``benchmarks.backward_units`` sweeps for appopt-runtime (``backward_sweep_units``), built as the same
one-unit ONNX models with every input trainable, but without the batch normalisation that sweep puts after each
convolution (so a unit's step is set against its forward as an inference unit times it), run node by node as PyTorch
eager calls (``benchmarks.torch_eager.TorchGraph``'s op mapping) with autograd on. Each run times the forward call and
then ``backward`` of the output against a tensor of ones. Rows are the ``pytorch`` framework's
``TRAIN_FORWARD_FAMILY`` and ``BACKWARD_FAMILY`` rows, and the optimiser's (``torch.optim.SGD`` with momentum 0.9, as
``benchmarks.trainers.torch_eager`` trains) over ``OPTIMIZER_SHAPES``.

What it was for, and why its rows do not ship: weighing each unit of PyTorch's unit-priced training forward by its
own step over forward, instead of alike. Weighted so, PyTorch's steps held out by family went from 20.3% to 23.3%;
priced by these units as appopt-runtime's steps are, 37.3% (docs/decisions.md, 2026-11-27, PyTorch's training
units). Kept to reproduce that, and for a host where the question comes back.

One thread (``TRAINING_UNIT_THREADS``). Command (about two minutes; needs the torch extra)::

    python -m benchmarks.torch_backward_units --out rows_torch_backward.csv [--scale 0.5]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from analysis.units import Unit, encode_units, unit_flops
from benchmarks.backward_units import (
    MAX_RUNS,
    MIN_RUNS,
    MIN_SECONDS,
    SEED,
    TrainingUnitModel,
    backward_sweep_units,
    optimizer_rows,
    sweep_common,
    training_unit_model,
)
from perfmodels.training_units import BACKWARD_FAMILY, TRAIN_FORWARD_FAMILY, TRAINING_UNIT_THREADS

DEFAULT_NOTES = "benchmarks.torch_backward_units"
#: PyTorch's SGD momentum, as ``benchmarks.trainers.torch_eager`` trains.
MOMENTUM = 0.9


@dataclass(frozen=True)
class StepTimes:
    """Median milliseconds of a unit's forward and backward calls per run, and the runs taken."""

    forward_ms: float
    backward_ms: float
    runs: int
    duration_s: float


class _TrainedGraph:
    """A one-unit model's nodes as PyTorch eager calls, its weights and inputs trainable tensors."""

    def __init__(self, model: TrainingUnitModel) -> None:
        import torch

        from benchmarks.torch_eager import TorchGraph

        self.torch = torch
        graph = TorchGraph.__new__(TorchGraph)
        graph.torch, graph.static_shapes = torch, True
        proto = model.proto
        graph.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 17)
        graph.constants = {}
        trainable = set(model.weights) | set(model.inputs)
        self.tensors: dict[str, Any] = {}
        for init in proto.graph.initializer:
            value = torch.from_numpy(np.array(onnx.numpy_helper.to_array(init)))
            if init.name in trainable and value.is_floating_point():
                value = value.requires_grad_()
            self.tensors[init.name] = value
        graph.constants = dict(self.tensors)
        self.steps: list[tuple[Callable[..., Any], list[str], list[str]]] = []
        for node in proto.graph.node:
            self.steps.append((graph._compile(node), list(node.input), list(node.output)))
        self.output = proto.graph.output[0].name
        self.leaves = [t for t in self.tensors.values() if t.requires_grad]

    def forward(self) -> Any:
        env = dict(self.tensors)
        for fn, inputs, outputs in self.steps:
            result = fn(*(env[i] if i else None for i in inputs))
            if isinstance(result, tuple):
                env.update(zip(outputs, result, strict=False))
            else:
                env[outputs[0]] = result
        return env[self.output]

    def clear(self) -> None:
        for leaf in self.leaves:
            leaf.grad = None


def measure_unit(unit: Unit, threads: int = TRAINING_UNIT_THREADS) -> StepTimes:
    """Train-step ``unit`` alone as PyTorch eager calls at ``threads``: the forward call and the backward call,
    timed apart, run after run (at least ``MIN_RUNS`` and ``MIN_SECONDS``, at most ``MAX_RUNS``)."""
    import torch

    torch.set_num_threads(threads)
    graph = _TrainedGraph(training_unit_model(unit, normalise=False))
    if not graph.leaves:
        raise ValueError(f"{unit.signature()}: nothing to train")
    seed = torch.ones_like(graph.forward())
    for _ in range(2):  # warm-up: the allocator's and oneDNN's first calls
        graph.clear()
        graph.forward().backward(seed)
    times: list[tuple[float, float]] = []
    started = time.perf_counter()
    while len(times) < MAX_RUNS and (len(times) < MIN_RUNS or time.perf_counter() - started < MIN_SECONDS):
        graph.clear()
        t0 = time.perf_counter()
        out = graph.forward()
        t1 = time.perf_counter()
        out.backward(seed)
        t2 = time.perf_counter()
        times.append((t1 - t0, t2 - t1))
    forward, backward = np.median(np.array(times), axis=0) * 1e3
    return StepTimes(float(forward), float(backward), len(times), time.perf_counter() - started)


def optimizer_seconds(tensors: int, elements: int, repeats: int = 5) -> float:
    """Median seconds of one ``torch.optim.SGD`` (momentum) step over ``tensors`` fp32 tensors of ``elements``."""
    import torch

    params = [torch.randn(elements, requires_grad=True) for _ in range(tensors)]
    for p in params:
        p.grad = torch.randn(elements)
    optimizer = torch.optim.SGD(params, lr=1e-3, momentum=MOMENTUM)
    optimizer.step()  # creates the momentum buffers
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        optimizer.step()
        walls.append(time.perf_counter() - start)
    return float(np.median(walls))


def sweep_rows(
    units: list[Unit],
    threads: int = TRAINING_UNIT_THREADS,
    optimizer: bool = True,
    log: Callable[[str], object] | None = None,
    notes: str = DEFAULT_NOTES,
    hardware: tuple[float, float, float] | None = None,
) -> Iterator[dict[str, Any]]:
    """Measure ``units`` (then the optimiser shapes) and yield their result rows: two per unit (forward, backward),
    one per optimiser shape. A unit PyTorch cannot run here is reported to ``log`` and skipped. ``hardware``: the
    (GEMM GFLOP/s at ``threads``, copy and cache bandwidth GB/s) to record, measured here when not given."""
    import torch

    from benchmarks.results.provenance import ProbeWindow, load_average

    route = {
        "backend": "torch",
        "framework": "pytorch",
        "library": "aten",
        "backend_version": torch.__version__,
        "library_versions": {"torch": torch.__version__, "onnx": onnx.__version__},
        "precision": "fp32",
    }
    common = sweep_common(route, threads, notes, hardware)
    for unit in units:
        window = ProbeWindow()
        try:
            times = measure_unit(unit, threads)
        except Exception as error:  # a unit PyTorch cannot run is reported, the sweep goes on
            if log is not None:
                log(f"{unit.signature()}: skipped ({type(error).__name__}: {error})")
            continue
        if not window.ready():
            time.sleep(max(0.0, 0.25 - window.elapsed()))
        other_cpu = window.read()
        for family, ms in ((TRAIN_FORWARD_FAMILY, times.forward_ms), (BACKWARD_FAMILY, times.backward_ms)):
            yield {
                **common,
                "model": f"train_{unit.signature()}",
                "family": family,
                "units": encode_units([unit]),
                "flops_per_sample": unit_flops(unit),
                "settings": json.dumps({"min_runs": MIN_RUNS, "min_seconds": MIN_SECONDS, "seed": SEED}),
                "value": ms,
                "median_ms": ms,
                "queries": times.runs,
                "duration_s": times.duration_s,
                "load_avg": load_average(),
                "other_cpu": other_cpu,
            }
        if log is not None:
            log(f"{unit.signature()}: forward {times.forward_ms:.3f} ms, backward {times.backward_ms:.3f} ms")
    if optimizer:
        yield from optimizer_rows(common, lambda tensors, elements: (optimizer_seconds(tensors, elements), None))


def main(argv: list[str] | None = None) -> int:
    from perfmodels.results_db import make_row, write_rows

    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.torch_backward_units", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", required=True, help="result rows to write (CSV; a new file)")
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of the backward sweep's units per sampler")
    parser.add_argument("--notes", default=DEFAULT_NOTES, help="every row's notes (e.g. that the machine was shared)")
    args = parser.parse_args(argv)
    if not 0 < args.scale <= 4 or math.isnan(args.scale):
        parser.error(f"--scale: {args.scale} is not in (0, 4]")
    try:
        import torch  # noqa: F401
    except ImportError:
        parser.exit(1, "python -m benchmarks.torch_backward_units: needs the torch extra (pip install torch)\n")
    rows = [make_row(**row) for row in sweep_rows(backward_sweep_units(args.scale), log=print, notes=args.notes)]
    write_rows(args.out, rows)
    print(f"{len(rows)} rows -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
