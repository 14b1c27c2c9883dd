"""Time per epoch of the same small CNN on scikit-learn's digits: appopt's runtime vs PyTorch (a benchmark, not a test).

Both sides train ``runtime.training.models.digits_cnn`` (conv3x3(16)-BN-ReLU, conv3x3(32)-ReLU, maxpool, FC 64,
FC 10) from the same initial weights, on the same 80/20 split, in the same batch order, with SGD (momentum 0.9).
Times count training steps only (no evaluation), BLAS/intra-op threads are pinned to ``--threads`` on both sides,
and each figure is the median over every epoch after the first of every repeat. Our fp16/bf16 rows use the AMP
pass (bf16 on an opset-22 copy of the model so Conv may run in bf16); on a CPU they are expected to be slower,
since NumPy has no half-precision GEMM and every cast is an extra pass over memory.

    python -m benchmarks.train_vs_torch [--epochs 10] [--repeats 3] [--threads 1] [--batch-size 32]
                                        [--precisions fp32,fp16,bf16] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from onnx import numpy_helper

from benchmarks.training_suite import digits_cnn as torch_digits_cnn
from runtime.training import TrainConfig, Trainer
from runtime.training.data import Dataset, split
from runtime.training.models import digits_cnn


@dataclass
class Row:
    system: str
    precision: str
    median_epoch_s: float
    epochs_timed: int
    test_accuracy: float


def load_digits_split(seed: int = 0) -> Dataset:
    from sklearn.datasets import load_digits

    raw = load_digits()
    return split((raw.data / 16.0).astype(np.float32), raw.target.astype(np.int64), 0.2, seed)


def run_ours(
    data: Dataset, precision: str, epochs: int, batch_size: int, lr: float, threads: int
) -> tuple[list[float], float]:
    opset = 22 if precision == "bf16" else 17
    config = TrainConfig(epochs=epochs, batch_size=batch_size, lr=lr, precision=precision, threads=threads)
    trainer = Trainer(digits_cnn(0, opset=opset), config)
    trainer.fit(data.x_train, data.y_train)
    assert data.x_test is not None and data.y_test is not None
    return [h.seconds for h in trainer.history], trainer.evaluate(data.x_test, data.y_test)["accuracy"]


def run_torch(data: Dataset, epochs: int, batch_size: int, lr: float, threads: int) -> tuple[list[float], float]:
    """The same network in PyTorch eager mode, initial weights copied from the ONNX model."""
    import torch
    from torch import nn

    torch.set_num_threads(threads)
    init = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in digits_cnn(0).graph.initializer}
    net = torch_digits_cnn()  # the same layers (BatchNorm eps 1e-5, momentum 0.1); weights replaced below
    layers: Any = net  # indexing an nn.Sequential is typed too loosely for mypy
    with torch.no_grad():
        for module, prefix in ((layers[0], "conv1"), (layers[3], "conv2"), (layers[7], "fc1"), (layers[9], "fc2")):
            module.weight.copy_(init[f"{prefix}.W"])
            module.bias.copy_(init[f"{prefix}.B"])
        layers[1].weight.copy_(init["bn1.scale"])
        layers[1].bias.copy_(init["bn1.bias"])
    optimiser = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    x = torch.from_numpy(data.x_train.reshape(-1, 1, 8, 8))
    y = torch.from_numpy(data.y_train)
    times = []
    for epoch in range(epochs):
        order = torch.from_numpy(np.random.default_rng([0, epoch]).permutation(len(y)))
        net.train()
        started = time.perf_counter()
        for start in range(0, len(y), batch_size):
            idx = order[start : start + batch_size]
            loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
        times.append(time.perf_counter() - started)
    net.eval()
    assert data.x_test is not None and data.y_test is not None
    with torch.no_grad():
        pred = net(torch.from_numpy(data.x_test.reshape(-1, 1, 8, 8))).argmax(1).numpy()
    return times, float((pred == data.y_test).mean())


def benchmark(
    precisions: Sequence[str], epochs: int, repeats: int, batch_size: int, lr: float, threads: int, torch_too: bool
) -> list[Row]:
    data = load_digits_split()
    timed: dict[tuple[str, str], list[float]] = {}
    accuracy: dict[tuple[str, str], list[float]] = {}
    for _ in range(repeats):  # interleaved, so load changes on a shared machine hit every system alike
        for precision in precisions:
            times, acc = run_ours(data, precision, epochs, batch_size, lr, threads)
            timed.setdefault(("appopt-runtime", precision), []).extend(times[1:])
            accuracy.setdefault(("appopt-runtime", precision), []).append(acc)
        if torch_too:
            times, acc = run_torch(data, epochs, batch_size, lr, threads)
            timed.setdefault(("pytorch", "fp32"), []).extend(times[1:])
            accuracy.setdefault(("pytorch", "fp32"), []).append(acc)
    return [
        Row(
            system,
            precision,
            round(statistics.median(times), 4),
            len(times),
            round(statistics.median(accuracy[(system, precision)]), 4),
        )
        for (system, precision), times in timed.items()
    ]


def format_rows(rows: Sequence[Row]) -> list[str]:
    base = next((r.median_epoch_s for r in rows if r.system == "pytorch"), None)
    lines = [f"{'system':16s} {'precision':9s} {'s/epoch':>8s} {'vs torch':>9s} {'test acc':>9s}"]
    for r in rows:
        ratio = f"{r.median_epoch_s / base:8.2f}x" if base else "        -"
        lines.append(f"{r.system:16s} {r.precision:9s} {r.median_epoch_s:8.4f} {ratio} {100 * r.test_accuracy:8.2f}%")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.train_vs_torch", description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--precisions", default="fp32,fp16,bf16")
    parser.add_argument("--no-torch", action="store_true", help="Skip PyTorch (e.g. where it is not installed).")
    parser.add_argument("--json", help="Also write the rows to this JSON file.")
    args = parser.parse_args(argv)
    torch_too = not args.no_torch
    if torch_too:
        try:
            import torch  # noqa: F401
        except ImportError:
            print("PyTorch is not installed: pip install torch (or pass --no-torch)", file=sys.stderr)
            return 2
    precisions = [p for p in args.precisions.split(",") if p]
    rows = benchmark(precisions, args.epochs, args.repeats, args.batch_size, args.lr, args.threads, torch_too)
    for line in format_rows(rows):
        print(line)
    if args.json:
        meta: dict[str, Any] = {k: getattr(args, k) for k in ("epochs", "repeats", "threads", "batch_size", "lr")}
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"settings": meta, "rows": [asdict(r) for r in rows]}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
