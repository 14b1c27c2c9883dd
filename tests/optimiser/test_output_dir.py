"""``appopt plan -o DIR``: one directory, one plan. Concurrent planners, stale outputs, foreign files, file modes,
and the spec-digest checks of build, push and submit."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from optimiser import artifacts, output_dir

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

SPEC = """\
name: {name}
application:
  type: inference
  model: {{onnx: digits_mlp.onnx}}
  framework: appopt-runtime
  command: [python3, {script}]
  code: [{script}]
target:
  cpu: {{arch: x86_64, model: local}}
  scheduler: {scheduler}
container:
  formats: {formats}
"""


def _spec(directory: Path, name: str, scheduler: str = "slurm", formats: str = "[docker, singularity]") -> Path:
    """A spec named ``name`` that ships ``{name}.py`` (so its code/ tells which spec a directory came from)."""
    directory.mkdir(parents=True, exist_ok=True)
    if not (directory / "digits_mlp.onnx").exists():
        shutil.copy2(EXAMPLES / "digits_mlp.onnx", directory / "digits_mlp.onnx")
    (directory / f"{name}.py").write_text(f"print({name!r})\n")
    path = directory / f"{name}.yaml"
    path.write_text(SPEC.format(name=name, script=f"{name}.py", scheduler=scheduler, formats=formats))
    return path


def _errors(stderr: str) -> str:
    """stderr without ``note:`` lines (an uncalibrated host is told about ``appopt calibrate`` on every plan)."""
    return "".join(line for line in stderr.splitlines(keepends=True) if not line.startswith("note: "))


def _plan(spec: Path, out: Path, *flags: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["plan", str(spec), "-o", str(out), *flags])
    return result.exit_code, _errors(result.stderr)


def _assert_one_plan(out: Path) -> str:
    """Every file in ``out`` comes from one spec; return its name."""
    name = json.loads((out / "plan.json").read_text())["name"]
    assert json.loads((out / "deployment.json").read_text())["app_name"] == name
    assert sorted(p.name for p in (out / "code").iterdir()) == [f"{name}.py"]
    assert f"/opt/app/{name}.py" in (out / "Dockerfile").read_text()
    assert (out / "runtime" / "__init__.py").exists() and (out / "runtime" / "engines.py").exists()
    assert not [p for p in out.iterdir() if p.name.startswith((".appopt-new-", ".appopt-old-"))]
    return name


def test_replanning_clears_what_the_previous_plan_and_its_builds_wrote(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _plan(_spec(tmp_path, "alpha"), out)[0] == 0
    assert (out / "job.slurm").exists() and (out / "Singularity.def").exists()
    (out / "build.json").write_text("{}\n")  # what `appopt build`, `push` and a charliecloud build leave
    (out / "push.json").write_text("{}\n")
    (out / "logs").mkdir()
    (out / "alpha.sqfs").write_bytes(b"img")
    code, err = _plan(_spec(tmp_path, "beta", scheduler="none", formats="[docker]"), out)
    assert code == 0, err
    assert _assert_one_plan(out) == "beta"
    for stale in ("job.slurm", "Singularity.def", "build.json", "push.json", "logs", "alpha.sqfs"):
        assert not (out / stale).exists(), stale


def test_a_directory_with_files_appopt_did_not_write_is_refused_unless_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    spec = _spec(tmp_path, "alpha")
    code, err = _plan(spec, out)
    assert code == 1
    assert err.startswith(f"error: {out}: holds files appopt did not write (notes.txt); ") and "--force" in err
    assert len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == ["notes.txt"]
    code, err = _plan(spec, out, "--force")
    assert code == 0, err
    assert _assert_one_plan(out) == "alpha" and (out / "notes.txt").read_text() == "mine\n"
    # a job's output left in the directory later is foreign too: the next plan asks before writing beside it
    (out / "slurm-12.out").write_text("log\n")
    assert _plan(spec, out)[0] == 1


def test_plan_files_get_the_umask_mode(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "alpha")
    old = os.umask(0o002)
    try:
        assert _plan(spec, tmp_path / "out")[0] == 0
    finally:
        os.umask(old)
    for name in ("plan.json", "plan.md", "deployment.json", ".appopt-files"):
        assert stat.S_IMODE((tmp_path / "out" / name).stat().st_mode) == 0o664, name


def test_a_failed_plan_leaves_the_directory_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "out"
    assert _plan(_spec(tmp_path, "alpha"), out)[0] == 0
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def broken(*_args: object) -> list[Path]:
        raise OSError("disk full")

    monkeypatch.setattr(artifacts, "render_artifacts", broken)
    with pytest.raises(output_dir.OutputDirError, match=f"^{out}: cannot write the plan: disk full$"):
        artifacts.write_plan_outputs(_plan_of(_spec(tmp_path, "beta")), out)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


def _plan_of(spec: Path) -> artifacts.Plan:
    from optimiser.planner import make_plan
    from optimiser.spec import load_spec

    return make_plan(load_spec(spec))


def test_a_second_planner_refuses_while_the_first_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Deterministic interleaving: planner A stops inside the directory's lock; planner B refuses in one line and
    writes nothing; A then finishes a whole plan. (Before the lock, B wrote over A's half-written directory.)"""
    out = tmp_path / "out"
    plan_a, spec_b = _plan_of(_spec(tmp_path, "alpha")), _spec(tmp_path, "beta")
    inside, release = threading.Event(), threading.Event()
    real = artifacts._write_plan_files

    def slow(*args: object) -> list[Path]:
        written = real(*args)  # type: ignore[arg-type]
        inside.set()
        assert release.wait(60)
        return written

    monkeypatch.setattr(artifacts, "_write_plan_files", slow)
    first = threading.Thread(target=artifacts.write_plan_outputs, args=(plan_a, out))
    first.start()
    try:
        assert inside.wait(60)
        monkeypatch.setattr(artifacts, "_write_plan_files", real)
        code, err = _plan(spec_b, out)
        assert code == 1
        busy = "another appopt plan is writing this directory now; run again when it has finished"
        assert err == f"error: {out}: {busy}\n"
    finally:
        release.set()
        first.join(60)
    assert _assert_one_plan(out) == "alpha"


_RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from cli.main import app
    go = Path(sys.argv[1])
    while not go.exists():
        time.sleep(0.001)
    sys.argv = ["appopt", "plan", sys.argv[2], "-o", sys.argv[3]]
    app()
    """
)


@pytest.mark.slow
def test_two_appopt_plans_racing_into_one_directory_never_mix_it(tmp_path: Path) -> None:
    """Two real `appopt plan -o DIR` processes started together, several rounds: each exits 0 or refuses in one line,
    no traceback, and the directory always holds exactly one spec's plan."""
    specs = [_spec(tmp_path / "specs", "alpha"), _spec(tmp_path / "specs", "beta")]
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for round_number in range(3):
        go = tmp_path / f"go{round_number}"
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", _RACER, str(go), str(spec), str(out)],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            for spec in (specs if round_number % 2 else specs[::-1])
        ]
        time.sleep(0.5)
        go.touch()
        results = [(proc.wait(120), _errors(proc.stderr.read()) if proc.stderr else "") for proc in procs]
        for code, err in results:
            assert "Traceback" not in err, err
            errors = [line for line in err.splitlines() if line.startswith("error:")]
            assert (code, len(errors)) in ((0, 0), (1, 1)), err
        assert any(code == 0 for code, _ in results)
        assert _assert_one_plan(out) in ("alpha", "beta")


