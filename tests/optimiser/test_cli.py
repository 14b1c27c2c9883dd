"""The CLI end to end through typer's CliRunner: exit codes, one-line errors, files written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app

EXAMPLES = Path(__file__).parents[2] / "examples"
runner = CliRunner()


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_validate_accepts_each_example() -> None:
    for spec in sorted(EXAMPLES.glob("*.yaml")):
        code, out, err = invoke("validate", str(spec))
        assert code == 0, (spec, err)
        assert out.startswith("ok: ")


def test_validate_reports_each_problem_on_one_line_without_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\napplication:\n  type: trainin\n  model: {architecture: resnet50}\n  batchsize: 4\n")
    code, out, err = invoke("validate", str(bad))
    assert code == 2
    assert err.splitlines() == [
        "error: application.type: Input should be 'training' or 'inference' (line 3)",
        "error: application.batchsize: unknown key (did you mean 'batch_size'?) (line 5)",
    ]
    assert "Traceback" not in out + err


def test_unknown_architecture_and_missing_model_file(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("name: x\napplication: {type: inference, model: {architecture: resnet5O}}\n")
    code, _, err = invoke("validate", str(spec))
    assert code == 2 and err.startswith("error: application.model.architecture: unknown 'resnet5O' (did you mean")
    spec.write_text("name: x\napplication: {type: inference, model: {onnx: nothere.onnx}}\n")
    code, _, err = invoke("validate", str(spec))
    assert code == 2 and "application.model.onnx: no such file" in err


def test_schema_is_valid_json() -> None:
    code, out, _ = invoke("schema")
    assert code == 0
    assert json.loads(out)["title"] == "appopt application spec"


def test_plan_prints_a_ranked_table() -> None:
    code, out, _ = invoke("plan", str(EXAMPLES / "resnet50-gpu-slurm.yaml"), "--top", "3")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["#", "framework", "compiler"]
    assert [line.split()[0] for line in lines[1:4]] == ["1", "2", "3"]
    assert "candidates ranked by time_to_solution" in lines[4]


@pytest.mark.parametrize(
    ("example", "job_file"),
    [
        ("resnet50-gpu-slurm.yaml", "job.slurm"),
        ("bert-inference-k8s.yaml", "job.k8s.yaml"),
        ("a64fx-pbs.yaml", "job.pbs"),
        ("onnx-mlp-local.yaml", "run.sh"),
    ],
)
def test_plan_writes_the_report_and_artifacts(tmp_path: Path, example: str, job_file: str) -> None:
    code, _, err = invoke("plan", str(EXAMPLES / example), "-o", str(tmp_path))
    assert code == 0, err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert set(plan["choice"]) == {
        "framework", "compiler", "tuning_trials", "libraries", "precision", "layout", "base_image"
    }
    assert plan["predicted"]["step_seconds"] > 0
    assert plan["candidates"][0]["rank"] == 1
    assert all(e["reason"] for e in plan["excluded"])
    assert (tmp_path / "plan.md").read_text().startswith("# appopt plan: ")
    assert (tmp_path / job_file).is_file()
    formats = {"a64fx-pbs.yaml": {"Singularity.def"}, "bert-inference-k8s.yaml": {"Dockerfile"}}
    for name in formats.get(example, {"Dockerfile", "Singularity.def"}):
        assert (tmp_path / name).is_file(), name


def test_plan_onnx_example_for_our_runtime_ships_model_and_runtime(tmp_path: Path) -> None:
    code, _, err = invoke("plan", str(EXAMPLES / "onnx-mlp-local.yaml"), "-o", str(tmp_path))
    assert code == 0, err
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["workload"]["params"] == 64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10
    assert (tmp_path / "model.onnx").read_bytes() == (EXAMPLES / "digits_mlp.onnx").read_bytes()
    if plan["choice"]["framework"] == "appopt-runtime":
        assert (tmp_path / "runtime" / "__init__.py").is_file()


def test_catalog_listing_and_unknown_category() -> None:
    code, out, _ = invoke("catalog", "compilers")
    assert code == 0 and "tensorrt" in out
    code, _, err = invoke("catalog", "compilrs")
    assert code == 2 and "did you mean 'compilers'" in err


def test_bad_flag_is_a_usage_error() -> None:
    code, _, err = invoke("plan", "--no-such-flag")
    assert code == 2
    assert "No such option" in err
