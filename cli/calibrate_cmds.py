"""``appopt calibrate``: measure this host so that plans predict with its own figures."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.errors import user_errors
from cli.progress import progress
from optimiser.errors import AppoptError

if TYPE_CHECKING:
    from benchmarks.calibrate import ProbeCount  # (imported where used: plans without a probe never load it)


def calibrate_cmd(
    budget: Annotated[float, typer.Option("--budget", help="Seconds to spend measuring (default 300).")] = 300.0,
    backends: Annotated[
        list[str] | None,
        typer.Option(
            "--backends",
            help="Backends to calibrate (repeatable; default those installed of onnxruntime, onnxruntime-extended, "
            "appopt-runtime, openvino and torch).",
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
    from benchmarks.calibrate import (
        MIN_BUDGET_S,
        anchor_models,
        anchors_left,
        calibrate,
        default_backends,
        measure_probes,
        units_left,
    )
    from perfmodels.hoststore import HostStoreError, check_writable, host_store_path, read_store
    from perfmodels.targets import local_target_key, usable_cores

    chosen = tuple(backends or default_backends())
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
        whole = existing[existing["scenario"] == "SingleStream"]
        already |= {(str(b), str(m)) for b, m in zip(whole["backend"], whole["model"], strict=True)}
    threads = usable_cores()
    typer.echo(f"calibrating {local_target_key()} ({threads} threads) into {store}; {len(already)} unit row(s) there")
    if units_left(chosen, already) + anchors_left(chosen, already, budget) == 0:
        typer.echo(f"nothing left to measure: the store holds every covering unit of {', '.join(chosen)}")
        return
    started = time.monotonic()  # a first run's kernel build and the probes count against the budget
    build_runtime_kernels(chosen)
    with progress("probing the hardware"):
        probes = measure_probes(threads)
    typer.echo(probes.line())
    measured = skipped = models = 0
    anchored: set[tuple[str, str]] = set()  # (backend, model): each anchor is measured twice where time allows
    remaining = budget - (time.monotonic() - started)
    with progress(f"measuring kernel units on {', '.join(chosen)} (budget {budget:g} s)") as step:
        for outcome in calibrate(
            store, remaining, chosen, threads, already, step, anchors=anchor_models(chosen, budget)
        ):
            measured += outcome.status == "ok"
            skipped += outcome.status != "ok"
            if outcome.status == "ok" and outcome.row is not None and outcome.row.get("scenario") != "kernel":
                models += 1
                anchored.add((str(outcome.row.get("backend")), str(outcome.row.get("model"))))
    if measured == 0:
        raise AppoptError(
            f"--budget: nothing was measured in {budget:g} s ({skipped} unit(s) skipped or failed); "
            "give it more time or other --backends"
        )
    whole = f" and {len(anchored)} whole model(s) in {models} run(s)" if models else ""
    typer.echo(f"measured {measured - models} unit(s){whole} ({skipped} skipped or failed); rows appended to {store}")


#: Set to anything but empty or ``0`` to keep ``appopt plan`` from probing an uncalibrated host (as ``--no-probe``).
NO_PROBE_ENV = "APPOPT_NO_PROBE"
_CALIBRATE_HINT = "`appopt calibrate` (5 minutes) measures it, so plans use its figures"


def probe_disabled(no_probe: bool) -> bool:
    """Whether the quick probe is off, by the flag or ``$APPOPT_NO_PROBE``."""
    return no_probe or os.environ.get(NO_PROBE_ENV, "") not in ("", "0")


def probe_before_plan(no_probe: bool) -> tuple[list[str], bool]:
    """Before a plan on this host's CPU (``local``): the quick probe, when there is no calibration store and none
    was kept from an earlier plan. Returns the notes to print (one suggests ``appopt calibrate``) and whether the
    plan may read this host's stores (False: the quick probe's is unreadable, so the shipped figures are used)."""
    from perfmodels.hoststore import HostStoreError, check_header, check_writable, host_store_path, quick_store_path

    if host_store_path().exists():
        return _skipped_rows(host_store_path()), True  # calibrated: the plan reads the store (damaged: an error there)
    quick = quick_store_path()
    if quick.exists():
        try:
            rows = check_header(quick)
        except HostStoreError as error:
            return [f"quick probe: {error}; plans use the shipped figures until it is deleted"], False
        known = f"this host is known from a quick probe only ({rows} rows in {quick}); {_CALIBRATE_HINT}"
        return [known, *_skipped_rows(quick)], True
    if probe_disabled(no_probe):
        return [f"this host is not calibrated: {_CALIBRATE_HINT}"], True
    try:
        check_writable(quick)
    except HostStoreError as error:
        return [f"quick probe skipped ({error}); this host is not calibrated: {_CALIBRATE_HINT}"], True
    try:
        count = _run_quick_probe(quick)
        measured, skipped = count.measured, count.skipped
        rows = check_header(quick) if measured else 0  # every row the probe appended (the last unit's included)
    except (OSError, HostStoreError) as error:  # the disk filled up, the directory went away
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        return [f"quick probe failed ({quick}: {reason}); {_CALIBRATE_HINT}"], True
    from benchmarks.calibrate import QUICK_PROBE_BUDGET_S

    cut = count.cut_note(QUICK_PROBE_BUDGET_S)
    if measured == 0:
        return [f"quick probe measured nothing ({skipped} unit(s) skipped or failed){cut}; {_CALIBRATE_HINT}"], True
    return [f"this host was measured by a quick probe ({rows} rows, kept in {quick}){cut}; {_CALIBRATE_HINT}"], True


def _skipped_rows(store: Path) -> list[str]:
    """A note naming the rows of ``store`` the plan reads without (a torn write, a unit kind from a newer appopt);
    none when every row reads (or the file cannot be read at all: the plan says so itself)."""
    from perfmodels.results_db import ResultsSchemaError, dropped_rows

    try:
        dropped = dropped_rows(store)
    except (ResultsSchemaError, OSError, UnicodeError):
        return []
    if not dropped:
        return []
    return [f"{len(dropped)} row(s) of the host store skipped, the plan uses the rest: {dropped[0]}"]


def _run_quick_probe(quick: Path) -> ProbeCount:
    """Probe into a file beside ``quick`` and move it into place when anything was measured (a killed or empty
    probe leaves no store behind, so the next plan probes again)."""
    from benchmarks.calibrate import QUICK_PROBE_BUDGET_S, installed_backends, quick_probe
    from perfmodels.targets import usable_cores

    build_runtime_kernels(installed_backends())
    partial = quick.with_name(f"{quick.name}.{os.getpid()}.partial")
    try:
        with progress(f"quick probe of this host (about {QUICK_PROBE_BUDGET_S:.0f} s, once)") as step:
            count = quick_probe(partial, usable_cores(), step=step)
        if count.measured:
            os.replace(partial, quick)
    finally:
        partial.unlink(missing_ok=True)
    return count


def build_runtime_kernels(backends: tuple[str, ...]) -> None:
    """Compile appopt-runtime's kernels for this CPU before a measuring clock starts, when ``backends`` will run
    them and no cached build fits: a one-time cost (about 20 s of one core) that would otherwise eat a probe's
    budget and leave the runtime unmeasured. A failed build is left for the runtime to report (it runs on NumPy)."""
    if "appopt-runtime" not in backends:
        return
    from runtime import native

    if native.needs_build():
        with progress("building appopt-runtime's kernels for this CPU (once)"):
            native.lib()


#: Where this module's commands sit in ``appopt --help`` (``cli.main.command_modules``).
ORDER = 60


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` to the root command."""
    app.command("calibrate")(user_errors(calibrate_cmd))
