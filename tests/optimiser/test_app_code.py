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

from cli.main import app

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
        # the framework's own runner is the subject: no graph compiler, whichever this host's plan would rank first
        + "optimisation:\n  allow: {compilers: [none]}\n"
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


def _run_job_here(out: Path, tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run the plan's ``run.sh`` without a container in a fresh job directory; (that directory, the run)."""
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = {**os.environ, "APPOPT_CONTAINER": "none", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(out / "run.sh")], cwd=job_dir, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    return job_dir, done


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
    job_dir, done = _run_job_here(out, tmp_path)
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


# --- the build-context rule: inside the spec's directory, regular files and directories, a size cap ---------------


def _host_file_cases(tmp_path: Path) -> list[tuple[str, str]]:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "passwd-link").symlink_to("/etc/passwd")
    (tmp_path / "etc-link").symlink_to("/etc")
    (tmp_path / "pkg" / "hostname").symlink_to("/etc/hostname")
    outside = "resolves to {}, outside the spec's directory {}; move it inside, or pass --allow-outside-spec-dir"
    base = tmp_path.resolve()
    return [
        ("[/dev/zero]", "application.code.0: '/dev/zero' " + outside.format("/dev/zero", base)),
        ("[/etc]", "application.code.0: '/etc' " + outside.format("/etc", base)),
        ("['../x/serve.py']", "application.code.0: '../x/serve.py' does not exist"),
        ("[fifo]", "application.code.0: 'fifo' is a fifo, not a regular file or directory"),
        ("[passwd-link]", "application.code.0: 'passwd-link' " + outside.format("/etc/passwd", base)),
        ("[etc-link]", "application.code.0: 'etc-link' " + outside.format("/etc", base)),
        ("[pkg]", "application.code.0: 'pkg/hostname' " + outside.format("/etc/hostname", base)),
    ]


def test_code_from_outside_the_spec_dir_or_not_a_regular_file_is_refused_by_validate_and_plan(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "[serve.py]")
    for code_list, message in _host_file_cases(tmp_path):
        spec.write_text(SPEC.format(code=code_list, command="[python3, serve.py]"))
        for command in ("validate", "plan"):
            out = tmp_path / "out"
            code, _, err = _invoke(command, str(spec), *(["-o", str(out)] if command == "plan" else []))
            assert code == 2, (code_list, command, err)
            assert err.startswith(f"error: {message}"), (code_list, err)
            assert len(err.strip().splitlines()) == 1
            assert not out.exists()


def test_a_symlinked_directory_inside_code_is_refused(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "[pkg]")
    (tmp_path / "pkg" / "loop").symlink_to(tmp_path / "pkg")
    code, _, err = _invoke("validate", str(spec))
    assert code == 2
    assert err == "error: application.code.0: 'pkg/loop' is a symlink to a directory; ship the directory itself\n"


def test_the_flag_allows_files_outside_but_never_devices(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "helper.py").write_text("X = 1\n")
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    spec = _spec(spec_dir, "['../elsewhere/helper.py']")
    assert _invoke("validate", str(spec))[0] == 2
    out = tmp_path / "out"
    code, _, err = _invoke("plan", str(spec), "-o", str(out), "--allow-outside-spec-dir")
    assert code == 0, err
    assert (out / "code" / "helper.py").read_text() == "X = 1\n"
    spec.write_text(SPEC.format(code="[/dev/zero]", command="[python3, serve.py]"))
    code, _, err = _invoke("validate", str(spec), "--allow-outside-spec-dir")
    assert (code, err) == (2, "error: application.code.0: '/dev/zero' is a character device, not a regular file or "
                              "directory\n")


def test_code_over_the_size_cap_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from optimiser import app_files

    monkeypatch.setattr(app_files, "MAX_CODE_BYTES", 1000)
    spec = _spec(tmp_path, "[serve.py, pkg]")
    (tmp_path / "pkg" / "big.bin").write_bytes(b"\0" * 2000)
    for command in ("validate", "plan"):
        code, _, err = _invoke(command, str(spec), *(["-o", str(tmp_path / "out")] if command == "plan" else []))
        assert code == 2
        assert err == "error: application.code: more than 1000 bytes to ship (reached at 'pkg/big.bin'); ship less\n"


# --- application.data.path: relative to the spec, shipped with the plan ----------------------------------------


def test_relative_training_data_is_shipped_and_the_job_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.runtime.training.test_runtime_train_cli import _separable_npz

    spec_dir = tmp_path / "spec"
    (spec_dir / "datasets").mkdir(parents=True)
    _separable_npz(spec_dir / "datasets" / "points.npz")
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", spec_dir / "digits_mlp.onnx")
    (spec_dir / "train.yaml").write_text(TRAIN_SPEC.format(data="data: {path: datasets/points.npz, epochs: 1}"))
    out = tmp_path / "out"
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the spec's directory resolves the path, not the working directory
    code, _, err = _invoke("plan", str(spec_dir / "train.yaml"), "-o", str(out))
    assert code == 0, err
    assert (out / "data" / "points.npz").read_bytes() == (spec_dir / "datasets" / "points.npz").read_bytes()
    deployment = json.loads((out / "deployment.json").read_text())
    assert "data" in deployment["app_files"]
    argv = deployment["run_argv"]
    assert argv[argv.index("--data") + 1] == "/opt/app/data/points.npz"
    job_dir, done = _run_job_here(out, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (job_dir / "trained.onnx").exists()


def test_missing_relative_training_data_is_reported_by_validate_and_plan(tmp_path: Path) -> None:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    (tmp_path / "train.yaml").write_text(TRAIN_SPEC.format(data="data: {path: digits.npz}"))
    for command in ("validate", "plan"):
        code, _, err = _invoke(command, str(tmp_path / "train.yaml"))
        assert code == 2, err
        assert err == (
            f"error: application.data.path: 'digits.npz' does not exist (looked for {tmp_path.resolve()}/digits.npz)\n"
        )


def test_infinite_epochs_are_one_line_not_an_overflow(tmp_path: Path) -> None:
    shutil.copy2(EXAMPLES / "digits_mlp.onnx", tmp_path / "digits_mlp.onnx")
    (tmp_path / "train.yaml").write_text(TRAIN_SPEC.format(data="data: {epochs: .inf}"))
    code, _, err = _invoke("plan", str(tmp_path / "train.yaml"), "-o", str(tmp_path / "out"))
    assert code == 2 and err.startswith("error: application.data.epochs") and len(err.splitlines()) == 1, err
