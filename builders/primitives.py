"""Container instructions, each rendered for every format: the only code that knows Dockerfile vs Singularity syntax.

A recipe is a list of these; building blocks compose them and never write ``RUN`` or ``%post`` text themselves.
Everything that may come from a spec is made inert here, per format:

- Dockerfile ``ENV``/``LABEL`` values are JSON-quoted (with ``$`` escaped, as Docker expands variables there);
  ``ENTRYPOINT`` and multi-line ``RUN`` use the JSON-array (exec) form, which Docker reads with a JSON decoder.
- Shell words (``RUN``, ``%post``, ``%environment``, ``%runscript``) go through :func:`builders.quoting.shell_quote`,
  which keeps every continuation line starting with a quote, so a value can never begin a new instruction, section
  or stage.
- Where a format cannot quote at all (``FROM``, ``COPY``/``%files`` paths, env names, label keys) the value must
  match a strict grammar, checked when the primitive is made.

>>> from builders.context import RenderContext
>>> Environment((("GREETING", "hi $USER"),)).render(RenderContext("docker"))
'ENV GREETING="hi \\\\$USER"'
>>> print(Environment((("GREETING", "hi $USER"),)).render(RenderContext("singularity")))
%environment
    export GREETING='hi $USER'
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass

from builders.context import RenderContext
from builders.quoting import LINE_BREAKS, has_line_break, shell_join, shell_quote
from builders.validate import ENV_NAME, IMAGE_REF, LABEL_KEY, SAFE_PATH

#: Body lines of a Singularity section are indented by this much (layout only; parsers strip it).
INDENT = "    "
_STAGE_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_USER = re.compile(r"^(?:[a-z_][a-z0-9_-]*|[0-9]+)(?::(?:[a-z_][a-z0-9_-]*|[0-9]+))?$")
# JSON leaves these raw, but some line splitters (Python's, spython's) break lines on them: escape them too.
_JSON_EXTRA_ESCAPES = {ord(ch): f"\\u{ord(ch):04x}" for ch in "\x85\u2028\u2029"}


class Primitive(ABC):
    """One instruction; ``render`` dispatches on the context's format (no global format setting)."""

    def render(self, ctx: RenderContext) -> str:
        """The instruction's text for ``ctx.format``; an empty string means "nothing in this format"."""
        return self.docker(ctx) if ctx.format == "docker" else self.singularity(ctx)

    @abstractmethod
    def docker(self, ctx: RenderContext) -> str: ...

    @abstractmethod
    def singularity(self, ctx: RenderContext) -> str: ...


# --- quoting for the Dockerfile -------------------------------------------------------------------------------


def docker_json(words: tuple[str, ...] | list[str]) -> str:
    """A JSON array for the exec form (``ENTRYPOINT``/``RUN``); Docker decodes it exactly, with no expansion."""
    return json.dumps(list(words), ensure_ascii=False).translate(_JSON_EXTRA_ESCAPES)


def docker_value(value: str) -> str:
    """A double-quoted ``ENV``/``LABEL`` value: JSON escapes, plus ``\\$`` so Docker does not expand variables.

    Docker has no escape for a line break inside ``ENV``/``LABEL``, so one comes out as the two characters ``\\n``:
    changed, but inert (it cannot start a new instruction).
    """
    return json.dumps(value, ensure_ascii=False).translate(_JSON_EXTRA_ESCAPES).replace("$", "\\$")


def singularity_label_value(value: str) -> str:
    """A ``%labels`` value (the rest of one line, unquoted): line breaks written as escapes, like Docker's."""
    return "".join(json.dumps(ch)[1:-1] if ch in LINE_BREAKS else ch for ch in value)


#: Section order in a merged Singularity stage (Apptainer runs them in a fixed order whatever the file order).
_SECTION_ORDER = ("%files", "%environment", "%post", "%labels", "%runscript")


