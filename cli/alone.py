"""``python -m cli.<area>_cmds ...``: one area's commands without the rest of the CLI (what a Slurm array task runs
where the ``appopt`` script is not on PATH)."""

from __future__ import annotations

from collections.abc import Callable

import typer


def run_alone(register: Callable[[typer.Typer], None], group: str) -> None:
    """Run ``appopt GROUP ...`` from the commands ``register`` adds, parsing ``sys.argv``."""
    root = typer.Typer(add_completion=False)

    @root.callback(help=f"appopt (only the ``{group}`` commands).")
    def _appopt() -> None:
        pass

    register(root)
    root()
