"""``appopt bench ...``: run the benchmark suite, record the shipped database, merge shards, render campaigns.

Thin wrappers: the work is in ``benchmarks/``; this layer supplies what ``benchmarks`` may not import itself (the
optimiser's catalog) and turns user mistakes into one-line errors.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.errors import user_errors
from optimiser.errors import AppoptError

bench_app = typer.Typer(
    name="bench", help="Benchmark backends on the model suite and manage the result database.", no_args_is_help=True
)


@bench_app.callback()
def _bench() -> None:
    """Benchmark backends on the model suite and manage the result database."""


def catalog_literature_rows() -> list[dict[str, Any]]:
    """The catalog compilers' reported speedups as ``source: literature`` rows."""
    from benchmarks.literature import literature_rows
    from optimiser.catalog import load_catalog

    catalog = load_catalog()
    return literature_rows(c.model_dump(mode="json") for c in catalog.compilers.values())


def _settings(min_duration: float, min_queries: int, seed: int, qps: float | None, bound: float | None) -> Any:
    from benchmarks.harness import ScenarioSettings

    return ScenarioSettings(
        min_duration_s=min_duration,
        min_queries=min_queries,
        seed=seed,
        server_target_qps=qps,
        server_latency_bound_ms=bound,
    )


def _suite(name: str) -> list[Any]:
    from benchmarks.models import suite

    try:
        return suite(name)
    except KeyError as error:
        raise AppoptError(f"--suite: {error.args[0]}") from None


def _check_choices(option: str, values: list[str], known: tuple[str, ...] | list[str]) -> None:
    for value in values:
        if value not in known:
            raise AppoptError(f"{option}: unknown value {value!r}; known: {', '.join(known)}")


