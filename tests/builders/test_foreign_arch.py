"""Assembling an image for a platform the host cannot run: what carries over from the plan's Dockerfile, which
CPU the kernels are built for, and the one-line refusals (the real build is in realcomp/test_arm64.py)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from builders import foreign_arch
from builders.engines import EngineError
from builders.foreign_arch import (
    final_stage_instructions,
    full_platform,
    kernel_cpu,
    needs_assembly,
    plan_final_stage,
)
from builders.foreign_root import ForeignRootError, debian_arch, emulator_for, host_can_run, prepare_root
from builders.image_build import build_plan_image, load_deployment

DOCKERFILE = """\
FROM python:3.11-slim AS build
RUN pip install numpy
COPY runtime /opt/app/runtime
ENV PYTHONPATH="/opt/app"
LABEL stage="build"

FROM python:3.11-slim AS final
# comment
COPY --from=build /opt/app /opt/app
ENV PATH="/opt/appopt/venv/bin:$PATH"
ENV PYTHONPATH="/opt/app"
LABEL org.opencontainers.image.title="digits" \\
    io.appopt.route="appopt-runtime/none/none/fp32/NHWC"
ENTRYPOINT ["python3", "-m", "runtime", "run", "/opt/app/compiled"]
"""


def test_final_stage_keeps_env_labels_and_entrypoint_but_not_the_venv_path() -> None:
    assert final_stage_instructions(DOCKERFILE) == [
        'ENV PYTHONPATH="/opt/app"',
        'LABEL org.opencontainers.image.title="digits" \\\n    io.appopt.route="appopt-runtime/none/none/fp32/NHWC"',
        'ENTRYPOINT ["python3", "-m", "runtime", "run", "/opt/app/compiled"]',
    ]


def test_kernels_are_built_for_the_plans_cpu_never_the_hosts() -> None:
    assert kernel_cpu("A64FX") == ("a64fx", "")
    assert kernel_cpu("graviton3") == ("neoverse-v1", "")
    assert kernel_cpu("") == ("", "armv8-a")


def test_platform_names() -> None:
    assert full_platform("linux/arm64") == "linux/arm64/v8"
    assert full_platform("linux/amd64") == "linux/amd64"
    assert debian_arch("linux/arm64") == debian_arch("aarch64") == "arm64"
    assert emulator_for("arm64") == "qemu-aarch64-static"
    with pytest.raises(ForeignRootError, match="arch 'sparc'"):
        debian_arch("sparc")
    assert not needs_assembly(None)
    assert not needs_assembly("linux/sparc")  # not ours to assemble: the engine's own build reports it


def _plan_dir(tmp_path: Path) -> Path:
    from tests.builders.realcomp.conftest import plan_for
    from tests.builders.realcomp.test_arm64 import ARM_SPEC

    return plan_for(ARM_SPEC, tmp_path)


@pytest.mark.skipif(host_can_run("arm64"), reason="this host runs arm64 code: the ordinary build applies")
def test_base_image_or_wheelhouse_with_an_assembled_build_is_a_one_line_error(tmp_path: Path) -> None:
    out = _plan_dir(tmp_path)
    with pytest.raises(EngineError, match=r"--base-image and --wheelhouse do not apply") as info:
        build_plan_image(out, engine="buildah", platform="linux/arm64", base_image="localhost/base:1")
    assert "\n" not in str(info.value)
    assert not (out / "build.json").exists()


def test_a_singularity_only_plan_keeps_the_labels_env_and_entrypoint_of_its_deployment(tmp_path: Path) -> None:
    """The A64FX example renders only Singularity.def; its arm64 image is assembled all the same."""
    from tests.builders.test_examples import plan

    plan("a64fx-pbs.yaml", tmp_path)
    assert not (tmp_path / "Dockerfile").exists()
    dep = load_deployment(tmp_path)
    assert dep is not None
    carried = plan_final_stage(tmp_path, dep)
    (label,) = [text for text in carried if text.startswith("LABEL")]
    for key, value in dep.labels:
        assert f'{key}="{value}"' in label
    assert carried[-1] == "ENTRYPOINT " + json.dumps(list(dep.run_argv))
    assert any('OMP_NUM_THREADS="48"' in text for text in carried if text.startswith("ENV"))
    # where the plan has a Dockerfile, that file is what carries over
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    assert plan_final_stage(tmp_path, dep) == final_stage_instructions(DOCKERFILE)


def test_the_root_is_copied_without_device_nodes_or_fifos(tmp_path: Path) -> None:
    """A root's ``dev/full`` read as a file never ends (a build once filled the disk with it)."""
    source = tmp_path / "root"
    (source / "dev").mkdir(parents=True)
    (source / "etc").mkdir()
    (source / "etc" / "os-release").write_text("ID=debian\n")
    os.symlink("../etc/os-release", source / "dev" / "link")
    os.mkfifo(source / "dev" / "fifo")
    if os.geteuid() == 0:
        os.mknod(source / "dev" / "full", 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    foreign_arch._link_tree(source, tmp_path / "copy")
    assert sorted(p.name for p in (tmp_path / "copy" / "dev").iterdir()) == ["link"]
    assert (tmp_path / "copy" / "etc" / "os-release").read_text() == "ID=debian\n"


def test_a_requirement_without_a_wheel_fails_in_one_line_before_the_root_is_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "links").mkdir()
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip asks only the empty directory
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "links"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))  # mmdebstrap, had it run first, would be "not found"
    with pytest.raises(ForeignRootError) as info:
        prepare_root(tmp_path / "cache", requirements=["fakemissing==1.0"])
    assert str(info.value).startswith("Python wheels for arm64: wheelhouse: pip download for Python 3.11 on "
                                      "manylinux_2_28_aarch64 failed: ")  # fmt: skip
    assert "fakemissing==1.0" in str(info.value) and "\n" not in str(info.value)
    assert not list((tmp_path / "cache").iterdir())  # nothing half-made left looking finished