def test_a_killed_planners_leftovers_are_cleared_by_the_next_plan(tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = _spec(tmp_path, "alpha")
    assert _plan(spec, out)[0] == 0
    (out / ".appopt-new-x1y2").mkdir()  # a planner killed after staging
    (out / ".appopt-new-x1y2" / "plan.json").write_text("{}")
    assert _plan(spec, out)[0] == 0
    assert not (out / ".appopt-new-x1y2").exists()
    assert json.loads((out / output_dir.MANIFEST).read_text()) == sorted(
        p.name for p in out.iterdir() if not p.name.startswith(".")
    )


# --- build, push and submit check the plan's spec digest ----------------------------------------------------------


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, _errors(result.stderr)


def test_push_and_submit_refuse_an_image_built_from_another_spec(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _plan(_spec(tmp_path, "alpha"), out)[0] == 0
    digest = json.loads((out / "plan.json").read_text())["spec_sha256"]
    record = {"engine": "podman", "image": "alpha:latest", "spec_sha256": "0" * 64}
    (out / "build.json").write_text(json.dumps(record))
    code, err = _invoke("push", str(out))
    assert code == 5
    assert err == (
        f"error: {out}/build.json was built from another spec (sha256 000000000000), not from {out}/plan.json "
        f"({digest[:12]}); rebuild: appopt build {out}\n"
    )
    code, err = _invoke("submit", str(out))
    assert code == 6 and "rebuild: appopt build" in err and len(err.splitlines()) == 1
    (out / "build.json").write_text(json.dumps({"engine": "podman", "image": "alpha:latest"}))  # an older record
    code, err = _invoke("push", str(out))
    assert code == 5 and "was built with no spec digest" in err


def test_build_refuses_a_deployment_from_another_plan(tmp_path: Path) -> None:
    out, other = tmp_path / "out", tmp_path / "other"
    assert _plan(_spec(tmp_path, "alpha"), out)[0] == 0
    assert _plan(_spec(tmp_path, "beta"), other)[0] == 0
    shutil.copy2(other / "deployment.json", out / "deployment.json")  # a directory mixed by hand
    code, err = _invoke("build", str(out), "--engine", "podman")
    assert code == 4
    assert err.startswith(f"error: {out}/deployment.json is from another spec (sha256 ")
    assert err.rstrip().endswith(f"plan again: appopt plan SPEC -o {out}")


def test_a_directory_planned_before_the_file_list_existed_is_replanned_without_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert _plan(_spec(tmp_path, "alpha"), out)[0] == 0
    (out / output_dir.MANIFEST).unlink()  # as an older appopt left it, with a build record
    (out / "build.json").write_text("{}\n")
    code, err = _plan(_spec(tmp_path, "beta", scheduler="none", formats="[docker]"), out)
    assert code == 0, err
    assert _assert_one_plan(out) == "beta"
    assert not (out / "job.slurm").exists() and not (out / "build.json").exists()


def test_a_file_where_the_plan_puts_a_directory_is_replaced_with_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "code").write_text("a file named like the plan's code directory\n")
    code, err = _plan(_spec(tmp_path, "alpha"), out, "--force")
    assert code == 0, err
    assert _assert_one_plan(out) == "alpha"


def test_a_build_records_the_plans_digest_and_push_accepts_it(tmp_path: Path) -> None:
    """The build record carries the digest of the spec the plan was made from (an engine that records the build
    without running one stands in for podman here; the real build is in tests/builders/realcomp)."""
    from builders.engines import BuildRequest, BuildResult, Engine
    from builders.image_build import build_plan_image
    from cli.build_cmds import PushError, check_build_matches_plan

    class Recorder(Engine):
        name = "recorder"

        @classmethod
        def unavailable_reason(cls, env: object) -> None:
            return None

        def build(self, request: BuildRequest, on_line: object = None) -> BuildResult:
            return BuildResult("recorder", request.tag, "sha256:" + "1" * 64, 0.0, request.log_path)

        def labels(self, image: str) -> dict[str, str]:
            return {}

        def export_oci(self, image: str, layout_dir: Path) -> Path:
            return layout_dir

    out = tmp_path / "out"
    assert _plan(_spec(tmp_path, "alpha"), out)[0] == 0
    build_plan_image(out, engine=Recorder())
    digest = json.loads((out / "plan.json").read_text())["spec_sha256"]
    assert json.loads((out / "build.json").read_text())["spec_sha256"] == digest
    check_build_matches_plan(out, PushError, required=True)  # no error
    assert _plan(_spec(tmp_path, "beta"), out)[0] == 0  # a new plan drops the old build record
    assert not (out / "build.json").exists()
