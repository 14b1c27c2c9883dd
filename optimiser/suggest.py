"""'Did you mean' help for ids a user typed."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def unknown_id_message(field: str, value: str, known: Iterable[str]) -> str:
    """``field: unknown 'x' (did you mean 'y'?)`` or the list of known ids when nothing is close (never 'x' itself:
    a name that is known elsewhere but not valid here gets the list)."""
    names = sorted(known)
    close = [c for c in difflib.get_close_matches(value, names, n=2, cutoff=0.6) if c != value][:1]
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(names)}"
    shown = repr(value) if len(value) <= 60 else repr(value[:60]) + "…"
    return f"{field}: unknown {shown} ({hint})"
