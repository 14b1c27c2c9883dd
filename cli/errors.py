"""The CLI edge for user mistakes: one ``error: ...`` line per problem on stderr, a non-zero exit, no traceback."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from optimiser.errors import AppoptError

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Wrap a command: AppoptError exits with its own code, a model the runtime refuses with 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except AppoptError as exc:
            for line in exc.lines:
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except Exception as exc:
            # Only a command that imported the runtime can raise its errors: importing it here would cost every
            # command (``appopt plan`` among them) half a second at start-up.
            runtime_errors = sys.modules.get("runtime.errors")
            if runtime_errors is None or not isinstance(exc, runtime_errors.RuntimeModelError):
                raise
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
