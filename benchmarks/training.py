"""The NumPy yardstick: a hand-written MLP trainer (time per step, per epoch and to accuracy).

The training suite and its trainers (appopt-runtime fp32/AMP, PyTorch eager, torch.compile) live in
``benchmarks.training_suite``, ``benchmarks.trainers`` and ``benchmarks.training_bench`` (``appopt bench train``).
This module keeps the dependency-free reference trainer:

* ``numpy`` — the suite's MLP (784-1024-1024-10, ReLU, softmax cross-entropy, SGD with momentum) with hand-written
  backpropagation over NumPy's BLAS: always available, the yardstick;
* ``torch`` — the same MLP in PyTorch (skipped when torch is not installed).

onnxruntime does not train (onnxruntime-training is discontinued); appopt's runtime does, through ``runtime.training``,
benchmarked by ``benchmarks.training_bench``; both are reported as skipped here.
The data is a seeded synthetic 10-class problem (Gaussian clusters in 784 dimensions), so time-to-accuracy is
reproducible without a download.

Example::

    >>> result = run_training("numpy", batch=64, threads=1)   # doctest: +SKIP
    >>> result.ms_per_step, result.seconds_to_accuracy       # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SIZES = (784, 1024, 1024, 10)
TRAINERS = ("numpy", "torch", "appopt-runtime", "onnxruntime")


@dataclass(frozen=True)
class TrainingResult:
    trainer: str
    status: str
    batch: int = 0
    threads: int = 0
    ms_per_step: float = math.nan
    seconds_per_epoch: float = math.nan
    #: Wall seconds of training until test accuracy reached ``target_accuracy`` (nan if it never did).
    seconds_to_accuracy: float = math.nan
    epochs_to_accuracy: int = 0
    final_accuracy: float = math.nan
    target_accuracy: float = 0.0
    reason: str = ""

    def describe(self) -> str:
        if self.status != "ok":
            return f"{self.trainer}: {self.status}: {self.reason}"
        return (
            f"{self.trainer} b{self.batch} {self.threads}t: {self.ms_per_step:.2f} ms/step, "
            f"{self.seconds_per_epoch:.2f} s/epoch, accuracy {self.final_accuracy:.1%} "
            f"(target {self.target_accuracy:.0%} after {self.epochs_to_accuracy} epoch(s), "
            f"{self.seconds_to_accuracy:.2f} s)"
        )


def synthetic_digits(samples: int = 4096, seed: int = 0, separation: float = 0.35) -> tuple[np.ndarray, np.ndarray]:
    """Seeded 10-class Gaussian clusters in 784 dimensions (inputs float32, labels int64)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((10, SIZES[0])).astype(np.float32) * separation
    labels = rng.integers(0, 10, size=samples)
    x = centres[labels] + rng.standard_normal((samples, SIZES[0])).astype(np.float32)
    return x.astype(np.float32), labels.astype(np.int64)