def layout_stage(rendered: list[str], ctx: RenderContext) -> list[str]:
    """The rendered primitives of one stage as the file should show them.

    Docker: unchanged, one instruction each. Singularity: Apptainer concatenates every same-named section of a
    stage in file order (and runs ``%files`` before ``%post`` wherever they are), so merging them that same way
    changes nothing for the build while turning a dozen one-line sections into one ``%post``, one ``%files``...
    Header lines and comments come first.
    """
    if ctx.format == "docker":
        return [text for text in rendered if text]
    header: list[str] = []
    sections: dict[str, list[str]] = {}
    for text in filter(None, rendered):
        body: list[str] | None = None
        for line in text.split("\n"):
            words = line.split()
            if words and words[0].startswith("%"):  # Apptainer's rule for where a section starts
                body = sections.setdefault(line, [])
            elif body is None:
                header.append(line)
            else:
                body.append(line)

    def rank(name: str) -> int:
        base = name.split()[0]
        return _SECTION_ORDER.index(base) if base in _SECTION_ORDER else len(_SECTION_ORDER)

    merged = ["\n".join([name, *body]) for name, body in sorted(sections.items(), key=lambda s: rank(s[0]))]
    return ["\n".join(header), *merged] if header else merged


def _section(name: str, lines: list[str]) -> str:
    return "\n".join([f"%{name}", *(INDENT + line for line in lines)])


def _check(ok: bool, what: str, value: str) -> None:
    if not ok:
        raise ValueError(f"{what}: {value!r} cannot be rendered safely in a container file")


# --- the primitives -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comment(Primitive):
    """A comment line (one ``#`` line per line of text, so text can never become an instruction)."""

    text: str

    def docker(self, ctx: RenderContext) -> str:
        return self._lines()

    def singularity(self, ctx: RenderContext) -> str:
        return self._lines()

    def _lines(self) -> str:
        lines = re.split(f"[{LINE_BREAKS}]", self.text)
        return "\n".join(f"# {line}".rstrip() for line in lines)


@dataclass(frozen=True)
class BaseImage(Primitive):
    """The start of a stage: ``FROM image AS stage`` / ``Bootstrap: docker``, ``From:``, ``Stage:``."""

    image: str
    stage: str | None = None

    def __post_init__(self) -> None:
        _check(bool(IMAGE_REF.match(self.image)), "image", self.image)
        if self.stage is not None:
            _check(bool(_STAGE_NAME.match(self.stage)), "stage", self.stage)

    def docker(self, ctx: RenderContext) -> str:
        return f"FROM {self.image}" + (f" AS {self.stage}" if self.stage else "")

    def singularity(self, ctx: RenderContext) -> str:
        # From: before Stage: -- spython's parser needs that order; Apptainer accepts either.
        return f"Bootstrap: docker\nFrom: {self.image}" + (f"\nStage: {self.stage}" if self.stage else "")


@dataclass(frozen=True)
class Shell(Primitive):
    """Build-time shell commands in one layer.

    ``commands`` are shell command lines: build them from argv lists with :func:`Shell.from_argv` (quoted), or pass
    trusted text from our own code or the catalog. Docker chains them with ``&&`` in one ``RUN``; Singularity puts
    one per line in ``%post``, which Apptainer runs with ``sh -e`` (an ``&&`` chain would hide a failure there).
    """

    commands: tuple[str, ...]

    @classmethod
    def from_argv(cls, *argvs: tuple[str, ...] | list[str]) -> Shell:
        """Commands from argv lists; every word quoted, so spec text stays data."""
        return cls(tuple(shell_join(argv) for argv in argvs))

    def docker(self, ctx: RenderContext) -> str:
        if any(has_line_break(command) for command in self.commands):
            # A line break would end the shell-form instruction; the exec form carries it inside a JSON string.
            return "RUN " + docker_json(["/bin/sh", "-c", " && ".join(self.commands)])
        return "RUN " + " && \\\n    ".join(self.commands)

    def singularity(self, ctx: RenderContext) -> str:
        return _section("post", list(self.commands))