@bench_app.command("run")
@user_errors
def run_cmd(
    suite_name: Annotated[
        str, typer.Option("--suite", help="all | core | zoo | quick, or model names joined by ','.")
    ] = "quick",
    scenario: Annotated[
        list[str] | None,
        typer.Option("--scenario", help="SingleStream | MultiStream | Server | Offline | accuracy (repeatable)."),
    ] = None,
    backend: Annotated[
        list[str] | None,
        typer.Option(
            "--backend",
            help="appopt-runtime | onnxruntime | onnxruntime-extended | torch | onnx-reference (repeatable; "
            "default: appopt-runtime, onnxruntime, torch).",
        ),
    ] = None,
    threads: Annotated[list[int] | None, typer.Option("--threads", help="Thread counts (repeatable).", min=1)] = None,
    batch: Annotated[list[int] | None, typer.Option("--batch", help="Samples per query (repeatable).", min=1)] = None,
    precision: Annotated[list[str] | None, typer.Option("--precision", help="fp32 | int8 … (repeatable).")] = None,
    min_duration: Annotated[float, typer.Option(help="Minimum seconds per measurement.", min=0.0)] = 0.5,
    min_queries: Annotated[int, typer.Option(help="Minimum queries per measurement.", min=1)] = 10,
    seed: Annotated[int, typer.Option(help="Seed for inputs and Server arrivals.")] = 0,
    qps: Annotated[float | None, typer.Option(help="Server: test this QPS instead of searching.", min=0.0)] = None,
    latency_bound_ms: Annotated[
        float | None, typer.Option(help="Server: p99 bound (default 4x unloaded median).")
    ] = None,
    reference: Annotated[str, typer.Option(help="accuracy: the reference backend.")] = "onnxruntime",
    db: Annotated[Path | None, typer.Option("--db", help="Append result rows to this database file.")] = None,
    driver: Annotated[
        str, typer.Option(help="auto (LoadGen where installed) | loadgen | harness (the home-made fallback).")
    ] = "auto",
    logs: Annotated[
        Path | None, typer.Option("--logs", help="Directory for LoadGen's logs (default: DB.logs/ next to --db).")
    ] = None,
    tvm_trials: Annotated[
        int | None,
        typer.Option("--tvm-trials", min=1, help="tvm-tuned: MetaSchedule trials per model and batch (default: "
                     "APPOPT_TVM_TRIALS, else 64); recorded in each row."),
    ] = None,
) -> None:
    """Run suite models through backends and scenarios; show a progress bar, then a results table."""
    if tvm_trials is not None:  # the backend reads its budget from the variable (and so do the jobs it starts)
        from benchmarks.engines.tvm_tuning import TRIALS_ENV

        os.environ[TRIALS_ENV] = str(tvm_trials)
    from benchmarks.backends import DEFAULT_BACKENDS, PRECISIONS, all_backends
    from benchmarks.features import model_features
    from benchmarks.harness import SCENARIOS
    from benchmarks.loadgen_driver import DriverUnavailable, resolve_driver
    from benchmarks.report import outcomes_table
    from benchmarks.runner import BenchRequest, count_measurements, plan_jobs, planned_labels, run_benchmarks

    scenarios = scenario or ["SingleStream"]
    backends = backend or list(DEFAULT_BACKENDS)
    precisions = precision or ["fp32"]
    _check_choices("--scenario", scenarios, [*SCENARIOS, "accuracy"])
    _check_choices("--backend", [*backends, reference], list(all_backends()))
    _check_choices("--precision", precisions, PRECISIONS)
    _check_choices("--driver", [driver], ["auto", "loadgen", "harness"])
    try:
        resolved = resolve_driver(driver)  # type: ignore[arg-type]
    except DriverUnavailable as error:
        raise AppoptError(f"--driver: {error}") from None
    request = BenchRequest(
        models=_suite(suite_name),
        backends=tuple(backends),
        scenarios=tuple(scenarios),  # type: ignore[arg-type]
        threads=tuple(threads or [1]),
        batches=tuple(batch or [1]),
        precisions=tuple(precisions),
        settings=_settings(min_duration, min_queries, seed, qps, latency_bound_ms),
        reference=reference,
        driver=resolved,
        log_root=logs,
    )
    outcomes = []
    labels = planned_labels(request)
    with typer.progressbar(
        length=count_measurements(request),
        label=f"benchmarking ({resolved})",
        item_show_func=lambda item: item,
    ) as bar:
        bar.current_item = labels[0] if labels else None  # the bar names what it is measuring now
        bar.render_progress()
        for outcome in run_benchmarks(request, model_features, db, plan_jobs(request)):
            outcomes.append(outcome)
            bar.current_item = labels[len(outcomes)] if len(outcomes) < len(labels) else None
            bar.update(1)
    typer.echo(outcomes_table(outcomes))
    for outcome in outcomes:
        for warning in outcome.warnings:
            typer.echo(f"warning: {warning}", err=True)
    if db is not None:
        typer.echo(f"appended {sum(o.row is not None for o in outcomes)} row(s) to {db}")
    base = db.parent if db is not None else Path()
    log_dirs = {str((base / o.row["log_dir"]).parent) for o in outcomes if o.row and o.row.get("log_dir")}
    if log_dirs:
        typer.echo(f"LoadGen logs in {', '.join(sorted(log_dirs))} (appopt bench show RUN prints a run's summary)")


@bench_app.command("show")
@user_errors
def show_cmd(
    run: Annotated[str, typer.Argument(help="A run's log directory, or a row id (prefix) of --db.")],
    db: Annotated[Path | None, typer.Option("--db", help="Database whose row ids RUN may name.")] = None,
) -> None:
    """Print the LoadGen summary (mlperf_log_summary.txt) of one benchmark run."""
    from benchmarks.loadgen_driver import RunNotFound, show_summary
    from perfmodels.results_db import ResultsSchemaError

    try:
        typer.echo(show_summary(run, db))
    except (RunNotFound, ResultsSchemaError) as error:
        raise AppoptError(str(error)) from None


