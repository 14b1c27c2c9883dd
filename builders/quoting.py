"""Shell quoting that stays inert inside line-based files (Singularity sections, job scripts).

``shlex.quote`` alone is not enough there: a quoted value containing a newline followed by ``%post`` or
``Bootstrap:`` is one shell word, but a definition-file parser, which reads lines, sees a new section or stage.
``shell_quote`` therefore re-opens the quotes right after every line break, so no line of the output ever starts
with text taken from the value.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

#: Every character some parser treats as a line break (``str.splitlines``'s set; Go and bash split on "\n" only).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_AFTER_LINE_BREAK = re.compile(f"([{LINE_BREAKS}])")


def has_line_break(text: str) -> bool:
    """True when any parser could split ``text`` into more than one line."""
    return any(ch in LINE_BREAKS for ch in text)


def shell_quote(word: str) -> str:
    """One POSIX shell word that expands to exactly ``word``; its continuation lines start with a quote.

    >>> shell_quote("a b")
    "'a b'"
    >>> shell_quote("x\\n%post")
    "'x\\n''%post'"
    """
    quoted = shlex.quote(word)
    # Line breaks only ever sit inside a '...' run of shlex.quote's output, so closing and re-opening the quote
    # ('') right after one changes nothing for the shell but makes the next line start with a quote.
    return _AFTER_LINE_BREAK.sub(r"\1''", quoted)


def shell_join(argv: Iterable[str]) -> str:
    """A command line that runs ``argv`` exactly: every word quoted with ``shell_quote``.

    >>> shell_join(["echo", "$(id)"])
    "echo '$(id)'"
    """
    return " ".join(shell_quote(word) for word in argv)
