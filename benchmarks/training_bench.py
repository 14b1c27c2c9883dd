"""Run the training suite on the trainer plugins: ms per step, seconds per epoch, time and epochs to the target
accuracy, final accuracy, peak memory and optimiser state, as ``mode=training`` rows of the result database.

Rules (MLPerf Training's, scaled down): every trainer starts from the task's seeded initial weights and sees the
same batches in the same order (``np.random.default_rng([seed, epoch]).permutation``, last partial batch dropped);
threads are pinned on every side (the trainer's own setting and threadpoolctl for BLAS); each figure is the median
over ``repeats`` runs, and the seed is recorded. Time to target counts the wall time of training steps from the
first step (compilation included) until the end of the epoch whose test accuracy reached the target; evaluation is
not counted. Other processes' CPU use is measured around each run (``other_cpu``): a row above ``BUSY_OTHER_CPU``
was measured under load and says so in ``notes``.

Example::

    >>> runs = measure(get_task("digits_mlp"), get_trainer("torch"), batch=32, threads=1)   # doctest: +SKIP
    >>> summarise(runs).ms_per_step                                                       # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from benchmarks.kernels import blas_threads
from benchmarks.results.provenance import ProbeWindow, collect, interference, load_average
from benchmarks.trainers import SharedModel, TrainerPlugin
from benchmarks.training_suite import TrainingTask
from perfmodels.results_db import BUSY_OTHER_CPU, make_row

#: Steps a step-time-only task runs (the first ``WARMUP_STEPS`` are not timed).
TIMED_STEPS = 8
WARMUP_STEPS = 2


@dataclass
class TrainingRun:
    """One run of one task on one trainer at one batch size and thread count."""

    task: str
    family: str
    trainer: str
    batch: int
    threads: int
    seed: int
    step_ms: list[float] = field(default_factory=list)
    epoch_s: list[float] = field(default_factory=list)
    first_step_s: float = math.nan
    seconds_to_target: float = math.nan
    epochs_to_target: int = 0
    final_accuracy: float = math.nan
    peak_rss_mib: float = math.nan
    optimizer_state_bytes: int = 0
    other_cpu: float | None = None


@dataclass(frozen=True)
class TrainingSummary:
    """Medians over repeated runs (MLPerf: report the median), with how many runs and the seeds."""

    task: str
    family: str
    trainer: str
    batch: int
    threads: int
    seeds: tuple[int, ...]
    ms_per_step: float
    seconds_per_epoch: float
    compile_s: float
    seconds_to_target: float
    epochs_to_target: float
    final_accuracy: float
    peak_rss_mib: float
    optimizer_state_bytes: int
    other_cpu: float | None
    target_accuracy: float | None
    steps: int

    @property
    def samples_per_s(self) -> float:
        return self.batch * 1e3 / self.ms_per_step if self.ms_per_step > 0 else math.nan

    @property
    def busy(self) -> bool:
        return self.other_cpu is not None and self.other_cpu > BUSY_OTHER_CPU

    def describe(self) -> str:
        text = (
            f"{self.task} {self.trainer} b{self.batch} {self.threads}t: {self.ms_per_step:.2f} ms/step, "
            f"{self.samples_per_s:.0f} samples/s"
        )
        if self.target_accuracy is not None:
            reached = (
                f"{self.seconds_to_target:.2f} s, {self.epochs_to_target:g} epoch(s)"
                if math.isfinite(self.seconds_to_target)
                else "not reached"
            )
            text += (
                f", {self.seconds_per_epoch:.2f} s/epoch, accuracy {self.final_accuracy:.1%} "
                f"(target {self.target_accuracy:.0%}: {reached})"
            )
        text += f", peak RSS {self.peak_rss_mib:.0f} MiB, optimiser state {self.optimizer_state_bytes / 2**20:.2f} MiB"
        if self.busy:
            text += f" [busy: other processes used {self.other_cpu:.2f} cores]"
        return text


def _reset_peak_rss() -> None:
    """Reset the process's peak RSS (Linux: writing 5 to clear_refs), so the next reading is this run's peak."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        pass


