"""A training plan for a named architecture with no command of its own: the image trains the runtime's built-in
definition of it (``python -m runtime train --arch``), on the spec's data or seeded synthetic samples, not a bare
python3. The rendered Dockerfile and job run that entry; the entry itself is run here at a reduced image size."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import yaml
from typer.testing import CliRunner

from cli.main import app
from tests.builders.parsers import dockerfile_instructions

REPO = Path(__file__).resolve().parents[2]


def _plan(spec: dict[str, object], tmp_path: Path) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["plan", str(path), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _readme_example_without_its_command() -> dict[str, object]:
    spec = yaml.safe_load((REPO / "examples" / "resnet50-gpu-slurm.yaml").read_text())
    del spec["application"]["command"]
    del spec["application"]["code"]
    return dict(spec)


def test_the_resnet50_example_without_a_command_trains_the_built_in_resnet50(tmp_path: Path) -> None:
    out = _plan(_readme_example_without_its_command(), tmp_path)
    deployment = json.loads((out / "deployment.json").read_text())
    choice = json.loads((out / "plan.json").read_text())["choice"]
    assert choice["framework"] == "pytorch"
    engine = "torch-inductor" if choice["compiler"] == "inductor" else "torch"  # the route's, as it was priced
    argv = [
        "python3", "-m", "runtime", "train", "--arch", "resnet50", "--image-size", "224", "--synthetic", "1024",
        "-o", "trained.onnx", "--batch-size", "256", "--precision", choice["precision"], "--epochs", "90",
        "--checkpoint", "checkpoints", "--resume", "--engine", engine, "--layout", choice["layout"],
    ]  # fmt: skip
    assert deployment["run_argv"] == argv
    assert "runtime" in deployment["app_files"]  # the trainer and the architecture's definition ship in the image
    assert {"onnx", "numpy"} <= {p.split("==")[0] for p in deployment["pip_packages"]}
    assert deployment["base_image"].startswith("nvcr.io/nvidia/pytorch:")  # torch comes with the GPU base
    dockerfile = (out / "Dockerfile").read_text()
    entry = [json.loads(args) for op, args in dockerfile_instructions(dockerfile) if op == "ENTRYPOINT"]
    assert entry[-1] == argv
    assert "python3 -m runtime train --arch resnet50 --image-size 224" in (out / "job.slurm").read_text()
    plan_md = (out / "plan.md").read_text()
    assert "bare python3" not in plan_md
    assert "1024 seeded synthetic samples" in plan_md


def test_a_data_file_replaces_the_synthetic_samples(tmp_path: Path) -> None:
    spec = _readme_example_without_its_command()
    spec["application"]["data"] = {"path": "/scratch/imagenet.npz", "epochs": 90}  # type: ignore[index]
    deployment = json.loads((_plan(spec, tmp_path) / "deployment.json").read_text())
    argv = deployment["run_argv"]
    assert argv[4:10] == ["--arch", "resnet50", "--image-size", "224", "--data", "/scratch/imagenet.npz"]
    assert "--synthetic" not in argv


@pytest.mark.parametrize(("architecture", "size"), [("mobilenet_v2", "224"), ("bert_base", "128")])
def test_mobilenet_and_bert_plans_train_the_built_in_definition(architecture: str, size: str, tmp_path: Path) -> None:
    """MobileNetV2 at its catalog resolution, BERT-Base at its catalog sequence length (``--image-size`` is the
    length for a token model), on synthetic samples of the right kind."""
    spec = _readme_example_without_its_command()
    spec["application"]["model"] = {"architecture": architecture}  # type: ignore[index]
    out = _plan(spec, tmp_path)
    argv = json.loads((out / "deployment.json").read_text())["run_argv"]
    assert argv[4:10] == ["--arch", architecture, "--image-size", size, "--synthetic", "1024"]
    assert "bare python3" not in (out / "plan.md").read_text()


def test_an_architecture_the_runtime_does_not_build_still_says_bare_python3(tmp_path: Path) -> None:
    spec = _readme_example_without_its_command()
    spec["application"]["model"] = {"architecture": "vgg16"}  # type: ignore[index]
    out = _plan(spec, tmp_path)
    assert json.loads((out / "deployment.json").read_text())["run_argv"] == ["python3"]
    assert "bare python3" in (out / "plan.md").read_text()


def test_the_rendered_entry_trains(tmp_path: Path) -> None:
    """The plan's own argv, run from the job directory with the shipped runtime; only the image size is overridden
    (argparse keeps the last value) so ResNet-18 trains here in seconds."""
    pytest.importorskip("torch", reason="torch: extra not installed")  # the plan's entry trains with --engine torch
    spec = {
        "name": "rn18-train",
        "application": {
            "type": "training",
            "model": {"architecture": "resnet18"},
            "batch_size": 2,
            "framework": "pytorch",
            "data": {"epochs": 1},
        },
        "target": {"cpu": {"arch": "x86_64", "model": "local"}, "scheduler": "none"},
        "container": {"formats": ["docker"]},
    }
    argv = json.loads((_plan(spec, tmp_path) / "deployment.json").read_text())["run_argv"]
    assert argv[:6] == ["python3", "-m", "runtime", "train", "--arch", "resnet18"]
    work = tmp_path / "job"
    work.mkdir()
    result = subprocess.run(
        [sys.executable, *argv[1:], "--image-size", "32", "--threads", "1"],
        cwd=work,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "epoch 1/1" in result.stdout
    onnx.checker.check_model(onnx.load(str(work / "trained.onnx")))
    assert (work / "checkpoints").is_dir()
