"""``appopt compile`` and ``appopt run-model``: thin typer wrappers over ``runtime.tools``.

A model the runtime refuses (``RuntimeModelError``) becomes one ``error: ...`` line on stderr and exit code 2.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.errors import user_errors


def compile_cmd(
    model: Annotated[Path, typer.Argument(help="ONNX model file to check and optimise.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Directory to write the compiled model into.")],
    disable: Annotated[
        list[str] | None, typer.Option("--disable", help="Graph pass to skip (repeatable), e.g. constant_folding.")
    ] = None,
) -> None:
    """Check and optimise MODEL, writing model.onnx + manifest.json to OUTPUT for a fast start later."""
    from runtime.tools import compile_to_dir, format_compile

    manifest = compile_to_dir(model, output, disable=disable)
    for line in format_compile(manifest, output):
        typer.echo(line)


def run_model_cmd(
    model: Annotated[Path, typer.Argument(help="ONNX model file or a directory written by `appopt compile`.")],
    input: Annotated[
        list[str] | None, typer.Option("--input", "-i", help="NAME=FILE (.npy or TensorProto .pb); repeatable.")
    ] = None,
    random: Annotated[bool, typer.Option("--random", help="Fill inputs not given with random data.")] = False,
    repeat: Annotated[int, typer.Option("--repeat", "-n", min=1, help="Runs to time.")] = 1,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="BLAS/OpenMP threads to use.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed for --random.")] = 0,
    profile: Annotated[
        bool, typer.Option("--profile", help="Also print where the time goes, per op type and slowest nodes.")
    ] = False,
    engine: Annotated[
        str, typer.Option("--engine", help="What runs the model: appopt (this runtime) or onnxruntime.")
    ] = "appopt",
) -> None:
    """Run MODEL with appopt's runtime; print each output's shape, dtype, mean/min/max and the latency."""
    from runtime.tools import format_run, run_model

    report = run_model(model_source(model, engine),
        inputs=input,
        random=random,
        repeat=repeat,
        threads=threads,
        seed=seed,
        profile=profile,
        engine=engine,)
    for line in format_run(report):
        typer.echo(line)


def model_source(model: Path, engine: str) -> Path:
    """What to load for MODEL: a file as given; a directory only when `appopt compile` wrote it, for this runtime
    (its graph holds appopt's fused ops, which onnxruntime cannot run). Any other directory is refused by name, not
    reported as missing."""
    from runtime.artifact import is_artifact_dir
    from runtime.errors import RuntimeModelError

    if not model.is_dir():
        return model
    if not is_artifact_dir(model):
        raise RuntimeModelError(
            f"model {str(model)!r} is a directory, but not one `appopt compile` wrote (it has no appopt "
            "manifest.json): give an .onnx file or a compiled directory"
        )
    if engine == "onnxruntime":
        raise RuntimeModelError(
            f"model {str(model)!r} was compiled by appopt and holds its fused ops, which onnxruntime cannot run: "
            "give --engine onnxruntime the original .onnx file"
        )
    return model


#: Where this module's commands sit in ``appopt --help`` (``cli.main.command_modules``).
ORDER = 10


def register(app: typer.Typer) -> None:
    """Add the runtime commands to the appopt CLI."""
    app.command("compile")(user_errors(compile_cmd))
    app.command("run-model")(user_errors(run_model_cmd))
