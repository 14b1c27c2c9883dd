"""The ``appopt`` command line: thin commands over the optimiser, builders and runtime packages."""

from __future__ import annotations

import importlib
import json
import pkgutil
from pathlib import Path
from types import ModuleType
from typing import Annotated

import typer
from typer import core as typer_core

from cli.errors import user_errors

#: Placeholder per annotated type, as click writes them.
_PLACEHOLDERS = {"str": "TEXT", "int": "INTEGER", "float": "NUMBER", "Path": "PATH"}


def _plain_type(param: typer_core.TyperArgument | typer_core.TyperOption, ctx: object) -> str | None:
    """A parameter's value placeholder as click writes it (``PATH``, ``TEXT``, ``INTEGER``; none for a flag), not
    typer 0.29's ``<path>``, ``<bool>``, ``<list[str]>``."""
    if param.metavar is not None:
        return param.metavar
    if getattr(param, "is_flag", False):
        return None
    desc = param.type_descriptor
    if desc.is_choice:
        return "[" + "|".join(str(c) for c in desc.choices or ()) + "]"
    if desc.is_path:
        return "PATH"
    bare = param.bare_type()
    if bare.startswith("list[") and bare.endswith("]"):
        bare = bare[5:-1]
    return _PLACEHOLDERS.get(bare, "VALUE")


def _plain_usage_name(param: typer_core.TyperArgument) -> str:
    """``SPEC`` (required) or ``[SPEC]`` in the usage line, where typer 0.29 writes ``{spec}``."""
    name = param.display_name_raw.upper()
    name = name if param.required else f"[{name}]"
    return name + ("..." if param.nargs != 1 else "")


# The help layout is typer's; only the placeholders change (one place, so every command and group gets them).
typer_core.TyperArgument.display_type_rich = _plain_type  # type: ignore[method-assign,assignment]
typer_core.TyperOption.display_type_rich = _plain_type  # type: ignore[method-assign,assignment]
typer_core.TyperArgument._usage_display_name = _plain_usage_name  # type: ignore[method-assign,assignment]

#: ``-h`` as well as ``--help``; sub-commands and groups inherit it from the root context.
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    name="appopt",
    help="Plan, build and run deep-learning applications fast on the machine you were given.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings=CONTEXT_SETTINGS,
)


def _print_version(value: bool) -> None:
    if value:
        from optimiser.report import appopt_version

        typer.echo(f"appopt {appopt_version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", help="Print appopt's version and exit.", callback=_print_version,
                     is_eager=True),
    ] = False,
) -> None:
    """Plan, build and run deep-learning applications fast on the machine you were given."""

SpecArg = Annotated[Path, typer.Argument(help="The application spec (YAML).", show_default=False)]
OutsideOption = Annotated[
    bool,
    typer.Option(
        "--allow-outside-spec-dir",
        help="Let application.code and application.data.path ship files from outside the spec's directory.",
    ),
]


@app.command()
@user_errors
def validate(
    spec: SpecArg,
    allow_outside_spec_dir: OutsideOption = False,
    strict: Annotated[
        bool, typer.Option("--strict", help="Also plan and render the job; check a Kubernetes Job against the API.")
    ] = False,
) -> None:
    """Check a spec (fields, catalog ids, target hardware, the files it ships) without planning."""
    from optimiser.app_files import check_app_files
    from optimiser.spec import load_spec
    from optimiser.validation import check_rendered_job, validate_spec

    summary = validate_spec(spec)
    check_app_files(load_spec(spec), allow_outside_spec_dir)  # what `plan` checks before it copies anything
    typer.echo(f"ok: {summary}")
    if strict:
        typer.echo(f"ok: {check_rendered_job(spec)}")


@app.command()
@user_errors
def schema(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="Write to this file instead of stdout.")] = None,
) -> None:
    """Print the spec's JSON Schema (for YAML editors)."""
    from optimiser.spec import json_schema

    text = json.dumps(json_schema(), indent=2) + "\n"
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output}")