@dataclass(frozen=True)
class Environment(Primitive):
    """Environment variables of the image.

    ``expand=False`` (the default, for anything from a spec): values are literal. ``expand=True`` is for our own
    values that refer to other variables (``PATH=/opt/x/bin:$PATH``). ``build_time=True`` also exports them to
    the rest of the Singularity build (``%post``), as Docker's ``ENV`` already applies to later ``RUN`` steps.
    """

    variables: tuple[tuple[str, str], ...]
    expand: bool = False
    build_time: bool = False

    def __post_init__(self) -> None:
        for name, value in self.variables:
            _check(bool(ENV_NAME.match(name)), "environment variable name", name)
            if self.expand:
                _check(not has_line_break(value) and '"' not in value and "\\" not in value, name, value)

    def docker(self, ctx: RenderContext) -> str:
        pairs = [
            f'{name}="{value}"' if self.expand else f"{name}={docker_value(value)}" for name, value in self.variables
        ]
        return "ENV " + " \\\n    ".join(pairs)

    def singularity(self, ctx: RenderContext) -> str:
        exports = [
            f'export {name}="{value}"' if self.expand else f"export {name}={shell_quote(value)}"
            for name, value in self.variables
        ]
        text = _section("environment", exports)
        return text + "\n" + _section("post", exports) if self.build_time else text


@dataclass(frozen=True)
class Copy(Primitive):
    """Copy a file or directory from the build context, or from an earlier stage when ``from_stage`` is set."""

    src: str
    dest: str
    from_stage: str | None = None

    def __post_init__(self) -> None:
        for path in (self.src, self.dest):
            _check(bool(SAFE_PATH.match(path)) and not path.startswith("-"), "path", path)
        if self.from_stage is not None:
            _check(bool(_STAGE_NAME.match(self.from_stage)), "stage", self.from_stage)

    def docker(self, ctx: RenderContext) -> str:
        source = f"--from={self.from_stage} " if self.from_stage else ""
        return f"COPY {source}{self.src} {self.dest}"

    def singularity(self, ctx: RenderContext) -> str:
        name = f"files from {self.from_stage}" if self.from_stage else "files"
        return _section(name, [f"{self.src} {self.dest}"])


@dataclass(frozen=True)
class Workdir(Primitive):
    """The working directory for the following build steps (and, in Docker, the container's default)."""

    path: str

    def __post_init__(self) -> None:
        _check(bool(SAFE_PATH.match(self.path)) and self.path.startswith("/"), "path", self.path)

    def docker(self, ctx: RenderContext) -> str:
        return f"WORKDIR {self.path}"

    def singularity(self, ctx: RenderContext) -> str:
        # %post sections form one script, so the cd holds for the later build steps; at run time Singularity
        # keeps the caller's directory (the job scripts pass --pwd).
        return _section("post", [f"mkdir -p {self.path}", f"cd {self.path}"])


@dataclass(frozen=True)
class Label(Primitive):
    """Image metadata (OCI labels): ``LABEL key="value"`` / ``%labels`` lines."""

    labels: tuple[tuple[str, str], ...]

    def __post_init__(self) -> None:
        for key, _ in self.labels:
            _check(bool(LABEL_KEY.match(key)), "label key", key)

    def docker(self, ctx: RenderContext) -> str:
        return "LABEL " + " \\\n    ".join(f"{key}={docker_value(value)}" for key, value in self.labels)

    def singularity(self, ctx: RenderContext) -> str:
        return _section("labels", [f"{key} {singularity_label_value(value)}".rstrip() for key, value in self.labels])


@dataclass(frozen=True)
class Entrypoint(Primitive):
    """What the container runs: ``ENTRYPOINT [...]`` (exec form) / ``%runscript`` that ``exec``s it with ``"$@"``."""

    argv: tuple[str, ...]

    def docker(self, ctx: RenderContext) -> str:
        return "ENTRYPOINT " + docker_json(self.argv)

    def singularity(self, ctx: RenderContext) -> str:
        return _section("runscript", [f'exec {shell_join(self.argv)} "$@"'])


@dataclass(frozen=True)
class User(Primitive):
    """The user the container runs as (Docker only: Singularity always runs as the calling user)."""

    name: str

    def __post_init__(self) -> None:
        _check(bool(_USER.match(self.name)), "user", self.name)

    def docker(self, ctx: RenderContext) -> str:
        return f"USER {self.name}"

    def singularity(self, ctx: RenderContext) -> str:
        return ""