@bench_app.command("kernels")
@user_errors
def kernels_cmd(
    suite_name: Annotated[str, typer.Option("--suite", help="all | quick.")] = "quick",
    backend: Annotated[list[str] | None, typer.Option("--backend", help="Backends (repeatable).")] = None,
    threads: Annotated[list[int] | None, typer.Option("--threads", help="Thread counts (repeatable).", min=1)] = None,
    db: Annotated[Path | None, typer.Option("--db", help="Append result rows to this database file.")] = None,
) -> None:
    """DeepBench-like GEMM/conv/attention kernels: achieved GFLOP/s as a share of the best GEMM rate measured in the
    run (NumPy's 1024x1024 GEMM before and after, or any backend's GEMM kernel)."""
    from benchmarks.backends import all_backends
    from benchmarks.kernels import kernel_suite, measure_gemm_peak, reference_rates, run_kernel_suite
    from cli.progress import progress

    backends = backend or ["onnxruntime", "appopt-runtime"]
    _check_choices("--backend", backends, list(all_backends()))
    try:
        kernels = kernel_suite(suite_name)
    except KeyError as error:
        raise AppoptError(f"--suite: {error.args[0]}") from None
    outcomes = []
    total = len(kernels) * len(backends) * len(threads or [1])
    with progress(f"measuring {total} kernel runs") as step:
        for outcome in run_kernel_suite(kernels, backends, threads or [1], None, str(db) if db else None):
            outcomes.append(outcome)
            step(f"{len(outcomes)}/{total}: {outcome.kernel.name} on {outcome.backend}, {outcome.threads}t")
    reference = reference_rates(outcomes, measure_gemm_peak)
    for outcome in outcomes:  # shares against one reference per thread count, known once every GEMM has run
        typer.echo(outcome.describe(reference.get(outcome.threads)))


@bench_app.command("units")
@user_errors
def units_cmd(
    per_kind: Annotated[
        int | None, typer.Option("--per-kind", help="Units sampled per kind (default: the full sweep).", min=1)
    ] = None,
    kind: Annotated[list[str] | None, typer.Option("--kind", help="Unit kinds (repeatable; default: all).")] = None,
    backend: Annotated[list[str] | None, typer.Option("--backend", help="Backends (repeatable).")] = None,
    threads: Annotated[list[int] | None, typer.Option("--threads", help="Thread counts (repeatable).", min=1)] = None,
    int8: Annotated[bool, typer.Option(help="Also measure the quantisable units at int8 (onnxruntime).")] = True,
    seed: Annotated[int, typer.Option(help="Seed of the sampled shapes.")] = 0,
    db: Annotated[Path | None, typer.Option("--db", help="Append result rows to this database file.")] = None,
    new: Annotated[
        bool, typer.Option("--new", help="Only the units --db has no rows of (resume or extend a sweep).")
    ] = False,
) -> None:
    """Kernel-unit sweep: sampled convolutions, matrix products, pools, norms… measured alone on each backend,
    the data the kernel-level performance models learn from (`appopt models evaluate` scores them)."""
    from analysis.units import KINDS
    from benchmarks.backends import all_backends
    from benchmarks.unit_sweep import (
        SAMPLER_KINDS,
        SWEEP_BACKENDS,
        SWEEP_ROUNDS,
        run_unit_sweep,
        sample_units,
        unmeasured,
    )

    backends = tuple(backend or SWEEP_BACKENDS)
    _check_choices("--backend", list(backends), list(all_backends()))
    _check_choices("--kind", kind or [], list(KINDS))
    if per_kind is not None and kind:
        first = {SAMPLER_KINDS[name] for name in SWEEP_ROUNDS[0]}
        later = sorted(set(kind) - first)
        if later:  # (it measured nothing and said only "measured 0 unit(s)")
            raise AppoptError(
                f"--kind {', '.join(later)}: --per-kind samples the sweep's first round only "
                f"({', '.join(sorted(first))}); leave out --per-kind to measure every round's units of a kind"
            )
    units = sample_units(per_kind, seed, tuple(kind) if kind else None)
    if new:
        if db is None:
            raise AppoptError("--new: needs --db, the database whose units are skipped")
        from perfmodels.results_db import ResultsSchemaError, read_results

        try:
            measured = read_results(db)["units"] if db.exists() else []
        except ResultsSchemaError as error:
            raise AppoptError(f"--db: {error}") from None
        units = unmeasured(units, measured)
        typer.echo(f"{len(units)} unit(s) not yet in {db}")
    measured = 0
    for outcome in run_unit_sweep(units, str(db) if db else None, backends, tuple(threads or (1,)), int8):
        measured += outcome.status == "ok"
        typer.echo(outcome.describe())
    typer.echo(f"measured {measured} unit(s)" + (f"; rows appended to {db}" if db else ""))


