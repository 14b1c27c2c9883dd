"""``appopt bench train``: the training suite on the trainer plugins (``benchmarks.training_bench``), printed, and
with ``--record --db PATH`` appended to a result database as ``mode=training`` rows; ``--side-by-side`` prints
appopt-runtime's fp32 step time against PyTorch eager's as a ratio, measured in alternating blocks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from optimiser.errors import AppoptError


def train_bench_cmd(
    task: Annotated[list[str] | None, typer.Option("--task", help="Suite task (repeatable; default: all).")] = None,
    trainer: Annotated[
        list[str] | None,
        typer.Option("--trainer", help="Trainer plugin (repeatable; default: appopt-runtime and torch)."),
    ] = None,
    batch: Annotated[
        list[int] | None, typer.Option("--batch", min=1, help="Samples per step (repeatable; default: the task's).")
    ] = None,
    threads: Annotated[
        list[int] | None, typer.Option("--threads", min=1, help="Threads, pinned on every side (repeatable).")
    ] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Runs per configuration; figures are medians.")] = 3,
    epochs: Annotated[int | None, typer.Option(min=1, help="Most epochs (default: the task's).")] = None,
    max_steps: Annotated[int | None, typer.Option(min=1, help="Cap on steps per epoch (quick checks).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the first run (run i uses seed + i).")] = 0,
    record: Annotated[bool, typer.Option("--record", help="Append the rows to --db.")] = False,
    db: Annotated[Path | None, typer.Option("--db", help="Result database the rows go to (with --record).")] = None,
    side_by_side: Annotated[
        bool,
        typer.Option("--side-by-side", help="Only appopt-runtime vs torch step time, alternating blocks, as ratios."),
    ] = False,
    blocks: Annotated[int, typer.Option(min=1, help="Blocks per side for --side-by-side.")] = 5,
    cpu_time: Annotated[
        bool,
        typer.Option("--cpu-time", help="--side-by-side timed by the process's CPU time (for a loaded machine)."),
    ] = False,
) -> None:
    """Training benchmark: ms/step, samples/s, s/epoch, time and epochs to target, accuracy, memory, optimiser state."""
    from benchmarks.trainers import TRAINER_NAMES, SharedModel, get_trainer
    from benchmarks.training_suite import TASK_NAMES, SuiteUnavailable, get_task, require_torch
    from perfmodels.results_db import append_rows

    for option, given, known in (("--task", task or [], TASK_NAMES), ("--trainer", trainer or [], TRAINER_NAMES)):
        unknown = [g for g in given if g not in known]
        if unknown:
            raise AppoptError(f"{option}: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    if record and db is None:
        raise AppoptError("--record: needs --db PATH (the file the rows are appended to)")
    if db is not None and not record and not side_by_side:
        raise AppoptError(f"--db {db}: rows are appended only with --record; add it (nothing was measured)")
    try:
        require_torch()
    except SuiteUnavailable as error:
        raise AppoptError(str(error)) from None
    tasks = [get_task(t) for t in (task or TASK_NAMES)]
    thread_list = threads or [1]
    from benchmarks.results.provenance import collect, load_average

    prov = collect()
    typer.echo(f"# CPU {prov.cpu_model}, {prov.cores} core(s), load average {load_average()}")
    if side_by_side:
        from benchmarks.training_bench import side_by_side as compare

        for t in tasks:
            for n in thread_list:
                typer.echo(compare(t, n, (batch or [32])[0], blocks, seed=seed, cpu_time=cpu_time).describe())
        return
    from benchmarks.features import model_features
    from benchmarks.training_bench import close_workers, measure, summarise, summary_rows

    plugins = [get_trainer(name) for name in (trainer or ["appopt-runtime", "torch"])]
    written = 0
    for plugin in plugins:
        reason = plugin.unavailable()
        if reason:
            typer.echo(f"{plugin.name}: skipped: {reason}")
    try:
        for t in tasks:
            shared = SharedModel(t.build(seed), t.data(seed).x_train[:2])
            for plugin in plugins:
                if plugin.unavailable():
                    continue
                for b in batch or t.batch_sizes:
                    for n in thread_list:
                        runs = [
                            measure(t, plugin, b, n, seed + i, epochs=epochs, max_steps=max_steps)
                            for i in range(repeats)
                        ]
                        summary = summarise(runs, t.target_accuracy)
                        typer.echo(summary.describe())
                        if record and db is not None:
                            per_epoch = len(t.data(seed).y_train) // b
                            settings = {
                                "epochs": epochs or t.epochs,
                                "max_steps": max_steps,
                                "lr": t.lr,
                                "steps_per_epoch": min(per_epoch, max_steps) if max_steps else per_epoch,
                            }
                            written += append_rows(db, summary_rows(summary, plugin, shared, model_features, settings))
    finally:
        close_workers()  # TensorFlow's worker processes, one per thread count
    if record:
        typer.echo(f"{written} row(s) appended to {db}")
