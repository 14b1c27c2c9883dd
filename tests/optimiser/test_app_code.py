"""``application.code``: the application's own files ship in the image and its command runs them from there."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from optimiser.cli import app

EXAMPLES = Path(__file__).parents[2] / "examples"

SPEC = """\
name: digits-app
application:
  type: inference
  model: {{onnx: digits_mlp.onnx}}
  framework: appopt-runtime
  command: {command}
  code: {code}
target:
  cpu: {{arch: x86_64, model: local}}
  scheduler: slurm
container:
  formats: [docker, singularity]
"""


def _spec(tmp_path: Path, code: str, command: str = "[python3, serve.py, --threads, '2']") -> Path:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    (tmp_path / "serve.py").write_text("print('serving')\n")
    (tmp_path / "pkg").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "__pycache__").mkdir(exist_ok=True)
    (tmp_path / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")
    path = tmp_path / "app.yaml"
    path.write_text(SPEC.format(code=code, command=command))
    return path


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_code_is_copied_into_the_image_and_the_command_runs_it_from_the_app_dir(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = _invoke("plan", str(_spec(tmp_path, "[serve.py, pkg]")), "-o", str(out))
    assert code == 0, err
    assert (out / "code" / "serve.py").read_text() == "print('serving')\n"
    assert (out / "code" / "pkg" / "__init__.py").exists()
    assert not (out / "code" / "pkg" / "__pycache__").exists()
    deployment = json.loads((out / "deployment.json").read_text())
    assert deployment["app_files"] == ["runtime", "code/serve.py", "code/pkg"]
    # jobs run in the submission directory, so the script is named by its place in the image
    assert deployment["run_argv"] == ["python3", "/opt/app/serve.py", "--threads", "2"]
    dockerfile = (out / "Dockerfile").read_text()
    assert "COPY code/serve.py /opt/app/serve.py" in dockerfile
    assert "COPY code/pkg /opt/app/pkg" in dockerfile
    assert 'ENTRYPOINT ["python3", "/opt/app/serve.py", "--threads", "2"]' in dockerfile
    assert "code/serve.py /opt/app/serve.py" in (out / "Singularity.def").read_text()
    assert "/opt/app/serve.py" in (out / "job.slurm").read_text()
    assert "does not ship" not in (out / "plan.md").read_text()


def test_replanning_replaces_the_earlier_copy(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _invoke("plan", str(_spec(tmp_path, "[serve.py, pkg]")), "-o", str(out))[0] == 0
    assert _invoke("plan", str(_spec(tmp_path, "[serve.py]")), "-o", str(out))[0] == 0
    assert sorted(p.name for p in (out / "code").iterdir()) == ["serve.py"]


def test_a_script_the_command_runs_but_the_spec_does_not_ship_is_noted(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = _invoke("plan", str(_spec(tmp_path, "[]", "[python3, train.py]")), "-o", str(out))
    assert code == 0, err
    note = "application.command runs train.py, which application.code does not ship"
    assert note in (out / "plan.md").read_text()
    assert f"note: {note}" in err  # on the terminal too, once
    assert err.count(note) == 1 and (out / "plan.md").read_text().count(note) == 1


@pytest.mark.parametrize(
    ("code_list", "message"),
    [
        ("[missing.py]", "error: application.code.0: 'missing.py' does not exist (looked for "),
        ("[serve.py, other/serve.py]", "error: application.code: 'serve.py' and 'other/serve.py' would"),
        ("[serve.py, runtime]", "error: application.code.1: 'runtime': its name must use letters"),
        ("['bad name.py']", "error: application.code.0: 'bad name.py': its name must use letters"),
    ],
)
def test_bad_code_entries_are_one_line_errors_naming_the_entry(tmp_path: Path, code_list: str, message: str) -> None:
    spec = _spec(tmp_path, code_list)
    for command in ("validate", "plan"):
        code, out, err = _invoke(command, str(spec), *(["-o", str(tmp_path / "out")] if command == "plan" else []))
        assert code == 2, (command, out, err)
        assert err.startswith(message), err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing written for a bad spec


def _framework_spec(tmp_path: Path, framework: str, command: str = "") -> Path:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    path = tmp_path / "fw.yaml"
    path.write_text(
        f"name: fw\napplication:\n  type: inference\n  model: {{onnx: digits_mlp.onnx}}\n  framework: {framework}\n"
        + (f"  command: {command}\n" if command else "")
        + "target:\n  cpu: {arch: x86_64, model: local}\n  scheduler: none\n"
    )
    return path


def test_an_onnxruntime_plan_runs_the_model_with_the_shipped_runner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, _, err = _invoke("plan", str(_framework_spec(tmp_path, "onnxruntime")), "-o", str(out))
    assert code == 0, err
    deployment = json.loads((out / "deployment.json").read_text())
    assert deployment["run_argv"][:6] == ["python3", "-m", "runtime", "run", "/opt/app/model.onnx", "--engine"]
    assert deployment["run_argv"][6] == "onnxruntime"
    assert deployment["app_files"] == ["runtime"] and (out / "runtime" / "engines.py").exists()
    # the runner's own imports come from the catalog's appopt-runtime entry, next to onnxruntime itself
    names = [p.split("==")[0] for p in deployment["pip_packages"]]
    assert names == ["onnxruntime", "numpy", "onnx"]
    assert "bare python3" not in (out / "plan.md").read_text()


def test_a_command_of_its_own_needs_no_runner(tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = _framework_spec(tmp_path, "onnxruntime", "[python3, -c, 'print(1)']")
    assert _invoke("plan", str(spec), "-o", str(out))[0] == 0
    deployment = json.loads((out / "deployment.json").read_text())
    assert deployment["run_argv"] == ["python3", "-c", "print(1)"]
    assert deployment["app_files"] == [] and not (out / "runtime").exists()
    assert [p.split("==")[0] for p in deployment["pip_packages"]] == ["onnxruntime"]


def test_a_model_appopt_cannot_run_itself_says_the_image_needs_a_command(tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = tmp_path / "arch.yaml"
    spec.write_text(
        "name: arch\napplication:\n  type: inference\n  model: {architecture: resnet50}\n"
        "target:\n  cpu: {arch: x86_64, model: local}\n  scheduler: none\n"
    )
    code, _, err = _invoke("plan", str(spec), "-o", str(out))
    assert code == 0, err
    assert json.loads((out / "deployment.json").read_text())["run_argv"] == ["python3"]
    assert "the image starts a bare python3" in (out / "plan.md").read_text()


TRAIN_SPEC = """\
name: digits-train
application:
  type: training
  model: {{onnx: digits_mlp.onnx}}
  batch_size: 16
  framework: appopt-runtime
  {data}