def _register_train() -> None:
    from cli.train_bench_cmd import train_bench_cmd

    bench_app.command("train")(user_errors(train_bench_cmd))


_register_train()


@bench_app.command("merge")
@user_errors
def merge_cmd(
    shards: Annotated[
        list[Path], typer.Argument(help="Shard files, .csv or .csv.gz (or directories of such shards).")
    ],
    output: Annotated[
        Path,
        typer.Option("-o", "--output", help="Database to merge into, .csv or gzip .csv.gz (created if missing)."),
    ],
) -> None:
    """Merge result shards into one database (validated; duplicate rows dropped; atomic replace).

    The shipped database is gzip CSV: appopt bench merge NEW.csv -o benchmarks/results/default.csv.gz
    """
    from perfmodels.results_db import ResultsSchemaError, merge

    files: list[Path] = []
    for shard in shards:
        if shard.is_dir():
            files.extend(sorted([*shard.glob("*.csv"), *shard.glob("*.csv.gz")]))
        elif shard.is_file():
            files.append(shard)
        else:
            raise AppoptError(f"{shard}: no such shard file or directory")
    try:
        written, dropped = merge(files, output)
    except ResultsSchemaError as error:
        raise AppoptError(str(error)) from None
    for line in dropped:
        typer.echo(f"warning: dropped damaged row: {line}", err=True)
    typer.echo(f"merged {len(files)} shard(s): {written} rows in {output}")


@bench_app.command("schema")
def schema_cmd() -> None:
    """Print the result database's schema (Markdown)."""
    from perfmodels.results_db import schema_markdown

    typer.echo(schema_markdown())


@bench_app.command("campaign")
@user_errors
def campaign_cmd(
    spec: Annotated[Path, typer.Argument(help="Campaign spec (YAML).")],
    scheduler: Annotated[str, typer.Option(help="Only slurm is supported.")] = "slurm",
    out: Annotated[Path, typer.Option("-o", "--out", help="Directory for the job script.")] = Path("."),
    submit: Annotated[bool, typer.Option("--submit", help="Submit the array with sbatch.")] = False,
) -> None:
    """Render (and with --submit, submit) a Slurm job array: one campaign slice and one result shard per task."""
    from benchmarks import campaign

    if scheduler != campaign.SCHEDULER:
        raise AppoptError(f"--scheduler: {scheduler!r} is not supported (supported: {campaign.SCHEDULER})")
    campaign_spec = campaign.load_campaign(spec)
    script = campaign.write_campaign(campaign_spec, spec, out)
    typer.echo(f"wrote {script} ({campaign_spec.task_count()} array tasks, {len(campaign_spec.jobs())} jobs)")
    typer.echo(f"shards: {campaign.shard_dir(campaign_spec, spec.resolve())}")
    if submit:
        typer.echo(f"submitted job {campaign.submit_campaign(script)}")


@bench_app.command("run-slice")
@user_errors
def run_slice_cmd(
    spec: Annotated[Path, typer.Argument(help="Campaign spec (YAML).")],
    slice_index: Annotated[int, typer.Option("--slice", help="Array task index.", min=0)],
    shard: Annotated[Path, typer.Option("--shard", help="Result shard this task appends to.")],
) -> None:
    """Run one slice of a campaign (what each Slurm array task executes)."""
    from benchmarks import campaign
    from benchmarks.features import model_features
    from benchmarks.runner import run_benchmarks

    campaign_spec = campaign.load_campaign(spec)
    jobs = campaign.slice_jobs(campaign_spec, slice_index)
    from benchmarks.loadgen_driver import DriverUnavailable, resolve_driver

    try:
        resolve_driver(campaign_spec.driver)
    except DriverUnavailable as error:
        raise AppoptError(f"driver: {error}") from None
    shard.parent.mkdir(parents=True, exist_ok=True)
    for outcome in run_benchmarks(campaign_spec.request(), model_features, shard, jobs):
        typer.echo(outcome.describe())
        for warning in outcome.warnings:
            typer.echo(f"warning: {warning}", err=True)


