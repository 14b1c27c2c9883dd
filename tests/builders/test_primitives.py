"""Each primitive in each format, as exact text; and the quoting rules they rely on."""

from __future__ import annotations

import ast
import json
import shlex
from pathlib import Path

import pytest

from builders import validate
from builders.context import RenderContext
from builders.primitives import (
    BaseImage,
    Comment,
    Copy,
    Entrypoint,
    Environment,
    Label,
    Primitive,
    Shell,
    User,
    Workdir,
    docker_value,
    layout_stage,
)
from builders.quoting import shell_quote

DOCKER = RenderContext("docker")
SINGULARITY = RenderContext("singularity", distro="ubuntu", arch="aarch64")

CASES: list[tuple[Primitive, str, str]] = [
    (BaseImage("debian:12"), "FROM debian:12", "Bootstrap: docker\nFrom: debian:12"),
    (
        BaseImage("nvcr.io/nvidia/pytorch:24.01-py3", "build"),
        "FROM nvcr.io/nvidia/pytorch:24.01-py3 AS build",
        "Bootstrap: docker\nFrom: nvcr.io/nvidia/pytorch:24.01-py3\nStage: build",
    ),
    (
        Shell.from_argv(["pip", "install", "numpy>=2"], ["echo", "$(id)"]),
        "RUN pip install 'numpy>=2' && \\\n    echo '$(id)'",
        "%post\n    pip install 'numpy>=2'\n    echo '$(id)'",
    ),
    (
        Shell.from_argv(["echo", "a\nRUN b"]),
        'RUN ["/bin/sh", "-c", "echo \'a\\n\'\'RUN b\'"]',
        "%post\n    echo 'a\n''RUN b'",
    ),
    (
        Environment((("A", "1"), ("B", 'x "y" $Z'))),
        'ENV A="1" \\\n    B="x \\"y\\" \\$Z"',
        "%environment\n    export A=1\n    export B='x \"y\" $Z'",
    ),
    (
        Environment((("PATH", "/opt/bin:$PATH"),), expand=True, build_time=True),
        'ENV PATH="/opt/bin:$PATH"',
        '%environment\n    export PATH="/opt/bin:$PATH"\n%post\n    export PATH="/opt/bin:$PATH"',
    ),
    (
        Copy("model.onnx", "/opt/app/model.onnx"),
        "COPY model.onnx /opt/app/model.onnx",
        "%files\n    model.onnx /opt/app/model.onnx",
    ),
    (
        Copy("/opt/app", "/opt/app", from_stage="build"),
        "COPY --from=build /opt/app /opt/app",
        "%files from build\n    /opt/app /opt/app",
    ),
    (Workdir("/opt/app"), "WORKDIR /opt/app", "%post\n    mkdir -p /opt/app\n    cd /opt/app"),
    (
        Label((("org.opencontainers.image.title", "a\nb $c"),)),
        'LABEL org.opencontainers.image.title="a\\nb \\$c"',
        "%labels\n    org.opencontainers.image.title a\\nb $c",
    ),
    (
        Entrypoint(("python3", "-m", "runtime", "it's")),
        'ENTRYPOINT ["python3", "-m", "runtime", "it\'s"]',
        "%runscript\n    exec python3 -m runtime 'it'\"'\"'s' \"$@\"",
    ),
    (User("1000:1000"), "USER 1000:1000", ""),
    (Comment("two\nlines"), "# two\n# lines", "# two\n# lines"),
]


@pytest.mark.parametrize(("primitive", "docker", "singularity"), CASES, ids=lambda p: type(p).__name__)
def test_primitive_renders_each_format(primitive: Primitive, docker: str, singularity: str) -> None:
    assert primitive.render(DOCKER) == docker
    assert primitive.render(SINGULARITY) == singularity


@pytest.mark.parametrize(
    "make",
    [
        lambda: BaseImage("debian:12 AS x\nRUN evil"),
        lambda: BaseImage("debian:12", stage="Build Stage"),
        lambda: Copy("my model.onnx", "/opt/app/"),
        lambda: Copy("$(evil)", "/x"),
        lambda: Copy("a", "/b", from_stage="x y"),
        lambda: Workdir("relative/dir"),
        lambda: Environment((("BAD-NAME", "x"),)),
        lambda: Environment((("P", 'a"b'),), expand=True),
        lambda: Label((("Key With Spaces", "x"),)),
        lambda: User("root; evil"),
    ],
)
def test_unquotable_values_are_refused_when_the_primitive_is_made(make: object) -> None:
    with pytest.raises(ValueError, match="cannot be rendered safely"):
        make()  # type: ignore[operator]


def test_render_context_is_frozen_and_checked() -> None:
    with pytest.raises(AttributeError):
        DOCKER.format = "singularity"  # type: ignore[misc]
    with pytest.raises(ValueError, match="unknown container format"):
        RenderContext("podman")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["plain", "", "$(id) `id` ${X}", "a\nb", "it's", "tab\there", "\\", "é\u2028x"])
def test_shell_quote_round_trips_and_never_starts_a_line_with_the_value(value: str) -> None:
    quoted = shell_quote(value)
    assert shlex.split(quoted) == [value]
    assert all(line.startswith("'") for line in quoted.splitlines()[1:])


def test_docker_value_escapes_dollar_and_quotes_as_json() -> None:
    assert docker_value('a"b\\c $HOME') == '"a\\"b\\\\c \\$HOME"'
    assert json.loads(docker_value("no dollar\nhere")) == "no dollar\nhere"


def test_singularity_stage_layout_merges_sections_like_apptainer() -> None:
    steps = [
        BaseImage("debian:12", "build"),
        Shell(("one",)),
        Copy("a", "/a"),
        Environment((("PATH", "/x:$PATH"),), expand=True, build_time=True),
        Shell(("two",)),
    ]
    laid_out = layout_stage([step.render(SINGULARITY) for step in steps], SINGULARITY)
    assert laid_out == [
        "Bootstrap: docker\nFrom: debian:12\nStage: build",
        "%files\n    a /a",
        '%environment\n    export PATH="/x:$PATH"',
        '%post\n    one\n    export PATH="/x:$PATH"\n    two',
    ]
    # Docker keeps one instruction per primitive, in order
    assert len(layout_stage([step.render(DOCKER) for step in steps], DOCKER)) == len(steps)


def _code_strings(path: Path) -> list[str]:
    """String constants in a module's code (docstrings left out: they may name the syntax they avoid)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_only_primitives_write_container_syntax() -> None:
    """Blocks, the recipe and the renderers above them never spell a Dockerfile or Singularity keyword."""
    package = Path(__file__).parents[2] / "builders"
    sources = [*package.glob("blocks/*.py"), package / "recipe.py", package / "containers.py", package / "jobs.py"]
    keywords = ("RUN ", "%post", "%files", "%environment", "%runscript", "ENV ", "COPY ", "FROM ", "Bootstrap:")
    offenders = [
        (path.name, word) for path in sources for text in _code_strings(path) for word in keywords if word in text
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("pattern", "value"),
    [
        ("ENV_NAME", "A\n"),
        ("LABEL_KEY", "org.example\n"),
        ("SAFE_PATH", "model.onnx\n"),
        ("SCHEDULER_TOKEN", "gpu\n"),
        ("WALLTIME", "01:00:00\n"),
    ],
)
def test_render_grammars_refuse_a_trailing_newline(pattern: str, value: str) -> None:
    """``$`` matches before a final newline; the grammars end in ``\\Z`` so a value cannot add a line."""
    grammar = getattr(validate, pattern)
    assert grammar.match(value.rstrip("\n"))
    assert not grammar.match(value)
