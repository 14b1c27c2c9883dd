"""Compiled artifacts and the two runtime CLI commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import typer
from onnx import AttributeProto, helper
from typer.testing import CliRunner

from cli.runtime_cmds import register
from runtime import RuntimeModelError, compile_model
from runtime.artifact import is_artifact_dir, load_artifact, save_artifact
from runtime.kernels.base import REGISTRY
from runtime.tools import run_model
from tests.runtime.graphs import const, model, vi


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("Add", ["h", "b1"], ["hb"]),
        helper.make_node("Identity", ["hb"], ["hi"]),
        helper.make_node("Relu", ["hi"], ["r"]),
        helper.make_node("MatMul", ["r", "w2"], ["y"]),
    ]
    return model(
        nodes,
        [vi("x", shape=["batch", 4])],
        [vi("y", shape=["batch", 3])],
        [
            const("w1", rng.standard_normal((4, 8))),
            const("b1", rng.standard_normal(8)),
            const("w2", rng.standard_normal((8, 3))),
        ],
    )


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.callback()
    def _root() -> None:  # keep subcommands even with two commands registered
        pass

    return app


def test_artifact_round_trip_gives_the_same_outputs_and_skips_rework(tmp_path: Path) -> None:
    exe = compile_model(_mlp())
    manifest = save_artifact(exe, tmp_path / "out")
    assert is_artifact_dir(tmp_path / "out")
    assert manifest["inputs"] == [{"name": "x", "kind": "tensor", "dtype": "float32", "shape": ["batch", 4]}]
    assert manifest["outputs"][0]["name"] == "y"
    assert manifest["stats"]["passes"]["identity_elimination"] == 1
    assert {"runtime_version", "opsets", "node_opsets"} <= set(manifest)

    loaded = load_artifact(tmp_path / "out")
    assert loaded.stats["artifact"]["fast_load"] is True
    assert loaded.stats["passes"] == {}
    x = np.random.default_rng(1).random((2, 4), dtype=np.float32)
    np.testing.assert_array_equal(loaded.run({"x": x})["y"], exe.run({"x": x})["y"])
    # compile_model also accepts the directory
    np.testing.assert_array_equal(compile_model(tmp_path / "out").run({"x": x})["y"], exe.run({"x": x})["y"])


def test_artifact_keeps_the_opset_of_expanded_function_bodies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The Celu body keeps the opset its schema wrote it for (not the model's 13); the artifact must remember.
    monkeypatch.delitem(REGISTRY, ("", "Celu"))
    m = model([helper.make_node("Celu", ["x"], ["y"])], [vi("x", shape=[3])], [vi("y", shape=[3])], opset=13)
    exe = compile_model(m)
    manifest = save_artifact(exe, tmp_path / "celu")
    overrides = manifest["node_opsets"]
    assert overrides and all(v != 13 for v in overrides.values())
    x = np.array([-1.0, 0.0, 1.0], np.float32)
    np.testing.assert_allclose(load_artifact(tmp_path / "celu").run({"x": x})["y"], exe.run({"x": x})["y"])


def test_scalar_attribute_types_survive_the_artifact(tmp_path: Path) -> None:
    node = helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.25)
    assert node.attribute[0].type == AttributeProto.FLOAT
    save_artifact(compile_model(model([node], [vi("x", shape=[2])], [vi("y", shape=[2])])), tmp_path / "a")
    out = load_artifact(tmp_path / "a").run({"x": np.array([-4.0, 4.0], np.float32)})["y"]
    np.testing.assert_array_equal(out, [-1.0, 4.0])


def test_cli_compile_then_run_model(tmp_path: Path, app: typer.Typer) -> None:
    src = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), src)
    runner = CliRunner()
    result = runner.invoke(app, ["compile", str(src), "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "x float32[batch, 4]" in result.output and "identity_elimination=1" in result.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["required_inputs"] == ["x"]

    x = np.ones((2, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    result = runner.invoke(
        app, ["run-model", str(tmp_path / "out"), "--input", f"x={tmp_path / 'x.npy'}", "--repeat", "3"]
    )
    assert result.exit_code == 0, result.output
    expected = compile_model(_mlp()).run({"x": x})["y"]
    assert f"output y: float32[2, 3] mean={expected.mean():.6g}" in result.output
    assert "latency over 3 run(s): median" in result.output and "p90" in result.output

    result = runner.invoke(app, ["run-model", str(src), "--random", "--threads", "1"])
    assert result.exit_code == 0, result.output
    assert "random float32[1, 4]" in result.output


def test_cli_refuses_bad_models_with_one_line_and_exit_2(tmp_path: Path, app: typer.Typer) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage\xff\xff")
    runner = CliRunner()
    for args in (["run-model", str(bad), "--random"], ["compile", str(bad), "-o", str(tmp_path / "o")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: ") and "not a valid ONNX" in lines[0]
        assert "Traceback" not in result.output


def test_cli_missing_input_says_how_to_give_it(tmp_path: Path, app: typer.Typer) -> None:
    src = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), src)
    result = CliRunner().invoke(app, ["run-model", str(src)])
    assert result.exit_code == 2
    assert "error: input 'x' not given: pass --input x=FILE.npy or --random" in result.output


def test_run_model_rejects_unknown_inputs_and_bad_specs(tmp_path: Path) -> None:
    src = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), src)
    with pytest.raises(RuntimeModelError, match="no such input"):
        run_model(src, inputs=[f"nope={tmp_path / 'x.npy'}"], random=True)
    with pytest.raises(RuntimeModelError, match="NAME=FILE"):
        run_model(src, inputs=["just-a-path.npy"])
    report = run_model(src, random=True, repeat=4)
    assert len(report.latencies_s) == 4 and report.p90_ms >= report.median_ms > 0
