"""``appopt models fit|evaluate|show|literature``: the performance models fitted from the benchmark database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.errors import user_errors
from cli.progress import progress
from optimiser.errors import AppoptError

if TYPE_CHECKING:
    import pandas as pd  # (imported where used: every command would pay for it at start-up)


models_app = typer.Typer(name="models", help="Fit, evaluate and inspect the performance models.", no_args_is_help=True)

DbOption = Annotated[
    list[Path] | None,
    typer.Option("--db", help="Result database(s) to use (repeatable; default: the shipped one)."),
]


@models_app.callback()
def _models() -> None:
    """Fit, evaluate and inspect the performance models."""


def _frame(db: list[Path] | None) -> pd.DataFrame:
    from perfmodels.fitted import default_db_path
    from perfmodels.results_db import ResultsSchemaError, read_results

    paths = db or [default_db_path()]
    try:
        with progress(f"reading {', '.join(p.name for p in paths)}"):
            return read_results(*paths)
    except ResultsSchemaError as error:
        raise AppoptError(f"--db: {error}") from None


@models_app.command("fit")
@user_errors
def fit_cmd(
    db: DbOption = None,
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write the fitted weights as JSON.")] = None,
) -> None:
    """Fit the per-target models and print each group's size and training error."""
    from perfmodels.fitted import fit_model

    model = fit_model(_frame(db))
    if not model.result.groups:
        raise AppoptError("--db: no measured SingleStream rows with model features to fit on")
    for line in model.describe():
        typer.echo(line)
    if output is not None:
        output.write_text(json.dumps([g.as_dict() for g in model.result.groups], indent=2) + "\n", encoding="utf-8")
        typer.echo(f"wrote {output}")


@models_app.command("evaluate")
@user_errors
def evaluate_cmd(
    db: DbOption = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a predicted-vs-measured PNG here.")] = None,
    per_family: Annotated[bool, typer.Option(help="Also print RMSPE per held-out family.")] = False,
    worst: Annotated[
        int, typer.Option("--decisions", help="Also print this many worst decisions by top-1 regret.", min=0)
    ] = 0,
    by: Annotated[
        str, typer.Option("--by", help="family (leave-one-architecture-out) | host (leave-one-host-out).")
    ] = "family",
    statistic: Annotated[
        str, typer.Option(help="auto (CPU time for 1-thread rows on a busy machine) | wall | cpu.")
    ] = "auto",
    threads: Annotated[int | None, typer.Option(help="Only measurements at this thread count.", min=1)] = None,
    save: Annotated[
        bool, typer.Option(help="Store the figures next to the database (plans then show them without refitting).")
    ] = False,
    whole_weight: Annotated[
        float | None,
        typer.Option(
            "--whole-weight",
            help="The whole-model fit's largest weight against the kernel-unit sum (default: the planner's).",
            min=0.0,
            max=1.0,
        ),
    ] = None,
    mode: Annotated[
        str, typer.Option(help="inference | training (step time and time to target) | gpu (GPU rows, both modes).")
    ] = "inference",
    include_busy: Annotated[bool, typer.Option(help="Training: also rows measured under load.")] = False,
) -> None:
    """Leave-one-architecture-out: RMSPE, share within ±10%, Spearman, top-1 regret (fitted vs prior)."""
    from perfmodels.evaluate import leave_one_architecture_out
    from perfmodels.fitted import default_db_path, write_evaluation_summary
    from perfmodels.results_db import cpu_rows

    if mode not in ("inference", "training", "gpu"):
        raise AppoptError(f"--mode: {mode!r} is not one of inference, training, gpu")
    defaults = mode == "inference" and by == "family" and statistic == "auto" and threads is None
    if save and (len(db or [None]) != 1 or not defaults or whole_weight is not None):  # (before minutes of refits)
        raise AppoptError("--save: only for one --db evaluated with the defaults (what plans use)")
    if mode == "gpu":
        from optimiser.catalog import load_catalog
        from optimiser.gpu_baseline import prior_on_rows
        from optimiser.target import gpu_presets
        from perfmodels.gpu_fit import GpuFit, evaluation_lines

        catalog = load_catalog()
        fit = GpuFit.from_frame(_frame(db), gpu_presets(catalog))
        for line in evaluation_lines(fit, baseline=prior_on_rows(fit, catalog)):
            typer.echo(line)
        return
    if mode == "training":
        from perfmodels.training_fit import leave_one_family_out

        try:
            for line in leave_one_family_out(cpu_rows(_frame(db)), include_busy=include_busy).lines():
                typer.echo(line)
        except ValueError as error:
            raise AppoptError(f"--db: {error}") from None
        return
    if statistic not in ("auto", "wall", "cpu"):
        raise AppoptError(f"--statistic: {statistic!r} is not one of auto, wall, cpu")
    if by not in ("family", "host"):
        raise AppoptError(f"--by: {by!r} is not one of family, host")
    frame = cpu_rows(_frame(db))  # (GPU rows: --mode gpu)
    if by == "host":
        from perfmodels.evaluate import leave_one_host_out

        try:
            with progress("leave-one-host-out (one refit per held-out host)"):
                by_host = leave_one_host_out(frame, statistic=statistic)  # type: ignore[arg-type]
        except ValueError as error:
            raise AppoptError(f"--by host: {error}") from None
        for line in by_host.lines():
            typer.echo(line)
        return
    try:
        with progress(f"leave-one-architecture-out over {len(frame)} rows (one refit per held-out family)"):
            evaluation = leave_one_architecture_out(
                frame,
                statistic=statistic,  # type: ignore[arg-type]
                threads=threads,
                whole_weight=whole_weight,
                nested=whole_weight is None,  # (a weight asked for is scored as given: no weight is chosen)
            )
    except ValueError as error:
        raise AppoptError(f"--db: {error}") from None
    for line in evaluation.lines():
        typer.echo(line)
    paths = db or [default_db_path()]
    if save:
        from optimiser.training_transfer_proxy import training_bands

        with progress("training steps held out by family, and the training transfer proxy 1:2 and 2:1 (~1 min)"):
            training, notes = training_bands(paths[0], frame)
        for note in notes:
            typer.echo(f"note: {note}", err=True)
        try:  # what plans show as the model's accuracy (read back while the database is unchanged)
            typer.echo(f"wrote {write_evaluation_summary(paths[0], evaluation, training)}")
        except OSError as error:
            typer.echo(f"note: could not store the figures next to {paths[0]}: {error.strerror}", err=True)
    if worst:
        for line in evaluation.decision_lines(worst):
            typer.echo(line)
    if per_family:
        typer.echo(evaluation.per_family().to_string(float_format=lambda v: f"{v:.3f}"))
    if plot is not None:
        from perfmodels.plot import plot_predicted_vs_measured

        typer.echo(f"wrote {plot_predicted_vs_measured(evaluation.predictions, plot)}")


