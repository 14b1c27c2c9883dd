"""What a pool's backward adds to its forward in a PyTorch training step, against the fits' factor of about 3.

    python -m benchmarks.pool_backward [--threads 1 2] [--rounds 5]

The training step fits scale a unit-priced forward by about 3 (backward ≈ 2x forward). A pool has no weights, and a
max pool's backward only scatters each window's gradient to the input its forward picked, so its step costs less:
this prints, per pool shape and thread count, the forward (with grad, as a step runs it) and the forward plus
backward, and their ratio, which ``perfmodels.training_units.MAX_POOL_FORWARD_SHARE`` carries as a share of 3.
NCHW, as ``benchmarks.training`` trains. Needs the torch extra.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from perfmodels.targets import cpu_model_and_flags

#: (shape NCHW, kernel, stride, padding, "max" or "avg"): the suite's kinds of pool, small to large.
POOLS: tuple[tuple[tuple[int, int, int, int], int, int, int, str], ...] = (
    ((128, 32, 8, 8), 2, 2, 0, "max"),  # the digits CNN's
    ((128, 16, 28, 28), 2, 2, 0, "max"),
    ((16, 64, 56, 56), 3, 2, 1, "max"),  # a ResNet stem's
    ((32, 128, 28, 28), 2, 2, 0, "avg"),  # a DenseNet transition's
    ((64, 256, 7, 7), 7, 7, 0, "avg"),  # a global average pool
)


def _best_ms(run: Callable[[], object], rounds: int, repeats: int = 20) -> float:
    """The fastest of ``rounds`` means over ``repeats`` calls, in ms (after three warm-up calls)."""
    for _ in range(3):
        run()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeats):
            run()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best * 1e3


def measure(
    shape: tuple[int, int, int, int], kernel: int, stride: int, padding: int, kind: str, rounds: int
) -> tuple[float, float]:
    """(forward ms, forward + backward ms) of one pool on a random NCHW batch."""
    import torch
    import torch.nn.functional as F

    x = torch.randn(*shape).requires_grad_()

    def pool(a: torch.Tensor) -> torch.Tensor:
        if kind == "max":
            return F.max_pool2d(a, kernel, stride, padding)
        return F.avg_pool2d(a, kernel, stride, padding)

    grad = torch.ones_like(pool(x))

    def step() -> None:
        x.grad = None
        pool(x).backward(grad)

    return _best_ms(lambda: pool(x), rounds), _best_ms(step, rounds)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pool_backward", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    if min(args.threads) < 1 or args.rounds < 1:
        parser.error("--threads and --rounds must be at least 1")
    try:
        import torch
    except ImportError:
        parser.exit(1, "python -m benchmarks.pool_backward: needs the torch extra (pip install torch)\n")
    print(f"cpu: {cpu_model_and_flags()[0]}; torch {torch.__version__}")
    print(f"{'pool':34s} {'thr':>3s} {'fwd ms':>8s} {'step ms':>8s} {'step/fwd':>8s}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for shape, kernel, stride, padding, kind in POOLS:
            forward, step = measure(shape, kernel, stride, padding, kind, args.rounds)
            name = f"{kind} {kernel}x{kernel}/{stride} {tuple(shape)}"
            print(f"{name:34s} {threads:3d} {forward:8.3f} {step:8.3f} {step / forward:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
