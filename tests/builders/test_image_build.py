"""Build preparation without an engine: engine choice and its errors, deployment.json, re-rendering with overrides,
the Charliecloud dialect, wheel platforms and the Apptainer not-available result."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from builders import apptainer, charliecloud
from builders.deployment import Deployment
from builders.engines import EngineError, get_engine, validate_platform
from builders.image_build import load_deployment, prepare_build, rebase_dockerfile, save_deployment
from builders.render import render_artifacts
from builders.wheelhouse import python_version_of, wheel_platforms
from cli import build_cmds

DEP = Deployment(
    app_name="demo",
    base_image="python:3.11-slim",
    pip_packages=("numpy==2.4.6",),
    model_file="model.onnx",
    compile_argv=("python3", "-m", "runtime", "compile", "/opt/app/model.onnx", "-o", "/opt/app/compiled"),
    run_argv=("python3", "-m", "runtime", "run", "/opt/app/compiled"),
    env=(("OMP_NUM_THREADS", "2"),),
    labels=(("io.appopt.route", "appopt-runtime/none/openblas/fp32/NCHW"),),
    app_files=("runtime",),
    scheduler="slurm",
)


def _app() -> typer.Typer:
    app = typer.Typer()
    app.callback()(lambda: None)
    build_cmds.register(app)
    return app


@pytest.fixture
def out(tmp_path: Path) -> Path:
    render_artifacts(DEP, tmp_path)
    save_deployment(DEP, tmp_path)
    return tmp_path


def test_deployment_round_trips_through_json(out: Path) -> None:
    assert load_deployment(out) == DEP


def test_unknown_deployment_field_is_one_line(out: Path) -> None:
    text = (out / "deployment.json").read_text().replace('"app_name"', '"app_nmae"')
    (out / "deployment.json").write_text(text)
    with pytest.raises(EngineError, match="unknown field 'app_nmae'"):
        load_deployment(out)


def test_no_overrides_builds_the_rendered_dockerfile(out: Path) -> None:
    assert prepare_build(out).dockerfile == out / "Dockerfile"


def test_overrides_re_render_from_the_deployment(out: Path, tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"not really a wheel")
    prepared = prepare_build(out, base_image="localhost/base:py311", wheelhouse=wheels)
    text = prepared.dockerfile.read_text()
    assert prepared.dockerfile == out / "build" / "Dockerfile"
    assert text.count("FROM localhost/base:py311 AS") == 2 and "python:3.11-slim" not in text.split("LABEL")[0]
    assert "--no-index" in text and "COPY wheelhouse " in text
    assert prepared.wheels == ("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl",)
    assert (out / "wheelhouse" / prepared.wheels[0]).is_file()
    assert (out / "Dockerfile").read_text().count("FROM python:3.11-slim") == 2  # the plan's file is untouched


def test_without_deployment_json_only_the_base_can_change(out: Path, tmp_path: Path) -> None:
    (out / "deployment.json").unlink()
    assert "FROM other/base:1 AS build" in prepare_build(out, base_image="other/base:1").dockerfile.read_text()
    with pytest.raises(EngineError, match="--wheelhouse cannot re-render"):
        prepare_build(out, wheelhouse=tmp_path)


def test_rebase_keeps_references_to_earlier_stages() -> None:
    text = "FROM a:1 AS build\nFROM --platform=linux/arm64 b:2\nFROM build AS test\n"
    assert rebase_dockerfile(text, "c:3") == "FROM c:3 AS build\nFROM --platform=linux/arm64 c:3\nFROM build AS test\n"


def test_no_engine_names_what_to_install(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as err:
        get_engine("auto", {"PATH": str(tmp_path)})
    assert len(err.value.lines) == 1
    assert "no container engine found" in err.value.lines[0] and "install buildah" in err.value.lines[0]


def test_unreachable_docker_host_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as err:
        get_engine("docker", {"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock", "PATH": str(tmp_path)})
    assert len(err.value.lines) == 1 and "cannot reach unix://" in err.value.lines[0]


@pytest.mark.parametrize("platform", ["amd64", "linux", "Linux/AMD64", "linux/amd64; rm -rf /"])
def test_bad_platforms_are_refused(platform: str) -> None:
    with pytest.raises(EngineError, match="expected os/arch"):
        validate_platform(platform)


def test_build_command_error_is_one_line_with_exit_4(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(out / "no-bin"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    result = CliRunner().invoke(_app(), ["build", str(out), "--engine", "buildah"])
    assert result.exit_code == 4
    assert result.output.strip().splitlines() == ["error: --engine buildah: buildah is not installed "
                                                  "(apt-get install buildah)"]


def test_charliecloud_dialect_resolves_modifiers_per_stage() -> None:
    text = ('FROM a AS build\nENV P="/x${P:+:$P}"\nENV Q=1 \\\n    P="/y${P:+:$P}"\n'
            'FROM b\nENV P="/z${P:+:$P}" R="${Q:-none}"\n')
    assert charliecloud.charliecloud_dockerfile(text) == (
        'FROM a AS build\nENV P="/x"\nENV Q=1 \\\n    P="/y:$P"\nFROM b\nENV P="/z" R="none"\n'
    )


def test_charliecloud_moves_copies_out_of_the_bound_tmp() -> None:
    text = ('FROM a\nCOPY wheels /tmp/wheels\nRUN ["pip", "-f", "/tmp/wheels"]\nRUN rm -rf /tmp/wheels /tmp/other\n'
            "FROM b\nRUN ls /tmp/wheels\n")
    assert charliecloud.charliecloud_dockerfile(text) == (
        'FROM a\nCOPY wheels /var/tmp/wheels\nRUN ["pip", "-f", "/var/tmp/wheels"]\n'
        "RUN rm -rf /var/tmp/wheels /tmp/other\nFROM b\nRUN ls /tmp/wheels\n"
    )


def test_charliecloud_command_comes_from_the_last_stage() -> None:
    text = 'FROM a\nENTRYPOINT ["x"]\nFROM b\nENTRYPOINT ["python3", "-m", "runtime"]\nCMD ["run"]\n'
    assert charliecloud.image_command(text) == ["python3", "-m", "runtime", "run"]


def test_wheel_platform_tags_follow_the_image() -> None:
    assert wheel_platforms("arm64") == ["manylinux_2_28_aarch64", "manylinux2014_aarch64"]
    assert python_version_of("localhost/debian:bookworm") == "3.11"
    assert python_version_of("python:3.12-slim") == "3.12"


def test_apptainer_missing_is_a_result_not_a_crash(out: Path, tmp_path: Path) -> None:
    result = apptainer.build_sif(out, env={"PATH": str(tmp_path)})
    assert dataclasses.astuple(result)[:2] == (False, "no apptainer/singularity binary on this machine")


_OFFLINE = ('Error: creating build container: initializing source docker://python:3.11-slim: pinging container '
            'registry registry-1.docker.io: Get "https://registry-1.docker.io/v2/": dial tcp: no such host')


def _fake_buildah(out: Path, message: str) -> Path:
    """A ``buildah`` on PATH that fails the way buildah 1.28 does without a network."""
    bin_dir = out / "fake-bin"
    bin_dir.mkdir()
    (bin_dir / "buildah").write_text(f"#!/bin/sh\necho 'STEP 1/9: FROM python:3.11-slim AS build'\necho '{message}'\n"
                                     "exit 125\n")
    (bin_dir / "buildah").chmod(0o755)
    return bin_dir


def test_a_base_image_that_cannot_be_pulled_suggests_base_image(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_buildah(out, _OFFLINE)))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    result = CliRunner().invoke(_app(), ["build", str(out), "--engine", "buildah", "--quiet"])
    assert result.exit_code == 4
    lines = result.output.strip().splitlines()
    assert lines[0].startswith("error: buildah build failed (125): Error: creating build container")
    assert lines[-1].startswith("error: the base image (python:3.11-slim) could not be pulled (offline, or no "
                                "registry reachable): build on one this engine already has with --base-image IMAGE")


def test_other_build_failures_get_no_base_image_hint(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_buildah(out, "error: pip install failed: No matching distribution")))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    result = CliRunner().invoke(_app(), ["build", str(out), "--engine", "buildah", "--quiet"])
    assert result.exit_code == 4 and "--base-image" not in result.output


_COMMIT_FAILED = ("Error: committing container for step {Env:[PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:"
                  "/sbin:/bin] Command:copy Args:[/opt/appopt/venv /opt/appopt/venv] Flags:[--from=build] Attrs:map[] "
                  "Message:COPY --from=build /opt/appopt/venv /opt/appopt/venv Original:COPY --from=build "
                  "/opt/appopt/venv /opt/appopt/venv}: copying layers and metadata for container: writing blob: "
                  "storing blob to file: write /var/tmp/storage/blob: no space left on device")


def test_a_failed_commit_keeps_its_cause_not_the_steps_dump(out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(_fake_buildah(out, _COMMIT_FAILED)))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    result = CliRunner().invoke(_app(), ["build", str(out), "--engine", "buildah", "--quiet"])
    assert result.exit_code == 4
    first = result.output.strip().splitlines()[0]
    assert first.startswith("error: buildah build failed (125): Error: committing container for step {…}: copying")
    assert "no space left on device; full log: " in first and "Env:[" not in first
