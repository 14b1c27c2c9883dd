"""Real builds: buildah, podman and the docker SDK (against podman's Docker API service) on a busybox base."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from builders.engines import BuildRequest, DockerEngine, get_engine
from tests.builders.realcomp import servers
from tests.builders.realcomp.conftest import Containers

pytestmark = pytest.mark.slow

MULTI_STAGE = """\
FROM {base} AS build
RUN echo "compiled by the build stage" > /artefact.txt
FROM {base} AS final
COPY --from=build /artefact.txt /opt/app/artefact.txt
LABEL org.opencontainers.image.title="plumbing" io.appopt.route="x/none/y/fp32/NCHW"
ENTRYPOINT ["cat", "/opt/app/artefact.txt"]
"""


def _context(tmp_path: Path, base: str, text: str = MULTI_STAGE) -> Path:
    (tmp_path / "Dockerfile").write_text(text.format(base=base))
    return tmp_path


def _podman_run(image: str, *args: str) -> str:
    proc = subprocess.run(["podman", "run", "--rm", image, *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("engine_name", ["buildah", "podman"])
def test_cli_engines_build_multi_stage_with_labels(engine_name: str, busybox_image: str, tmp_path: Path) -> None:
    ctx = _context(tmp_path, busybox_image)
    engine = get_engine(engine_name)
    lines: list[str] = []
    ref = f"localhost/appopt-test/plumbing-{engine_name}:1"
    result = engine.build(BuildRequest(ctx, ctx / "Dockerfile", ref, log_path=tmp_path / "build.log"), lines.append)

    assert result.image_id.startswith("sha256:")
    assert any("STEP" in line for line in lines), "progress lines reach the callback"
    assert "COMMIT" in (tmp_path / "build.log").read_text()
    labels = engine.labels(ref)
    assert labels["io.appopt.route"] == "x/none/y/fp32/NCHW"
    # An independent reader of the image config agrees.
    inspected = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"containers-storage:{ref}"],
                                          capture_output=True, text=True, check=True).stdout)
    assert inspected["config"]["Labels"]["org.opencontainers.image.title"] == "plumbing"
    assert _podman_run(ref) == "compiled by the build stage\n"


def test_docker_sdk_builds_against_podman_service(busybox_image: str, podman_service: str, tmp_path: Path) -> None:
    ctx = _context(tmp_path, busybox_image)
    engine = get_engine("docker", {"DOCKER_HOST": podman_service, "PATH": "/usr/bin:/bin"})
    assert isinstance(engine, DockerEngine)
    ref = "localhost/appopt-test/plumbing-docker:1"
    lines: list[str] = []
    result = engine.build(BuildRequest(ctx, ctx / "Dockerfile", ref, log_path=tmp_path / "build.log"), lines.append)

    assert result.engine == "docker" and result.image_id
    assert engine.labels(ref)["io.appopt.route"] == "x/none/y/fp32/NCHW"
    assert servers.run_container(engine.client, ref) == b"compiled by the build stage\n"
    layout = engine.export_oci(ref, tmp_path / "oci")
    assert (layout / "index.json").is_file() and (layout / "oci-layout").is_file()


def test_auto_prefers_a_reachable_docker_api_then_buildah(podman_service: str) -> None:
    assert get_engine("auto", {"DOCKER_HOST": podman_service, "PATH": "/usr/bin:/bin"}).name == "docker"
    assert get_engine("auto", {"PATH": "/usr/bin:/bin"}).name == "buildah"


def test_failing_step_names_the_problem_and_the_log(busybox_image: str, tmp_path: Path,
                                                    appopt: Callable[..., Result]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "Dockerfile").write_text(f"FROM {busybox_image}\nRUN echo about to fail && exit 7\n")
    result = appopt("build", out, "--engine", "buildah", "--quiet")
    assert result.exit_code == 4
    error_lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error_lines) == 1
    assert "buildah build failed" in error_lines[0] and "logs/build-buildah.log" in error_lines[0]
    assert "about to fail" in (out / "logs" / "build-buildah.log").read_text()


def test_build_command_records_what_it_built(busybox_image: str, tmp_path: Path, containers: Containers,
                                             appopt: Callable[..., Result]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    _context(out, busybox_image)
    result = appopt("build", out, "--engine", "podman", "--tag", "localhost/appopt-test/recorded:2")
    assert result.exit_code == 0, result.output
    record = json.loads((out / "build.json").read_text())
    assert record["engine"] == "podman" and record["image"] == "localhost/appopt-test/recorded:2"
    assert record["image_id"].startswith("sha256:")
    assert (out / record["log"]).is_file()
    assert "STEP" in result.output  # progress shown while building

