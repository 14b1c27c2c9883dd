"""The one base exception for user mistakes; the CLI prints it as one line and exits non-zero."""

from __future__ import annotations


class AppoptError(Exception):
    """A user-facing error: bad spec, bad flag, infeasible plan, unreachable registry.

    ``lines`` holds one message per problem (``path.to.field: message``); ``exit_code`` is what the CLI returns.
    """

    exit_code: int = 1

    def __init__(self, *lines: str, exit_code: int | None = None) -> None:
        self.lines: tuple[str, ...] = lines or ("error",)
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__("\n".join(self.lines))


class SpecError(AppoptError):
    """The application spec is invalid (YAML syntax, unknown keys, bad values)."""

    exit_code = 2


class CatalogError(AppoptError):
    """The shipped or user-supplied catalog is inconsistent."""


class PlanError(AppoptError):
    """No route satisfies the spec; ``lines`` says why each one failed."""

    exit_code = 3
