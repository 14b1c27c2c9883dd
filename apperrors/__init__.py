"""The one base exception for user mistakes, shared by every package but the runtime (which ships alone and keeps
its own base, ``runtime.errors.RuntimeModelError``). The CLI prints each of ``lines`` as ``error: <line>`` and exits
with ``exit_code``. This package imports nothing else of ours, so any layer may raise these."""

from __future__ import annotations

import re

#: Characters one error line may hold; longer ones end in an ellipsis (a bad value of 100 KB is not echoed whole).
MAX_LINE_CHARS = 500
#: Control characters (a newline inside a quoted YAML key, an escape sequence) and unpaired surrogates, shown escaped
#: so that one problem stays one printable line.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


class AppoptError(Exception):
    """A user-facing error: bad spec, bad flag, infeasible plan, unreachable registry.

    ``lines`` holds one message per problem (``path.to.field: message``); ``exit_code`` is what the CLI returns.
    Each line is made printable and cut to :data:`MAX_LINE_CHARS`; beyond ``max_lines`` problems (or when the raiser
    says ``more`` were not even described) the last line says how many more there are.

    >>> AppoptError(*(f"k{i}: unknown key" for i in range(50_000))).lines[-1]
    '… and 49,950 more'
    """

    exit_code: int = 1
    max_lines: int = 50
    #: The line shown when the raiser gives none.
    default_line: str = "error"

    def __init__(self, *lines: str, exit_code: int | None = None, more: int = 0) -> None:
        shown = [_one_line(line) for line in lines[: self.max_lines]] or [self.default_line]
        more += max(0, len(lines) - self.max_lines)
        if more:
            shown.append(f"… and {more:,} more")
        self.lines: tuple[str, ...] = tuple(shown)
        if exit_code is not None:
            self.exit_code = exit_code
        super().__init__("\n".join(self.lines))


def _one_line(line: str) -> str:
    line = _UNPRINTABLE.sub(lambda m: repr(m.group())[1:-1], str(line))
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


class SpecError(AppoptError):
    """The application spec is invalid (YAML syntax, unknown keys, bad values)."""

    exit_code = 2
    max_lines = 20
