"""``appopt calibrate``: measure this host so that plans predict with its own figures."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from optimiser.commands.errors import user_errors
from optimiser.commands.progress import progress
from optimiser.errors import AppoptError


def calibrate_cmd(
    budget: Annotated[float, typer.Option("--budget", help="Seconds to spend measuring (default 300).")] = 300.0,
    backends: Annotated[
        list[str] | None,
        typer.Option(
            "--backends",
            help="Backends to calibrate (repeatable; default onnxruntime, onnxruntime-extended, appopt-runtime).",
        ),
    ] = None,
    db: Annotated[
        Path | None, typer.Option("--db", help="Store to append to (default: the per-user host store).")
    ] = None,
) -> None:
    """Measure this host: GEMM peak per thread count, memory bandwidth, each engine's per-call overhead, then a
    covering set of kernel units per backend; rows go to the host store, which `appopt plan` reads. A second run
    resumes and adds."""
    from benchmarks.backends import all_backends
    from benchmarks.calibrate import CALIBRATE_BACKENDS, MIN_BUDGET_S, calibrate, measure_probes, units_left
    from perfmodels.hoststore import HostStoreError, check_writable, host_store_path, read_store
    from perfmodels.targets import local_target_key, usable_cores

    chosen = tuple(backends or CALIBRATE_BACKENDS)
    unknown = [b for b in chosen if b not in all_backends()]
    if unknown:
        raise AppoptError(f"--backends: unknown backend {unknown[0]!r} (known: {', '.join(all_backends())})")
    if budget < MIN_BUDGET_S:
        raise AppoptError(f"--budget: {budget:g} s is too short to measure anything (at least {MIN_BUDGET_S:g} s)")
    store = db or host_store_path()
    try:
        check_writable(store)
        existing = read_store(store)
    except HostStoreError as error:
        raise AppoptError(f"{'--db' if db else 'host store'}: {error}") from None
    already: set[tuple[str, str]] = set()
    if existing is not None:
        kernel_rows = existing[existing["scenario"] == "kernel"]
        already = {(str(b), str(u)) for b, u in zip(kernel_rows["backend"], kernel_rows["units"], strict=True)}
    threads = usable_cores()
    typer.echo(f"calibrating {local_target_key()} ({threads} threads) into {store}; {len(already)} unit row(s) there")
    if units_left(chosen, already) == 0:
        typer.echo(f"nothing left to measure: the store holds every covering unit of {', '.join(chosen)}")
        return
    started = time.monotonic()
    with progress("probing the hardware"):
        probes = measure_probes(threads)
    typer.echo(probes.line())
    measured = skipped = 0
    remaining = budget - (time.monotonic() - started)  # the probes count against the budget
    with progress(f"measuring kernel units on {', '.join(chosen)} (budget {budget:g} s)") as step:
        for outcome in calibrate(store, remaining, chosen, threads, already, step):
            measured += outcome.status == "ok"
            skipped += outcome.status != "ok"
    if measured == 0:
        raise AppoptError(
            f"--budget: nothing was measured in {budget:g} s ({skipped} unit(s) skipped or failed); "
            "give it more time or other --backends"
        )
    typer.echo(f"measured {measured} unit(s) ({skipped} skipped or failed); rows appended to {store}")


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` to the root command."""
    app.command("calibrate")(user_errors(calibrate_cmd))