class _NumpyMlp:
    """Forward, backward and an SGD-momentum update of the MLP, in NumPy."""

    def __init__(self, seed: int, lr: float = 0.02, momentum: float = 0.9) -> None:
        rng = np.random.default_rng(seed)
        self.weights = [
            (rng.standard_normal((n_in, n_out)) * math.sqrt(2.0 / n_in)).astype(np.float32)
            for n_in, n_out in itertools.pairwise(SIZES)
        ]
        self.biases = [np.zeros(n, dtype=np.float32) for n in SIZES[1:]]
        self.velocity = [np.zeros_like(p) for p in (*self.weights, *self.biases)]
        self.lr, self.momentum = lr, momentum

    def logits(self, x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        activations = [x]
        h = x
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = h @ w + b
            if i < len(self.weights) - 1:
                h = np.maximum(h, 0.0)
            activations.append(h)
        return h, activations

    def step(self, x: np.ndarray, y: np.ndarray) -> float:
        logits, acts = self.logits(x)
        shifted = logits - logits.max(axis=1, keepdims=True)
        probs = np.exp(shifted)
        probs /= probs.sum(axis=1, keepdims=True)
        loss = float(-np.log(probs[np.arange(len(y)), y] + 1e-12).mean())
        grad = probs
        grad[np.arange(len(y)), y] -= 1.0
        grad /= len(y)
        grads_w, grads_b = [], []
        for i in reversed(range(len(self.weights))):
            grads_w.append(acts[i].T @ grad)
            grads_b.append(grad.sum(axis=0))
            if i > 0:
                grad = (grad @ self.weights[i].T) * (acts[i] > 0)
        params = [*self.weights, *self.biases]
        for k, g in enumerate([*reversed(grads_w), *reversed(grads_b)]):
            self.velocity[k] = self.momentum * self.velocity[k] - self.lr * g
            params[k] += self.velocity[k]
        return loss

    def accuracy(self, x: np.ndarray, y: np.ndarray) -> float:
        return float((self.logits(x)[0].argmax(axis=1) == y).mean())


def _torch_mlp(
    seed: int, threads: int
) -> tuple[Callable[[np.ndarray, np.ndarray], float], Callable[[np.ndarray, np.ndarray], float]]:
    import torch

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    layers: list[torch.nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(SIZES)):
        layers.append(torch.nn.Linear(n_in, n_out))
        if i < len(SIZES) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x: np.ndarray, y: np.ndarray) -> float:
        optimiser.zero_grad()
        loss = loss_fn(model(torch.from_numpy(x)), torch.from_numpy(y))
        loss.backward()
        optimiser.step()
        return float(loss.item())

    def accuracy(x: np.ndarray, y: np.ndarray) -> float:
        with torch.no_grad():
            return float((model(torch.from_numpy(x)).argmax(dim=1).numpy() == y).mean())

    return step, accuracy


def run_training(
    trainer: str,
    batch: int = 64,
    threads: int = 1,
    epochs: int = 3,
    target_accuracy: float = 0.9,
    samples: int = 4096,
    seed: int = 0,
) -> TrainingResult:
    """Train the MLP for up to ``epochs`` epochs; time steps, epochs and the time to ``target_accuracy``."""
    if trainer not in TRAINERS:
        raise ValueError(f"unknown trainer {trainer!r}; known: {', '.join(TRAINERS)}")
    if trainer in ("appopt-runtime", "onnxruntime"):
        reason = (
            "onnxruntime runs inference only"
            if trainer == "onnxruntime"
            else "appopt-runtime trains through benchmarks.training_bench (appopt bench train), not this MLP harness"
        )
        return TrainingResult(trainer, "skipped", reason=reason)
    if trainer == "torch" and importlib.util.find_spec("torch") is None:
        return TrainingResult(trainer, "skipped", reason="torch is not installed")
    from benchmarks.kernels import blas_threads

    x, y = synthetic_digits(samples, seed)
    split = samples * 3 // 4
    train_x, train_y, test_x, test_y = x[:split], y[:split], x[split:], y[split:]
    step: Callable[[np.ndarray, np.ndarray], float]
    accuracy: Callable[[np.ndarray, np.ndarray], float]
    if trainer == "numpy":
        mlp = _NumpyMlp(seed)
        step, accuracy = mlp.step, mlp.accuracy
    else:
        step, accuracy = _torch_mlp(seed, threads)
    rng = np.random.default_rng(seed)
    step_times: list[float] = []
    epoch_times: list[float] = []
    trained = 0.0
    reached_at, reached_epoch, final = math.nan, 0, math.nan
    with blas_threads(threads):
        for epoch in range(1, epochs + 1):
            order = rng.permutation(split)
            started = time.perf_counter()
            for start in range(0, split - batch + 1, batch):
                idx = order[start : start + batch]
                t0 = time.perf_counter()
                step(train_x[idx], train_y[idx])
                step_times.append(time.perf_counter() - t0)
            epoch_times.append(time.perf_counter() - started)
            trained += epoch_times[-1]
            final = accuracy(test_x, test_y)
            if final >= target_accuracy and math.isnan(reached_at):
                reached_at, reached_epoch = trained, epoch
    return TrainingResult(
        trainer,
        "ok",
        batch,
        threads,
        float(np.median(step_times)) * 1e3,
        float(np.median(epoch_times)),
        reached_at,
        reached_epoch,
        final,
        target_accuracy,
    )