@bench_app.command("record-default")
@user_errors
def record_default_cmd(
    out: Annotated[
        Path | None,
        typer.Option("-o", "--out", help="Database to write (default: recorded.csv in appopt's cache directory)."),
    ] = None,
    replace_shipped: Annotated[
        bool,
        typer.Option("--replace-shipped", help="Overwrite the shipped database instead (for maintainers)."),
    ] = False,
    min_duration: Annotated[float, typer.Option(help="Minimum seconds per measurement.", min=0.0)] = 0.5,
    min_queries: Annotated[int, typer.Option(help="Minimum queries per measurement.", min=1)] = 5,
    max_duration: Annotated[
        float, typer.Option(help="Stop a slow measurement after this many seconds (at least 3 queries).", min=0.0)
    ] = 2.5,
    threads: Annotated[list[int] | None, typer.Option("--threads", help="Thread counts (repeatable).")] = None,
    kernels: Annotated[bool, typer.Option(help="Also run the kernel suite.")] = True,
    units: Annotated[bool, typer.Option(help="Also run the kernel-unit sweep (about an hour).")] = True,
    quiet_wait: Annotated[
        float, typer.Option(help="Seconds to wait for other processes to go quiet before starting.", min=0.0)
    ] = 60.0,
) -> None:
    """Record a whole result database on this machine, as the shipped one was (about 75 minutes; run it quiet).

    It goes to --out (default: recorded.csv in appopt's cache directory); plans use it with APPOPT_RESULTS_DB=FILE.
    The shipped database is overwritten only with --replace-shipped."""
    from dataclasses import replace

    from benchmarks.features import model_features
    from benchmarks.record import RECORD_SETTINGS, record_default

    target = record_destination(out, replace_shipped)

    settings = replace(
        RECORD_SETTINGS, min_duration_s=min_duration, min_queries=min_queries, max_duration_s=max_duration or None
    )
    record_default(
        model_features,
        catalog_literature_rows(),
        target,
        settings,
        tuple(threads or (1, 2)),
        kernels,
        progress=typer.echo,
        quiet_wait_s=quiet_wait,
        units=units,
    )
    typer.echo(f"recorded {target}; plan with it: APPOPT_RESULTS_DB={target} appopt plan SPEC")


def record_destination(out: Path | None, replace_shipped: bool) -> Path:
    """Where ``record-default`` writes: --out, the shipped database only when asked, else the cache directory."""
    from optimiser.catalog.local import cache_base
    from perfmodels.results_db import DEFAULT_DB

    if out is not None and replace_shipped:
        raise AppoptError("--replace-shipped: writes the shipped database; leave out --out")
    if replace_shipped:
        return Path(DEFAULT_DB)
    if out is None:
        out = cache_base() / "recorded.csv"
        out.parent.mkdir(parents=True, exist_ok=True)
    return out


@bench_app.command("refresh-features")
@user_errors
def refresh_features_cmd(
    db: Annotated[Path | None, typer.Option("--db", help="Database to update (default: the shipped one).")] = None,
) -> None:
    """Recompute the model features of suite-model rows with the current model analyser (measurements stay)."""
    from benchmarks.features import model_features
    from benchmarks.record import refresh_features
    from perfmodels.results_db import DEFAULT_DB, ResultsSchemaError

    try:
        changed = refresh_features(model_features, db or DEFAULT_DB)
    except ResultsSchemaError as error:
        raise AppoptError(f"--db: {error}") from None
    typer.echo(f"updated the features of {changed} row(s) in {db or DEFAULT_DB}")


#: Where this module's commands sit in ``appopt --help`` (``cli.main.command_modules``).
ORDER = 40


def register(app: typer.Typer) -> None:
    """Add ``appopt bench ...`` to the main CLI."""
    app.add_typer(bench_app, name="bench")


if __name__ == "__main__":  # ``python -m cli.bench_cmds bench ...`` works like ``appopt bench ...``
    from cli.alone import run_alone

    run_alone(register, "bench")
