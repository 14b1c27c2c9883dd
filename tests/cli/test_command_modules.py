"""The CLI's commands come from the ``cli/*_cmds.py`` modules it scans: today's order, and a dropped-in module
picked up with no other edit."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.testing import CliRunner

import cli
from cli.main import app, command_modules, register_commands
from tests.drop_in import dropped_module

#: ``appopt --help``'s commands in the order they had when the modules were listed by hand.
HELP_ORDER = [
    "validate", "schema", "plan", "catalog", "compile", "run-model", "train", "build", "push", "submit", "status",
    "calibrate", "bench", "models",
]  # fmt: skip

#: A command module a newcomer would write; it declares no ORDER, so it comes after the others.
ZZZ = '''
import typer


def hello_cmd(name: str = "world") -> None:
    """Say hello (a dropped-in command)."""
    typer.echo(f"hello {name}")


def register(app: typer.Typer) -> None:
    app.command("zzz-hello")(hello_cmd)
'''


def _help_commands(target: typer.Typer) -> list[str]:
    """The command names of ``--help``'s Commands box, in order."""
    out = CliRunner().invoke(target, ["--help"], terminal_width=200).stdout
    box = out.split("Commands")[1].splitlines()[1:]
    return [line.strip("│ ").split()[0] for line in box if line.startswith("│ ") and line[2] != " "]


def test_appopt_help_lists_the_commands_in_their_order() -> None:
    assert _help_commands(app) == HELP_ORDER
    assert [m.__name__ for m in command_modules()] == [
        "cli.runtime_cmds", "cli.train_cmds", "cli.build_cmds", "cli.bench_cmds", "cli.models_cmds",
        "cli.calibrate_cmds",
    ]  # fmt: skip


def test_a_dropped_in_command_module_is_registered(tmp_path: Path) -> None:
    with dropped_module(cli, "zzz_cmds", ZZZ, tmp_path, lambda: None):
        assert command_modules()[-1].__name__ == "cli.zzz_cmds"
        fresh = typer.Typer()
        register_commands(fresh)
        # typer lists single commands before groups (bench, models)
        assert _help_commands(fresh) == [*HELP_ORDER[4:12], "zzz-hello", *HELP_ORDER[12:]]
        result = CliRunner().invoke(fresh, ["zzz-hello", "--name", "newcomer"])
        assert result.exit_code == 0 and result.stdout == "hello newcomer\n"
    assert "cli.zzz_cmds" not in [m.__name__ for m in command_modules()]