target:
  cpu: {{arch: x86_64, model: local}}
  scheduler: none
"""


def test_a_training_plan_trains_and_its_job_runs_without_a_container(tmp_path: Path) -> None:
    from tests.runtime.training.test_runtime_train_cli import _separable_npz

    data = _separable_npz(tmp_path / "data.npz")
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    (tmp_path / "train.yaml").write_text(TRAIN_SPEC.format(data=f"data: {{path: {data}, epochs: 2}}"))
    out = tmp_path / "out"
    code, _, err = _invoke("plan", str(tmp_path / "train.yaml"), "-o", str(out))
    assert code == 0, err
    deployment = json.loads((out / "deployment.json").read_text())
    assert deployment["compile_argv"] is None  # nothing to compile for inference
    assert deployment["run_argv"] == [
        "python3", "-m", "runtime", "train", "/opt/app/model.onnx", "--data", str(data), "-o", "trained.onnx",
        "--batch-size", "16", "--precision", "fp32", "--epochs", "2", "--checkpoint", "checkpoints", "--resume",
    ]
    # the job itself, here without a container: it trains in its working directory
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = {**os.environ, "APPOPT_CONTAINER": "none", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(out / "run.sh")], cwd=job_dir, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert "epoch 2/2" in done.stdout and (job_dir / "trained.onnx").exists()
    assert (job_dir / "checkpoints").is_dir()


@pytest.mark.parametrize(
    ("data", "note"),
    [
        ("", "the image trains with `python -m runtime train`, which needs the data: set application.data.path"),
        ("data: {path: /scratch/imagenet}", "application.data.path '/scratch/imagenet': appopt's runtime trains from"),
    ],
)
def test_a_training_plan_without_usable_data_says_so(tmp_path: Path, data: str, note: str) -> None:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    (tmp_path / "train.yaml").write_text(TRAIN_SPEC.format(data=data))
    out = tmp_path / "out"
    code, _, err = _invoke("plan", str(tmp_path / "train.yaml"), "-o", str(out))
    assert code == 0, err
    assert note in (out / "plan.md").read_text()
