"""Per-node profiles: what they record, that they leave results alone, and the two CLI flags."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
import typer
from onnx import helper
from typer.testing import CliRunner

from cli.runtime_cmds import register
from runtime import compile_model
from runtime.profiling import COPY_OUTPUTS, STAGE_INPUTS
from tests.runtime.graphs import const, model, vi
from tests.runtime.test_control_flow import _loop_model

ROOT = Path(__file__).resolve().parents[2]


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    return model(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
            helper.make_node("Relu", ["h"], ["r"], name="act"),
            helper.make_node("MatMul", ["r", "w2"], ["m"], name="fc2"),
            helper.make_node("Softmax", ["m"], ["y"], name="softmax", axis=-1),
        ],
        [vi("x", shape=[2, 16])],
        [vi("y", shape=[2, 4])],
        [const("w1", rng.standard_normal((16, 32))), const("w2", rng.standard_normal((32, 4)))],
    )


@pytest.mark.parametrize("disable", [(), ("memory_plan",)], ids=["planned", "generic"])
def test_every_node_of_the_compiled_graph_is_timed_once_per_run(disable: tuple[str, ...]) -> None:
    exe = compile_model(_mlp(), threads=1, disable=disable)
    x = {"x": np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)}
    expected = exe.run(x)["y"]
    with exe.profiling() as profile:
        for _ in range(7):
            got = exe.run(x)["y"]
    np.testing.assert_array_equal(got, expected)
    assert profile.runs == 7
    assert len(profile.nodes) == exe.stats["nodes"]  # the optimised graph's nodes (MatMul+Relu fused)
    assert {n.calls for n in profile.nodes.values()} == {7}
    assert "softmax" in profile.nodes and profile.nodes["softmax"].op_type == "Softmax"
    assert all(n.seconds > 0 for n in profile.nodes.values())
    assert 0 < profile.node_seconds <= profile.run_seconds
    assert sum(e.calls for e in profile.by_op_type()) == 7 * len(profile.nodes)


def test_profiling_stops_with_the_block_and_profiles_do_not_mix() -> None:
    exe = compile_model(_mlp(), threads=1)
    x = {"x": np.ones((2, 16), np.float32)}
    with exe.profiling() as first:
        exe.run(x)
    exe.run(x)  # not recorded anywhere
    with exe.profiling() as second:
        exe.run(x)
        exe.run(x)
    assert exe.plan.shared.profile is None
    assert first.runs == 1 and {n.calls for n in first.nodes.values()} == {1}
    assert second.runs == 2 and {n.calls for n in second.nodes.values()} == {2}


def test_a_subgraph_counts_as_its_node() -> None:
    exe = compile_model(_loop_model())
    feeds = {"M": np.array(5), "cond": np.array(True), "x": np.array([1.0, 2.0], np.float32)}
    with exe.profiling() as profile:
        exe.run(feeds)
    assert [n.op_type for n in profile.nodes.values()] == ["Loop"]  # not the body's Cast/Mul/Add, five times
    assert profile.nodes[next(iter(profile.nodes))].calls == 1


def test_lines_show_op_types_and_the_slowest_nodes() -> None:
    exe = compile_model(_mlp(), threads=1)
    with exe.profiling() as profile:
        exe.run({"x": np.ones((2, 16), np.float32)})
    text = "\n".join(profile.lines(top=2))
    assert text.startswith("profile over 1 run(s):")
    assert "Softmax" in text and "slowest nodes (2 of" in text


def test_cli_flags_print_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["run-model", str(path), "--random", "--repeat", "3", "--profile"])
    assert result.exit_code == 0, result.output
    assert "profile over 3 run(s)" in result.output and "softmax" in result.output
    # the image's own entry point (no appopt CLI inside)
    shipped = subprocess.run(
        [sys.executable, "-m", "runtime", "run", str(path), "--random", "--profile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert shipped.returncode == 0, shipped.stderr
    assert "profile over 1 run(s)" in shipped.stdout


def test_a_planned_run_times_the_copies_at_the_graphs_edges_apart_from_the_nodes() -> None:
    exe = compile_model(_mlp(), threads=1)
    x = {"x": np.ones((2, 16), np.float32)}
    exe.run(x)  # the first run records the shapes the plan is made for
    with exe.profiling() as profile:
        for _ in range(3):
            exe.run(x)
    assert set(profile.io_seconds) == {STAGE_INPUTS, COPY_OUTPUTS}
    assert all(seconds > 0 for seconds in profile.io_seconds.values())
    assert profile.node_seconds + sum(profile.io_seconds.values()) <= profile.run_seconds
    assert len(profile.nodes) == exe.stats["nodes"]  # no pseudo-nodes among the nodes
    assert "copies at the graph's edges" in "\n".join(profile.lines())
    generic = compile_model(_mlp(), threads=1, disable=("memory_plan",))
    generic.run(x)
    with generic.profiling() as unplanned:
        generic.run(x)
    assert unplanned.io_seconds == {}  # nothing staged, nothing copied


def test_a_view_output_is_materialised_as_its_nodes_work_once_per_run() -> None:
    """A Transpose the plan fixes as a view does its work when the output is copied out: that is its node's time,
    not a copy at the graph's edge."""
    transpose = model(
        [helper.make_node("Transpose", ["x"], ["y"], name="swap", perm=[1, 0])],
        [vi("x", shape=[64, 48])],
        [vi("y", shape=[48, 64])],
    )
    exe = compile_model(transpose, threads=1)
    x = {"x": np.arange(64 * 48, dtype=np.float32).reshape(64, 48)}
    exe.run(x)
    with exe.profiling() as profile:
        for _ in range(4):
            got = exe.run(x)["y"]
    np.testing.assert_array_equal(got, x["x"].T)
    assert profile.nodes["swap"].calls == 4 and profile.nodes["swap"].seconds > 0
    assert COPY_OUTPUTS not in profile.io_seconds