@models_app.command("show")
@user_errors
def show_cmd(db: DbOption = None) -> None:
    """Show the fitted rates per target and route: GFLOP/s per op class, GB/s per byte stream, µs per node."""
    from perfmodels.fitted import default_db_path, fit_model
    from perfmodels.rates_table import describe_rates
    from perfmodels.targets import local_target_key

    frame = _frame(db)
    paths = db or [default_db_path()]
    with progress(f"fitting the per-target models to {len(frame)} rows"):
        # one database: its kernel-unit fits are kept in the cache the planner uses, so the next show is quick
        model = fit_model(frame, db=paths[0] if len(paths) == 1 else None)
    typer.echo(f"this machine: {local_target_key()}")
    for line in describe_rates(model.result.groups):
        typer.echo(line)
    unit_fit = model.units()
    if unit_fit is not None and unit_fit.keys():
        described = []
        keys = list(unit_fit.keys())
        with progress(f"fitting the kernel-unit models of {len(keys)} routes") as step:
            for key in keys:
                step("/".join(str(part) for part in key))
                route = unit_fit.route(key)
                if route is not None:
                    described.append(route.describe())
        typer.echo("kernel-unit models (learned from unit sweeps; train RMSPE per kind):")
        for line in described:
            typer.echo(line)


@models_app.command("literature")
@user_errors
def literature_cmd(db: DbOption = None) -> None:
    """The seeds' compiler speedups next to what the database measures for the same compiler on the suite."""
    from optimiser.catalog import load_catalog
    from optimiser.literature import literature_table

    for line in literature_table(load_catalog(), _frame(db)):
        typer.echo(line)


#: Where this module's commands sit in ``appopt --help`` (``cli.main.command_modules``).
ORDER = 50


def register(app: typer.Typer) -> None:
    """Add ``appopt models ...`` to the main CLI."""
    app.add_typer(models_app, name="models")


if __name__ == "__main__":  # ``python -m cli.models_cmds models ...`` works like ``appopt models ...``
    from cli.alone import run_alone

    run_alone(register, "models")