def peak_rss_mib() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def batches(n: int, batch: int, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """The batch order every trainer uses: a seeded permutation per epoch, the last partial batch dropped."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    for start in range(0, n - batch + 1, batch):
        yield order[start : start + batch]


def measure(
    task: TrainingTask,
    trainer: TrainerPlugin,
    batch: int,
    threads: int,
    seed: int = 0,
    *,
    epochs: int | None = None,
    max_steps: int | None = None,
    shared: SharedModel | None = None,
) -> TrainingRun:
    """One run. Tasks with a target train up to ``epochs`` epochs (default: the task's) and stop early once the
    target is reached; step-time-only tasks run ``TIMED_STEPS`` steps. ``max_steps`` caps the steps per epoch.
    A trainer whose threads are fixed once per process (``threads_fixed_per_process``: TensorFlow) runs in a
    worker process kept for that thread count, from the same ONNX export."""
    data = task.data(seed)
    shared = shared or SharedModel(task.build(seed), data.x_train[:2])
    shared.onnx_bytes()  # exported before timing
    if getattr(trainer, "threads_fixed_per_process", False) and not _IN_WORKER:
        job = (task.name, trainer.name, batch, threads, seed, epochs, max_steps, shared.onnx_bytes())
        try:
            return _worker(threads, (task.name, trainer.name)).submit(_measure_in_worker, *job).result()
        except BrokenProcessPool:
            _WORKERS.pop(threads, None)
            raise RuntimeError(f"{trainer.name}: its worker process for {threads} thread(s) died") from None
    run = TrainingRun(task.name, task.family, trainer.name, batch, threads, seed)
    _reset_peak_rss()
    # Other processes' CPU is read from the end of the first step: building the session and the first step's
    # compilation (torch.compile's worker processes, XLA's) are this run's own work, not another's load.
    window: ProbeWindow | None = None
    with blas_threads(threads):
        session = trainer.session(shared, task.lr, threads, batch, seed)
        trained = 0.0
        n_epochs = 1 if task.step_time_only else (epochs or task.epochs)
        for epoch in range(n_epochs):
            started = time.perf_counter()
            limit = (TIMED_STEPS if task.step_time_only else None) if max_steps is None else max_steps
            for i, idx in enumerate(batches(len(data.y_train), batch, seed, epoch)):
                if limit is not None and i >= limit:
                    break
                t0 = time.perf_counter()
                session.step(data.x_train[idx], data.y_train[idx])
                elapsed = time.perf_counter() - t0
                if math.isnan(run.first_step_s):
                    run.first_step_s = elapsed
                    window = ProbeWindow()
                elif not (epoch == 0 and i < WARMUP_STEPS):
                    run.step_ms.append(elapsed * 1e3)
            run.epoch_s.append(time.perf_counter() - started)
            trained += run.epoch_s[-1]
            if task.target_accuracy is None:
                continue
            run.final_accuracy = session.accuracy(data.x_test, data.y_test)
            if run.final_accuracy >= task.target_accuracy:
                run.seconds_to_target, run.epochs_to_target = trained, epoch + 1
                break
        run.optimizer_state_bytes = session.optimizer_state_bytes()
    run.peak_rss_mib = peak_rss_mib()
    run.other_cpu = None if window is None else window.read()
    return run


#: Worker processes by thread count, for trainers whose threads are fixed once per process, and the (task,
#: trainer) each serves: a new pair gets a fresh process, so one model's leftovers (TensorFlow keeps some memory
#: per session, about 25 MB for ResNet-8) do not count in the next one's peak RSS.
_WORKERS: dict[int, tuple[tuple[str, str], ProcessPoolExecutor]] = {}
_IN_WORKER = False


#: How often a worker process checks that the process that started it is alive (s).
ORPHAN_CHECK_S = 1.0


def _mark_worker() -> None:
    """A worker's initializer: mark the process, and end it once the process that started it is gone (a ``bench
    train`` killed mid-run would otherwise leave a TensorFlow runtime of about 1 GB running)."""
    global _IN_WORKER
    _IN_WORKER = True
    threading.Thread(target=_exit_when_orphaned, args=(os.getppid(),), daemon=True).start()


def _exit_when_orphaned(parent: int) -> None:
    """Exit the process as soon as its parent is no longer ``parent`` (it died; the process was re-parented)."""
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK_S)
    os._exit(1)


def _worker(threads: int, serves: tuple[str, str]) -> ProcessPoolExecutor:
    if threads in _WORKERS and _WORKERS[threads][0] != serves:
        _WORKERS.pop(threads)[1].shutdown()
    if threads not in _WORKERS:  # spawned, not forked: a fork would inherit the parent's thread pools
        context = multiprocessing.get_context("spawn")
        _WORKERS[threads] = (serves, ProcessPoolExecutor(1, mp_context=context, initializer=_mark_worker))
    return _WORKERS[threads][1]


def close_workers() -> None:
    """Stop the worker processes ``measure`` keeps per thread count (each holds a TensorFlow runtime, about 1 GB):
    drivers call it when their last run is done, so a long-lived caller (a test session) does not keep them."""
    while _WORKERS:
        _WORKERS.popitem()[1][1].shutdown()


def _measure_in_worker(
    task_name: str,
    trainer_name: str,
    batch: int,
    threads: int,
    seed: int,
    epochs: int | None,
    max_steps: int | None,
    onnx_bytes: bytes,
) -> TrainingRun:
    from benchmarks.trainers import get_trainer
    from benchmarks.training_suite import get_task

    task = get_task(task_name)
    shared = SharedModel(task.build(seed), task.data(seed).x_train[:2], onnx_bytes)
    trainer = get_trainer(trainer_name)
    return measure(task, trainer, batch, threads, seed, epochs=epochs, max_steps=max_steps, shared=shared)


def _median(values: Sequence[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def summarise(runs: Sequence[TrainingRun], target_accuracy: float | None = None) -> TrainingSummary:
    """Medians over ``runs`` (same task, trainer, batch and threads). Time and epochs to target are medians over the
    runs that reached it (nan if fewer than half did: MLPerf counts a run that never converges as failed)."""
    first = runs[0]
    reached = [r for r in runs if math.isfinite(r.seconds_to_target)]
    enough = len(reached) * 2 >= len(runs)
    others = [r.other_cpu for r in runs if r.other_cpu is not None]
    return TrainingSummary(
        task=first.task,
        family=first.family,
        trainer=first.trainer,
        batch=first.batch,
        threads=first.threads,
        seeds=tuple(r.seed for r in runs),
        ms_per_step=_median([_median(r.step_ms) for r in runs]),
        seconds_per_epoch=_median([_median(r.epoch_s) for r in runs]),
        compile_s=_median([r.first_step_s for r in runs]),
        seconds_to_target=_median([r.seconds_to_target for r in reached]) if enough else math.nan,
        epochs_to_target=_median([float(r.epochs_to_target) for r in reached]) if enough else math.nan,
        final_accuracy=_median([r.final_accuracy for r in runs]),
        peak_rss_mib=_median([r.peak_rss_mib for r in runs]),
        optimizer_state_bytes=max(r.optimizer_state_bytes for r in runs),
        other_cpu=max(others) if others else None,
        target_accuracy=target_accuracy,
        steps=sum(len(r.step_ms) for r in runs),
    )


Analyser = Callable[[onnx.ModelProto], Any]


def summary_rows(
    summary: TrainingSummary,
    trainer: TrainerPlugin,
    shared: SharedModel,
    analyser: Analyser | None = None,
    settings: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The result-database rows of one summary: one per metric, all ``mode=training``, ``scenario=training``."""
    prov = collect()
    versions = trainer.versions()
    base: dict[str, Any] = {
        "source": "measured",
        "target": prov.target,
        **prov.as_dict(),
        "backend": trainer.name,
        "framework": trainer.framework,
        "compiler": trainer.compiler,
        "layout": trainer.layout,
        "backend_version": next(iter(versions.values()), ""),
        "library_versions": versions,
        "threads": summary.threads,
        "precision": trainer.precision,
        "mode": "training",
        "model": summary.task,
        "family": summary.family,
        "batch": summary.batch,
        "scenario": "training",
        "load_avg": load_average(),
        "other_cpu": summary.other_cpu,
        "settings": json.dumps(
            {
                **(settings or {}),
                "seeds": list(summary.seeds),
                "repeats": len(summary.seeds),
                "target_accuracy": summary.target_accuracy,
                "optimizer": "sgd-momentum-0.9",
            },
            sort_keys=True,
        ),
        "notes": (
            "load not measured (runs shorter than 0.25 s)"
            if summary.other_cpu is None
            else f"busy: other processes used {summary.other_cpu:.2f} cores"
            if summary.busy
            else "quiet"
        ),
    }
    if analyser is not None:
        features = analyser(onnx.load_from_string(shared.onnx_bytes()))
        base.update(
            flops_per_sample=features.flops_per_sample,
            flops_by_class=features.flops_by_class,
            ops_by_class=features.ops_by_class,
            activation_bytes_per_sample=features.activation_bytes_per_sample,
            params=features.params,
        )
    from benchmarks.runner import cache_bandwidth_gbs, gemm_peak_gflops, memory_bandwidth_gbs

    base.update(
        peak_gflops=gemm_peak_gflops(summary.threads),
        bandwidth_gbs=memory_bandwidth_gbs(),
        cache_bandwidth_gbs=cache_bandwidth_gbs(),
    )
    metrics: list[tuple[str, float, str]] = [
        ("ms_per_step", summary.ms_per_step, "ms"),
        ("samples_per_s", summary.samples_per_s, "samples/s"),
        ("compile_s", summary.compile_s, "s"),
        ("peak_rss_mib", summary.peak_rss_mib, "MiB"),
        ("optimizer_state_bytes", float(summary.optimizer_state_bytes), "B"),
    ]
    if summary.target_accuracy is not None:
        metrics += [
            ("seconds_per_epoch", summary.seconds_per_epoch, "s"),
            ("final_accuracy", summary.final_accuracy, "fraction"),
            ("seconds_to_target", summary.seconds_to_target, "s"),
            ("epochs_to_target", summary.epochs_to_target, "epochs"),
        ]
    rows = []
    for metric, value, unit in metrics:
        if not math.isfinite(value):
            continue  # not reached / not measured: no row (the run's report says so)
        extra: dict[str, Any] = {}
        if metric == "ms_per_step":
            extra = {
                "median_ms": value,
                "samples_per_s": summary.samples_per_s,
                "queries": summary.steps,
            }
        rows.append(make_row(**base, **extra, metric=metric, value=float(value), unit=unit))
    return rows


@dataclass(frozen=True)
class SideBySide:
    """appopt-runtime vs PyTorch eager on one task and thread count, measured in alternating blocks."""

    task: str
    threads: int
    batch: int
    runtime_ms: float
    torch_ms: float
    blocks: int
    other_cpu: float | None
    #: "wall" (elapsed time) or "cpu" (the process's CPU time: on a shared machine far less disturbed by others).
    clock: str = "wall"

    @property
    def ratio(self) -> float:
        return self.runtime_ms / self.torch_ms

    def describe(self) -> str:
        load = "unknown" if self.other_cpu is None else f"{self.other_cpu:.2f} other cores busy"
        unit = "ms/step" if self.clock == "wall" else "CPU ms/step"
        return (
            f"{self.task:12s} {self.threads}t b{self.batch}: appopt-runtime {self.runtime_ms:8.3f} {unit}, "
            f"torch {self.torch_ms:8.3f} {unit}, ratio {self.ratio:5.2f}x ({self.blocks} blocks; {load})"
        )


def side_by_side(
    task: TrainingTask,
    threads: int,
    batch: int = 32,
    blocks: int = 5,
    steps_per_block: int = 20,
    seed: int = 0,
    cpu_time: bool = False,
) -> SideBySide:
    """Step time of appopt-runtime (fp32) and PyTorch eager, alternating blocks of ``steps_per_block`` steps (who
    goes first alternates too), so a load change on a shared machine hits both alike; each side's figure is the
    median of its block medians. Both train from the same weights on the same batches. ``cpu_time`` times steps by
    the process's CPU time (all its threads) instead of the wall clock: a loaded machine's time slicing then
    disturbs it far less, though its caches are still shared."""
    clock = time.process_time if cpu_time else time.perf_counter
    from benchmarks.trainers import get_trainer

    data = task.data(seed)
    shared = SharedModel(task.build(seed), data.x_train[:2])
    names = ("appopt-runtime", "torch")
    with blas_threads(threads), interference() as probe:
        sessions = {n: get_trainer(n).session(shared, task.lr, threads, batch, seed) for n in names}
        order = [idx for epoch in range(1000) for idx in batches(len(data.y_train), batch, seed, epoch)]
        position = dict.fromkeys(names, 0)
        medians: dict[str, list[float]] = {n: [] for n in names}
        for name in names:  # warm-up
            for _ in range(WARMUP_STEPS):
                idx = order[position[name]]
                sessions[name].step(data.x_train[idx], data.y_train[idx])
                position[name] += 1
        for block in range(blocks):
            for name in names if block % 2 == 0 else names[::-1]:
                times = []
                for _ in range(steps_per_block):
                    idx = order[position[name] % len(order)]
                    position[name] += 1
                    t0 = clock()
                    sessions[name].step(data.x_train[idx], data.y_train[idx])
                    times.append(clock() - t0)
                medians[name].append(statistics.median(times) * 1e3)
    return SideBySide(
        task.name,
        threads,
        batch,
        statistics.median(medians["appopt-runtime"]),
        statistics.median(medians["torch"]),
        blocks,
        probe.other_cpu,
        "cpu" if cpu_time else "wall",
    )