@app.command()
@user_errors
def plan(
    spec: SpecArg,
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Write plan.json, plan.md and the artifacts here.")
    ] = None,
    top: Annotated[int | None, typer.Option(help="Rank this many candidates in the table/report.", min=1)] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Write into an -o directory that holds files appopt did not write.")
    ] = False,
    allow_outside_spec_dir: OutsideOption = False,
    no_probe: Annotated[
        bool,
        typer.Option(
            "--no-probe",
            help="On an uncalibrated host, skip the quick probe (about 15 s, once per host; also APPOPT_NO_PROBE=1).",
        ),
    ] = False,
) -> None:
    """Rank every compatible route for SPEC and explain the choice; with -o also render the artifacts."""
    from cli.calibrate_cmds import probe_before_plan
    from optimiser.app_files import check_app_files
    from optimiser.artifacts import deploy, render_files
    from optimiser.catalog import load_catalog
    from optimiser.errors import AppoptError
    from optimiser.planner import analyse, enumerate_routes, place, predict, rank
    from optimiser.report import render_table
    from optimiser.spec import load_spec
    from perfmodels.fitted import load_default_model
    from perfmodels.hoststore import HostStoreError

    # The stages of optimiser.stages, in order: spec -> target -> workload -> candidates -> predictions -> plan
    # -> deployment -> files.
    app_spec = load_spec(spec)
    shipped = check_app_files(app_spec, allow_outside_spec_dir)
    if top is not None:
        app_spec = app_spec.model_copy(
            update={"optimisation": app_spec.optimisation.model_copy(update={"top": top})}
        )
    targeted = place(app_spec, load_catalog())
    hardware = targeted.target.hardware
    # (a training plan is not carried over by calibration: nothing to probe for)
    skip_probe = no_probe or app_spec.application.type != "inference"
    on_this_cpu = hardware.id == "local" and hardware.kind == "cpu"
    host_notes, host_store = probe_before_plan(skip_probe) if on_this_cpu else ([], True)
    enumerated = enumerate_routes(analyse(targeted))
    try:
        predicted = predict(enumerated, load_default_model(host_store=host_store))
    except HostStoreError as error:  # this host's calibration store (appopt calibrate) is damaged or foreign
        raise AppoptError(f"host store: {error}") from None
    deployed = deploy(rank(predicted))
    typer.echo(render_table(deployed.plan))
    for note in (*deployed.plan.notes, *host_notes):
        typer.echo(f"note: {note}", err=True)
    if out is not None:
        for path in render_files(deployed, out, shipped, force=force):
            typer.echo(f"wrote {path}")


@app.command()
@user_errors
def catalog(
    category: Annotated[
        str, typer.Argument(help="frameworks | compilers | libraries | hardware | architectures")
    ] = "frameworks",
) -> None:
    """List the catalog's entries of one category."""
    from optimiser.catalog_listing import list_category

    typer.echo(list_category(category))


#: Where a command module without ``ORDER`` goes in ``appopt --help``: after the declared ones, by module name.
LAST = 1000


def command_modules() -> list[ModuleType]:
    """The ``cli/*_cmds.py`` modules that define ``register(app)``, by their ``ORDER`` and then name (the order of
    ``appopt --help``)."""
    import cli

    found = [importlib.import_module(f"cli.{info.name}") for info in pkgutil.iter_modules(cli.__path__)
             if info.name.endswith("_cmds")]
    with_register = [module for module in found if callable(getattr(module, "register", None))]
    return sorted(with_register, key=lambda module: (getattr(module, "ORDER", LAST), module.__name__))


def register_commands(target: typer.Typer) -> None:
    """Add every command module's commands to ``target`` (the ``appopt`` app, or a test's own)."""
    for module in command_modules():
        module.register(target)


register_commands(app)


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
