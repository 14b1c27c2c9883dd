"""The CLI edge for user mistakes: one ``error: ...`` line per problem on stderr, a non-zero exit, no traceback."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from optimiser.errors import AppoptError

F = TypeVar("F", bound=Callable[..., Any])


def user_errors(fn: F) -> F:
    """Wrap a command: AppoptError exits with its own code, a model the runtime refuses with 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from runtime.errors import RuntimeModelError

        try:
            return fn(*args, **kwargs)
        except AppoptError as exc:
            for line in exc.lines:
                typer.echo(f"error: {line}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except RuntimeModelError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
