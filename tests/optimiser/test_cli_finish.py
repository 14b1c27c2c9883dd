"""The CLI's finish: --version and -h, help without placeholders, progress on slow steps, and the error slips of
issue 20 (a 'local' accelerator, a directory given to run-model, record-default's destination, models show's
columns, kernel shares over 100%)."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from cli import bench_cmds, models_cmds, progress
from cli.main import app
from optimiser.errors import AppoptError
from optimiser.suggest import unknown_id_message

runner = CliRunner()
EXAMPLES = Path(__file__).parents[2] / "examples"


def invoke(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_version_and_short_help() -> None:
    code, out, _ = invoke("--version")
    assert code == 0 and out.startswith("appopt ") and len(out.split()) == 2
    for args in (["-h"], ["plan", "-h"], ["bench", "-h"], ["models", "show", "-h"]):
        code, out, _ = invoke(*args)
        assert code == 0 and "Usage:" in out, args


def _command_paths() -> list[list[str]]:
    root = typer.main.get_command(app)
    paths: list[list[str]] = [[]]
    for name, command in getattr(root, "commands", {}).items():
        paths.append([name])
        paths += [[name, sub] for sub in getattr(command, "commands", {})]
    return paths


def test_help_has_no_type_placeholders_or_raw_markup() -> None:
    paths = _command_paths()
    assert len(paths) > 15
    for path in paths:
        code, out, _ = invoke(*path, "--help")
        assert code == 0, path
        for bad in ("<bool>", "<path>", "<str>", "<int>", "<list[", "``", "{spec}", "{out}", "{model}"):
            assert bad not in out, (path, bad)


def test_plan_usage_names_the_argument_in_capitals() -> None:
    _, out, _ = invoke("plan", "--help")
    assert "appopt plan [OPTIONS] SPEC" in out and " PATH " in out


def test_a_local_accelerator_is_refused_without_suggesting_itself(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: x\napplication: {type: inference, model: {architecture: resnet50}, batch_size: 1}\n"
        "target:\n  cpu: {arch: x86_64, model: xeon-8380}\n  accelerator: {vendor: nvidia, model: local}\n"
    )
    code, _, err = invoke("validate", str(spec))
    assert code != 0
    assert "did you mean 'local'" not in err
    assert "target.accelerator.model: 'local' detects this machine's CPU only" in err and "a100" in err
    assert "did you mean" not in unknown_id_message("f", "local", ["local", "a100"])
    assert "did you mean 'a100'" in unknown_id_message("f", "a10", ["local", "a100"])


def test_run_model_names_a_directory_that_is_not_a_compiled_model(tmp_path: Path) -> None:
    code, _, err = invoke("run-model", str(tmp_path))
    assert code == 2
    assert "is a directory, but not one `appopt compile` wrote" in err and "does not exist" not in err
    compiled = tmp_path / "compiled"
    assert invoke("compile", str(EXAMPLES / "digits_mlp.onnx"), "-o", str(compiled))[0] == 0
    code, out, _ = invoke("run-model", str(compiled), "--random")
    assert code == 0 and "probabilities" in out
    code, _, err = invoke("run-model", str(compiled), "--random", "--engine", "onnxruntime")
    assert code == 2 and "original .onnx file" in err


def test_progress_reports_start_items_and_end_off_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    stream = io.StringIO()
    with progress.progress("fitting", stream) as step:
        step("route a")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "appopt: fitting..."
    assert lines[1].startswith("appopt: fitting: route a (")
    assert lines[-1].startswith("appopt: fitting: done in ")


def test_models_evaluate_shows_progress_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    import perfmodels.evaluate

    monkeypatch.setattr(models_cmds, "_frame", lambda db: pd.DataFrame({"x": [1, 2]}))
    monkeypatch.setattr(
        perfmodels.evaluate, "leave_one_architecture_out", lambda frame, **_: SimpleNamespace(lines=lambda: ["ok"])
    )
    code, out, err = invoke("models", "evaluate")
    assert code == 0 and out.strip() == "ok"
    assert "appopt: leave-one-architecture-out over 2 rows" in err and "done in" in err


def test_record_default_writes_to_the_cache_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from perfmodels.results_db import DEFAULT_DB

    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path))
    assert bench_cmds.record_destination(None, False) == tmp_path / "recorded.csv"
    assert bench_cmds.record_destination(tmp_path / "x.csv", False) == tmp_path / "x.csv"
    assert bench_cmds.record_destination(None, True) == Path(DEFAULT_DB)
    with pytest.raises(AppoptError):
        bench_cmds.record_destination(tmp_path / "x.csv", True)
    written: list[Path] = []
    import benchmarks.record

    monkeypatch.setattr(benchmarks.record, "record_default", lambda *args, **kwargs: written.append(args[2]))
    code, out, err = invoke("bench", "record-default", "--no-kernels", "--no-units")
    assert code == 0, err
    assert written == [tmp_path / "recorded.csv"] and "APPOPT_RESULTS_DB=" in out


def test_kernel_shares_are_of_the_best_gemm_rate_measured() -> None:
    from benchmarks.kernels import KernelOutcome, gemm_kernel, reference_rates

    gemm = gemm_kernel(256, 256, 256, "small square")
    # The suite's NumPy peak read 56 GFLOP/s on a busy machine, then onnxruntime's GEMM ran at 174.
    fast = KernelOutcome(gemm, "onnxruntime", 1, "ok", gflops=174.0, peak_gflops=56.0, median_ms=0.2)
    slow = KernelOutcome(gemm, "appopt-runtime", 1, "ok", gflops=138.0, peak_gflops=56.0, median_ms=0.25)
    assert "311%" in fast.describe()  # what the suite used to print
    reference = reference_rates([fast, slow], remeasure=lambda threads: 150.0)
    assert reference == {1: 174.0}
    assert "(100% of 174)" in fast.describe(reference[1])
    assert "(79% of 174)" in slow.describe(reference[1])
