"""The scripts pick the container runtime that is installed, in an order APPOPT_CONTAINER overrides, and say which;
without one they find a Python that has the image's packages, or stop with a line naming them."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from builders.container_choice import python_modules
from builders.jobs import render_job
from tests.builders.cases import cpu_slurm, local_plain
from tests.builders.stubs import ScriptRun, run_script


def _bare_path(tmp_path: Path, *extra: Path) -> str:
    """PATH of the stubs, ``extra`` dirs and the few tools the scripts use (no podman, ch-run or python of here)."""
    tools = tmp_path / "sys-bin"
    tools.mkdir(exist_ok=True)
    for tool in ("bash", "rm", "dirname", "id"):
        found = shutil.which(tool)
        assert found, tool
        if not (tools / tool).exists():
            (tools / tool).symlink_to(found)
    return ":".join([str(tmp_path / "stub-bin"), *map(str, extra), str(tools)])


def _run(text: str, tmp_path: Path, *, remove: tuple[str, ...] = (), container: str | None = None,
         env: dict[str, str] | None = None, path: tuple[Path, ...] = ()) -> ScriptRun:
    script = text
    for name in remove:  # a runtime that is not installed: its stub is deleted before the script runs
        script = script.replace("set -euo pipefail\n", f"set -euo pipefail\nrm -f {tmp_path}/stub-bin/{name}\n", 1)
    return run_script(script, tmp_path, container=container,
                      extra_env={"PATH": _bare_path(tmp_path, *path), **(env or {})})


def test_run_sh_takes_the_first_installed_runtime_and_says_which(tmp_path: Path) -> None:
    text = render_job(local_plain())[1]
    run = _run(text, tmp_path)  # stubs: docker, singularity; no podman on this PATH
    assert run.returncode == 0, run.stderr
    assert "run.sh: container runtime: docker (the first found of: podman docker" in run.stderr
    assert run.argv[:2] == ["run", "--rm"]
    again = _run(text, tmp_path, remove=("docker",))
    assert again.returncode == 0, again.stderr
    assert "run.sh: container runtime: singularity" in again.stderr and again.argv[0] == "exec"


def test_a_list_in_appopt_container_is_an_order_of_preference(tmp_path: Path) -> None:
    run = _run(render_job(cpu_slurm())[1], tmp_path, container="podman,charliecloud singularity")
    assert run.returncode == 0, run.stderr
    assert "job: container runtime: singularity" in run.stderr and run.argv[0] == "exec"


def test_a_named_runtime_that_is_missing_is_one_line(tmp_path: Path) -> None:
    run = _run(render_job(cpu_slurm())[1], tmp_path, container="podman")
    assert run.returncode == 3 and run.argv == []
    assert run.stderr.strip().splitlines() == [
        "job: none of 'podman' is installed here (docker needs a reachable daemon, charliecloud ch-run): install "
        "one, or set APPOPT_CONTAINER=none to run without a container"
    ]


def test_with_no_runtime_installed_the_job_runs_without_one(tmp_path: Path) -> None:
    dep = dataclasses.replace(cpu_slurm(), run_argv=("singularity", "direct"))  # the stub records the argv
    run = _run(render_job(dep)[1], tmp_path, remove=("docker",),
               env={"APPOPT_CONTAINER": "apptainer podman charliecloud none"})
    assert run.returncode == 0, run.stderr
    assert "job: container runtime: none" in run.stderr and run.argv == ["direct"]


_FAILING_PYTHON = "#!/bin/bash\n[ \"${1:-}\" = -c ] && { echo 'ModuleNotFoundError: onnx' >&2; exit 1; }\necho ran\n"
_GOOD_PYTHON = "#!/bin/bash\n[ \"${1:-}\" = -c ] && exit 0\nprintf '%s\\0' \"$@\" > \"$ARGV_OUT\"\n"


def _python(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / "pythons" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("dep", [local_plain(), cpu_slurm()], ids=["run.sh", "job.slurm"])
def test_without_a_container_a_python_lacking_the_packages_is_a_line_not_a_traceback(dep: object,
                                                                                      tmp_path: Path) -> None:
    dep = dataclasses.replace(dep, run_argv=("python3", "/opt/app/serve.py"),  # type: ignore[type-var]
                              pip_packages=("numpy==2.4.6", "onnx==1.23.2"))
    python3 = _python(tmp_path, "python3", _FAILING_PYTHON)
    run = _run(render_job(dep)[1], tmp_path, container="none", path=(python3.parent,))
    assert run.returncode == 3, run.stderr
    (line,) = [ln for ln in run.stderr.splitlines() if "container runtime" not in ln]
    assert "needs a Python that imports numpy, onnx; none of" in line
    assert "pip install numpy==2.4.6 onnx==1.23.2 into one and set APPOPT_PYTHON=" in line
    assert "Traceback" not in run.stderr and "ran" not in run.stderr


def test_without_a_container_appopt_python_names_the_python_that_runs_it(tmp_path: Path) -> None:
    dep = dataclasses.replace(local_plain(), run_argv=("python3", "/opt/app/serve.py", "--fast"),
                              pip_packages=("numpy==2.4.6",))
    _python(tmp_path, "python3", _FAILING_PYTHON)
    good = _python(tmp_path, "venv-python", _GOOD_PYTHON)
    run = _run(render_job(dep)[1], tmp_path, container="none", path=(good.parent,), env={"APPOPT_PYTHON": str(good)})
    assert run.returncode == 0, run.stderr
    assert f"run.sh: python: {good}" in run.stderr
    assert run.argv == [f"{tmp_path}/serve.py", "--fast"]  # the plan directory stands in for /opt/app


def test_python_modules_are_the_import_names_of_the_requirements() -> None:
    assert python_modules(("torch==2.13.0", "apache-tvm==0.27.0.post1", "mkl==2024.1.0")) == ("torch", "tvm")
    assert python_modules(("bad;name==1", "x$(id)==1")) == ("bad",)  # never anything but an identifier


def test_a_batch_job_refuses_docker_with_the_runtimes_it_can_use(tmp_path: Path) -> None:
    run = _run(render_job(cpu_slurm())[1], tmp_path, container="docker")  # the docker stub answers `version`
    assert run.returncode == 2 and run.argv[0] == "version"  # probed for a daemon, never run
    assert "job: APPOPT_CONTAINER: docker cannot run this job's image" in run.stderr
    assert "use apptainer, singularity, podman, charliecloud or none" in run.stderr
