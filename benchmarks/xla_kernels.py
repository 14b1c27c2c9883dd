"""TensorFlow's layers trained one at a time, eager against XLA (``jit_compile=True``): what XLA's kernels cost.

    python -m benchmarks.xla_kernels [--threads 1] [--rounds 5] [--case NAME ...]

``keras-xla`` borrows PyTorch's inference units for the shape of its forward (``perfmodels.training_units``): this
prints, per layer, the forward and the training step (forward, the gradients of the input and the weights, an SGD
momentum update, as ``benchmarks.trainers.keras`` trains) under TensorFlow eager (oneDNN kernels, as PyTorch's) and
under XLA, and XLA's step over eager's. Where that ratio moves with the kind of kernel, not with XLA's fusion, the
step fit cannot price XLA by one coefficient: its dense convolutions run on Eigen's spatial convolution (1.2-1.5x
eager's; a 3x3 convolution over a 2x2 map many times that), which is why they are ``Lender.apart``
(docs/decisions.md, 2026-11-29, XLA's dense convolutions apart). The two are timed in alternating rounds, each layer's
best round kept. TensorFlow fixes its threads once per process: one ``--threads`` per run. Needs the tensorflow extra.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perfmodels.targets import cpu_model_and_flags

MOMENTUM = 0.9


@dataclass(frozen=True)
class Case:
    """One layer (``kind`` with ``options``, Keras's names) on a batch of ``shape`` (NHWC)."""

    name: str
    kind: str
    shape: tuple[int, ...]
    options: tuple[tuple[str, Any], ...] = ()


CASES: tuple[Case, ...] = (
    Case("conv 3x3 64->64, 8x32x32", "Conv2D", (8, 32, 32, 64), (("filters", 64), ("kernel_size", 3))),
    Case("conv 3x3 64->64, 4x56x56", "Conv2D", (4, 56, 56, 64), (("filters", 64), ("kernel_size", 3))),
    Case(
        "conv 1x1/2 256->512, 8x32x32",
        "Conv2D",
        (8, 32, 32, 256),
        (("filters", 512), ("kernel_size", 1), ("strides", 2)),
    ),
    Case("conv 3x3 512->512, 8x4x4", "Conv2D", (8, 4, 4, 512), (("filters", 512), ("kernel_size", 3))),
    Case("conv 3x3 512->512, 8x2x2", "Conv2D", (8, 2, 2, 512), (("filters", 512), ("kernel_size", 3))),
    Case("dense 2048->512, 32", "Dense", (32, 2048), (("units", 512),)),
    Case("batch norm, 4x56x56x256", "BatchNormalization", (4, 56, 56, 256)),
    Case("max pool 3x3/2, 4x112x112x64", "MaxPooling2D", (4, 112, 112, 64), (("pool_size", 3), ("strides", 2))),
    Case("max pool 2x2/2, 8x32x32x64", "MaxPooling2D", (8, 32, 32, 64), (("pool_size", 2), ("strides", 2))),
)
CASE_NAMES = tuple(c.name for c in CASES)


def _layer(tf: Any, case: Case) -> Any:
    options = dict(case.options)
    if case.kind in ("Conv2D", "MaxPooling2D"):
        options["padding"] = "same"
    if case.kind in ("Conv2D", "Dense"):
        options["use_bias"] = False
    return getattr(tf.keras.layers, case.kind)(**options)


def step_functions(tf: Any, case: Case, jit: bool) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(forward, step) of ``case``'s layer on a fixed random batch, traced with ``jit_compile=jit``."""
    layer = _layer(tf, case)
    x = tf.random.normal(case.shape, seed=0)
    layer(x, training=True)  # builds the weights
    weights = list(layer.trainable_variables)
    velocity = [tf.Variable(tf.zeros_like(w), trainable=False) for w in weights]

    @tf.function(jit_compile=jit)
    def forward(x: Any) -> Any:
        return tf.reduce_sum(layer(x, training=True))

    @tf.function(jit_compile=jit)
    def step(x: Any) -> Any:
        with tf.GradientTape() as tape:
            tape.watch(x)  # a layer inside a network passes its input's gradient on
            y = layer(x, training=True)
            loss = tf.reduce_mean(y * y)
        grads = tape.gradient(loss, [x, *weights])
        for w, v, g in zip(weights, velocity, grads[1:], strict=True):
            v.assign(MOMENTUM * v + g)
            w.assign_sub(0.01 * v)
        return loss + tf.reduce_sum(grads[0])

    return (lambda: forward(x).numpy()), (lambda: step(x).numpy())


def _mean_s(run: Callable[[], Any], repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        run()
    return (time.perf_counter() - start) / repeats


def measure(tf: Any, case: Case, rounds: int, repeats: int = 5) -> dict[str, float]:
    """Best-round ms of ``case``'s eager and XLA forward and step (``eager_fwd``, ``eager_step``, ``xla_fwd``,
    ``xla_step``), eager and XLA in alternating rounds (the first of each round alternates)."""
    runs = {jit: step_functions(tf, case, jit) for jit in (False, True)}
    for forward, step in runs.values():  # traces and compiles
        forward()
        step()
    best = {k: float("inf") for k in ("eager_fwd", "eager_step", "xla_fwd", "xla_step")}
    for r in range(rounds):
        for jit in (False, True) if r % 2 == 0 else (True, False):
            prefix = "xla" if jit else "eager"
            forward, step = runs[jit]
            best[f"{prefix}_fwd"] = min(best[f"{prefix}_fwd"], _mean_s(forward, repeats) * 1e3)
            best[f"{prefix}_step"] = min(best[f"{prefix}_step"], _mean_s(step, repeats) * 1e3)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.xla_kernels", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--case", action="append", choices=CASE_NAMES, help="a layer (default: every one)")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.rounds < 1:
        parser.error("--threads and --rounds must be at least 1")
    try:
        from benchmarks.trainers.keras import ThreadsFixed, _tensorflow, pin_threads

        tf = _tensorflow()
    except ImportError:
        parser.exit(1, "python -m benchmarks.xla_kernels: needs the tensorflow extra (pip install '.[tensorflow]')\n")
    try:
        pin_threads(args.threads)
    except ThreadsFixed as error:
        parser.exit(1, f"python -m benchmarks.xla_kernels: {error}\n")
    print(f"cpu: {cpu_model_and_flags()[0]}; tensorflow {tf.__version__}; {args.threads} thread(s)")
    header = ("layer", "eager fwd", "eager step", "xla fwd", "xla step", "xla/eager step")
    print(f"{header[0]:30s} " + " ".join(f"{h:>{w}s}" for h, w in zip(header[1:], (9, 10, 9, 9, 14), strict=True)))
    for case in (c for c in CASES if not args.case or c.name in args.case):
        t = measure(tf, case, args.rounds)
        print(
            f"{case.name:30s} {t['eager_fwd']:9.3f} {t['eager_step']:10.3f} {t['xla_fwd']:9.3f} {t['xla_step']:9.3f}"
            f" {t['xla_step'] / t['eager_step']:14.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
