"""A YAML reader for specs that hostile text cannot crash, hang or blow up: one ``field: problem (line N)`` or none.

It refuses what a spec never needs and an attacker loves: aliases (``*name``, the "billion laughs" bomb), nesting
deeper than :data:`MAX_DEPTH`, integer literals longer than :data:`MAX_INT_CHARS` (Python refuses 4,300+ digits, and
no spec number needs 20), explicit tags on mappings and sequences, keys that are not plain scalars, and strings that
cannot be written to a file (NUL, unpaired surrogates). The text is parsed once into plain dicts, lists and scalars
together with the line of every field, so later messages can say where a problem is.

    >>> load_yaml("a:\\n  b: [1, 2]\\n", "<spec>")
    ({'a': {'b': [1, 2]}}, {(): 1, ('a',): 1, ('a', 'b'): 2, ('a', 'b', 0): 2, ('a', 'b', 1): 2})
    >>> load_yaml("a: &x 1\\nb: *x\\n", "<spec>")
    Traceback (most recent call last):
    apperrors.SpecError: b: YAML aliases (*name) are not allowed in a spec: write the value out (line 2)
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from optimiser.errors import SpecError

#: Characters a spec may hold: real ones are a few hundred; PyYAML parses 64 KiB in about half a second.
MAX_SPEC_CHARS = 64 * 1024
#: Mapping/sequence levels: a spec uses four.
MAX_DEPTH = 32
#: Characters of an integer literal (signs, underscores and base prefixes included).
MAX_INT_CHARS = 40

Path_ = tuple[str | int, ...]

_INT_TAG = "tag:yaml.org,2002:int"
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_UNWRITABLE = re.compile("[\x00\ud800-\udfff]")


class _Refused(Exception):
    """A construct the loader refuses, with the node path and source mark where it was found."""

    def __init__(self, message: str, path: Path_, mark: yaml.Mark | None) -> None:
        super().__init__(message)
        self.message, self.path, self.mark = message, path, mark


class _Loader(yaml.SafeLoader):
    """SafeLoader's scanner and parser with a composer that refuses aliases and deep nesting."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self._path: list[str | int | None] = []

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        part = index.value if isinstance(index, yaml.ScalarNode) else index if isinstance(index, int) else None
        self._path.append(part)
        try:
            if self.check_event(yaml.AliasEvent):
                alias = "YAML aliases (*name) are not allowed in a spec: write the value out"
                raise _Refused(alias, self._here(), self.peek_event().start_mark)
            if len(self._path) > MAX_DEPTH + 1:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", self._here(), self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._path.pop()

    def _here(self) -> Path_:
        return tuple(p for p in self._path if p is not None)


def load_yaml(text: str, source: str) -> tuple[Any, dict[Path_, int]]:
    """Parse ``text`` into plain Python data and the line of each field path; raise a one-line SpecError."""
    if len(text) > MAX_SPEC_CHARS:
        raise SpecError(f"{source}: {len(text):,} characters; a spec is at most {MAX_SPEC_CHARS:,}")
    loader: _Loader | None = None
    try:
        loader = _Loader(text)  # the reader checks the characters here
        node = loader.get_single_node()
        lines: dict[Path_, int] = {}
        data = None if node is None else _build(loader, node, (), lines)
    except _Refused as exc:
        line = f" (line {exc.mark.line + 1})" if exc.mark is not None else ""
        raise SpecError(f"{_dotted(exc.path, source)}: {exc.message}{line}") from None
    except yaml.MarkedYAMLError as exc:
        said = ", ".join(str(part) for part in (exc.context, exc.problem) if part) or "syntax error"
        problem = " ".join(said.split())  # one line, whatever PyYAML put in it
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise SpecError(f"{source}: invalid YAML: {problem}{where}") from None
    except yaml.reader.ReaderError as exc:
        where = f" (character {exc.position + 1})"
        raise SpecError(f"{source}: invalid YAML: {exc.reason} (#x{exc.character:04x}){where}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{source}: invalid YAML: {' '.join(str(exc).split())}") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, lines


def _build(loader: _Loader, node: yaml.Node, path: Path_, lines: dict[Path_, int]) -> Any:
    """Plain data for ``node`` (depth is bounded by the composer, so recursion is too)."""
    lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        if node.tag != _MAP_TAG:
            raise _Refused(f"YAML tag {node.tag} is not supported in a spec", path, node.start_mark)
        mapping: dict[str, Any] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise _Refused("a key must be a plain name, not a list or mapping", path, key.start_mark)
            name = _text(key.value, path, key.start_mark)
            if name in mapping:
                raise _Refused("duplicate key", (*path, name), key.start_mark)
            mapping[name] = _build(loader, value, (*path, name), lines)
            lines[(*path, name)] = key.start_mark.line + 1
        return mapping
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _SEQ_TAG:
            raise _Refused(f"YAML tag {node.tag} is not supported in a spec", path, node.start_mark)
        return [_build(loader, item, (*path, i), lines) for i, item in enumerate(node.value)]
    if node.tag == _INT_TAG and len(node.value) > MAX_INT_CHARS:
        too_long = f"an integer of {len(node.value):,} characters is too large (at most {MAX_INT_CHARS})"
        raise _Refused(too_long, path, node.start_mark)
    try:
        value = loader.construct_object(node, deep=True)
    except yaml.MarkedYAMLError as exc:
        problem = " ".join(str(exc.problem or "cannot read this value").split())
        raise _Refused(problem, path, node.start_mark) from None
    except (ValueError, OverflowError, TypeError):  # e.g. a date 2024-13-45, or !!float on a word
        raise _Refused(f"cannot read {node.value!r} as {node.tag.rsplit(':', 1)[-1]}", path, node.start_mark) from None
    return _text(value, path, node.start_mark) if isinstance(value, str) else value


def _text(value: str, path: Path_, mark: yaml.Mark) -> str:
    found = _UNWRITABLE.search(value)
    if found is not None:
        what = "a NUL character" if found.group() == "\x00" else "an unpaired surrogate (not valid Unicode)"
        raise _Refused(f"contains {what}", path, mark)
    return value


def _dotted(path: Path_, source: str) -> str:
    return ".".join(str(p) for p in path) or source
