"""Every example plans to an image that does the example's job: what the image runs, what it ships, how it installs.

The slow tests in ``realcomp/test_examples.py`` build and run them; these check the rendered files in a second.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from typer.testing import CliRunner

from builders.image_build import prepare_build
from tests.builders.parsers import dockerfile_instructions, spython_recipe
from tests.builders.stubs import bash_syntax_ok, run_script

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
#: example -> the script its image runs (from examples/apps, shipped with application.code)
NAMED = {
    "bert-inference-k8s.yaml": ("/opt/app/apps/infer.py", "--arch", "bert_base"),
    "a64fx-pbs.yaml": ("/opt/app/apps/infer.py", "--arch", "resnet18"),
    "resnet50-gpu-slurm.yaml": ("/opt/app/apps/train.py", "--arch", "resnet50"),
}


def plan(example: str, out: Path) -> dict[str, object]:
    """``appopt plan examples/EXAMPLE -o OUT``; returns deployment.json."""
    from cli.main import app

    result = CliRunner().invoke(app, ["plan", str(EXAMPLES / example), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "deployment.json").read_text())


@pytest.mark.parametrize("example", sorted(NAMED))
def test_named_architecture_examples_run_their_model_not_a_bare_python(example: str, tmp_path: Path) -> None:
    dep = plan(example, tmp_path)
    script, *args = NAMED[example]
    assert dep["run_argv"][:4] == ["python3", script, *args]
    for name in ("models.py", "infer.py", "train.py"):
        assert (tmp_path / "code" / "apps" / name).is_file()
    assert "bare python3" not in (tmp_path / "plan.md").read_text()
    assert json.loads((tmp_path / "plan.json").read_text())["choice"]["framework"] == "pytorch"


def _stages(text: str) -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for instruction, arguments in dockerfile_instructions(text):
        if instruction == "FROM":
            stages.append([])
        stages[-1].append((instruction, arguments))
    return stages


def test_the_pytorch_cpu_build_stage_searches_pytorchs_index(tmp_path: Path) -> None:
    plan("bert-inference-k8s.yaml", tmp_path)
    build, final = _stages((tmp_path / "Dockerfile").read_text())
    (install,) = [args for ins, args in build if ins == "RUN" and "pip install" in args]
    assert install.endswith("--extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0")
    assert not any("PIP_" in args for _, args in final)  # an index is a build-time matter
    # the pin has no local label, so the CPU build (from the index, or from a wheelhouse) satisfies it
    assert "2.13.0+cpu" in SpecifierSet("==2.13.0")


def test_with_a_wheelhouse_the_build_stage_uses_it_alone(tmp_path: Path) -> None:
    plan("bert-inference-k8s.yaml", tmp_path / "out")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    prepared = prepare_build(tmp_path / "out", base_image="localhost/base:py311", wheelhouse=wheels)
    text = prepared.dockerfile.read_text()
    assert "--no-index --find-links /opt/appopt/wheelhouse torch==2.13.0" in text
    assert "download.pytorch.org" not in text
    assert prepared.wheels == ("torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",)


def test_the_a64fx_example_renders_for_arm64_and_validates(tmp_path: Path) -> None:
    dep = plan("a64fx-pbs.yaml", tmp_path)
    assert dep["arch"] == "aarch64" and dep["formats"] == ["singularity"]
    recipe = spython_recipe((tmp_path / "Singularity.def").read_text(), tmp_path)
    assert recipe["build"]["files"] == ["code/apps /opt/app/apps"]
    # PyPI's aarch64 torch up to 2.10.0 is the CPU build (2.11+ is CUDA): no other index, so it builds from PyPI
    assert any(re.search(r"pip install --no-cache-dir --disable-pip-version-check torch==2\.10\.0$", step)
               for step in recipe["build"]["install"])
    assert recipe["final"]["cmd"].startswith("exec python3 /opt/app/apps/infer.py --arch resnet18 ")
    job = (tmp_path / "job.pbs").read_text()
    bash_syntax_ok(job)
    assert "#PBS -l select=4:ncpus=48:mpiprocs=1" in job
    run = run_script(job, tmp_path, container="apptainer singularity", extra_args=("--batches", "1"))
    assert run.returncode == 0, run.stderr
    assert run.argv[run.argv.index("a64fx-resnet18-infer.sif") + 1:] == [*dep["run_argv"], "--batches", "1"]
