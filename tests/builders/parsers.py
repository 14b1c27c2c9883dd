"""Independent readers of the rendered files, written from the formats' own rules (not from our renderers):
BuildKit's Dockerfile line rules and Apptainer's definition-file rules, plus spython's real parser."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spython.main.parse.parsers import SingularityParser

DOCKER_INSTRUCTIONS = {"FROM", "RUN", "COPY", "ENV", "LABEL", "ENTRYPOINT", "WORKDIR", "USER"}


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, the way BuildKit reads lines: split on "\\n" only, ``#`` lines are
    comments (also inside a continuation), a trailing backslash continues the instruction on the next line."""
    result: list[tuple[str, str]] = []
    current: str | None = None
    for line in text.split("\n"):
        stripped = line.strip()
        if stripped.startswith("#") or (current is None and not stripped):
            continue
        current = line if current is None else current + line
        if current.rstrip().endswith("\\"):
            current = current.rstrip()[:-1]
            continue
        keyword, _, rest = current.strip().partition(" ")
        result.append((keyword.upper(), rest.strip()))
        current = None
    assert current is None, "the Dockerfile ends inside a continued instruction"
    return result


def docker_unquote(quoted: str) -> str:
    """A double-quoted ENV/LABEL value as Docker reads it; fails on a ``$`` Docker would expand."""
    assert quoted.startswith('"') and quoted.endswith('"'), quoted
    out, chars, i = [], quoted[1:-1], 0
    while i < len(chars):
        ch = chars[i]
        if ch == "\\" and i + 1 < len(chars) and chars[i + 1] in '"$\\':
            out.append(chars[i + 1])
            i += 2
            continue
        assert ch != '"', f"unescaped quote ends the value early: {quoted!r}"
        assert ch != "$", f"Docker would expand this $: {quoted!r}"
        out.append(ch)
        i += 1
    return "".join(out)


_PAIR = re.compile(r'\s*([A-Za-z0-9_.-]+)=("(?:[^"\\]|\\.)*")')


def docker_pairs(arguments: str) -> list[tuple[str, str]]:
    """``KEY="value" KEY2="value2"`` (ENV/LABEL) as (key, still-quoted value); the whole text must be pairs."""
    pairs, pos = [], 0
    while pos < len(arguments):
        match = _PAIR.match(arguments, pos)
        assert match, f'not KEY="value" pairs at {arguments[pos:]!r}'
        pairs.append((match.group(1), match.group(2)))
        pos = match.end()
    return pairs


#: How various readers split lines: Go's bufio / BuildKit / Apptainer ("\n") and Python's universal newlines.
LINE_SPLITTERS: dict[str, Callable[[str], list[str]]] = {
    "newline": lambda text: text.split("\n"),
    "splitlines": str.splitlines,
}


def singularity_stages(
    text: str, split: Callable[[str], list[str]] = LINE_SPLITTERS["newline"]
) -> list[dict[str, Any]]:
    """Stages the way Apptainer finds them: a stage starts at a line beginning with ``Bootstrap:``, a section at a
    line whose first word starts with ``%``. Each stage: {"header": [...], "sections": [(name, body lines)]}."""
    stages: list[dict[str, Any]] = []
    preamble: list[str] = []
    for line in split(text):
        if re.match(r"(?i)bootstrap:", line):
            stages.append({"header": [line.strip()], "sections": []})
        elif not stages:
            preamble.append(line)
        elif line.split() and line.split()[0].startswith("%"):
            stages[-1]["sections"].append((line.strip(), []))
        elif stages[-1]["sections"]:
            stages[-1]["sections"][-1][1].append(line)
        elif line.strip() and not line.strip().startswith("#"):
            stages[-1]["header"].append(line.strip())
    assert all(not line.strip() or line.startswith("#") for line in preamble), preamble
    return stages


def section_body(stage: dict[str, Any], name: str) -> str:
    """All lines of the sections called ``name`` in ``stage``, joined (Apptainer concatenates repeats)."""
    return "\n".join(line for section, body in stage["sections"] if section == name for line in body)


def spython_recipe(text: str, tmp_path: Path) -> dict[str, Any]:
    """spython's SingularityParser over the text: {stage name: recipe json}."""
    path = tmp_path / "Singularity.def"
    path.write_text(text, encoding="utf-8")
    parser = SingularityParser(str(path))
    return {name: recipe.json() for name, recipe in parser.recipe.items()}
