"""``appopt train``: a thin typer wrapper over ``optimiser.training`` (which drives ``runtime.training``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.errors import user_errors


def train_cmd(
    target: Annotated[Path, typer.Argument(help="An application spec (YAML, type: training) or an ONNX model.")],
    data: Annotated[str, typer.Option("--data", help="'digits' (scikit-learn's 8x8 digits) or FILE.npz.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the trained ONNX model.")],
    epochs: Annotated[int | None, typer.Option(min=0, help="Epochs (default: the spec's, else 10).")] = None,
    batch_size: Annotated[int | None, typer.Option(min=1, help="Batch size (default: the spec's, else 32).")] = None,
    lr: Annotated[float | None, typer.Option(min=0.0, help="Learning rate (default 0.05 sgd, 1e-3 adam).")] = None,
    optimizer: Annotated[str, typer.Option(help="sgd (with momentum 0.9) or adam.")] = "sgd",
    precision: Annotated[
        str | None, typer.Option(help="fp32, or fp16/bf16 mixed precision (default: the spec's, else fp32).")
    ] = None,
    checkpoint: Annotated[
        Path | None, typer.Option(help="Directory for atomic checkpoints (written after every epoch).")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the checkpoint in --checkpoint.")] = False,
    threads: Annotated[int | None, typer.Option(min=1, help="BLAS/OpenMP threads.")] = None,
    seed: Annotated[int, typer.Option(help="Seed for shuffling, dropout and the data split.")] = 0,
) -> None:
    """Train MODEL (or the spec's model) on --data with appopt's runtime and write the trained model to -o."""
    from optimiser.training import TrainRequest, run_training

    request = TrainRequest(
        target=target,
        data=data,
        output=output,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        optimizer=optimizer,
        precision=precision,
        checkpoint=checkpoint,
        resume=resume,
        threads=threads,
        seed=seed,
    )
    run_training(request, echo=typer.echo)


#: Where this module's commands sit in ``appopt --help`` (``cli.main.command_modules``).
ORDER = 20


def register(app: typer.Typer) -> None:
    """Add ``appopt train`` to the CLI."""
    app.command("train")(user_errors(train_cmd))
