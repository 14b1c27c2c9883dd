"""The pipeline is derived from the pass modules: today's order, a dropped-in pass placed by its constraints, and
constraints that cannot hold failing on one line that names the pass."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from onnx import helper

import runtime.passes
from runtime import RuntimeModelError, compile_model
from runtime.passes import pipeline as pipeline_module
from runtime.passes.pipeline import describe, pass_names
from tests.drop_in import dropped_module
from tests.runtime.graphs import const, model, vi

#: The order the hand-written list had before each pass declared its own place (and global_mean since): the
#: behaviour contract.
HAND_WRITTEN_ORDER = [
    "identity_elimination", "constant_folding", "shape_values", "view_chain", "pad_fusion", "conv1d_lift",
    "conv_bn_fusion", "embedding_bag", "gelu_fusion", "attention_fusion", "matmul_fusion", "conv_fusion",
    "silu_fusion", "squeeze_excite", "transpose_layout", "channel_layernorm", "global_mean", "layout",
    "depthwise_fusion",
    "elementwise_chain", "transpose_reshape", "dead_node_elimination", "recurrent_outputs", "recurrent_layout",
    "memory_plan",
]  # fmt: skip

#: A pass a newcomer would write: it records the op types it sees and changes nothing. Its name sorts first, so
#: only its constraints can put it after conv_fusion.
PROBE = '''
from runtime.passes.pipeline import Pass

SEEN = []


def run(graph, ctx):
    SEEN.append([node.op_type for node in graph.nodes])
    return 0


PASS = Pass("aaa_probe", run, "between conv_fusion and silu_fusion, for a test", {constraints})
'''


@contextmanager
def probe_pass(folder: Path, constraints: str) -> Iterator[None]:
    text = PROBE.replace("{constraints}", constraints)
    with dropped_module(runtime.passes, "zz_probe_pass", text, folder, pipeline_module.rescan):
        yield


def _conv_silu() -> tuple[object, dict[str, np.ndarray]]:
    """Conv, a residual Add, then x * sigmoid(x): conv_fusion makes a FusedConv reading the residual, silu_fusion
    then takes in the Sigmoid and Mul."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["conv", "r"], ["c"]),
        helper.make_node("Sigmoid", ["c"], ["s"]),
        helper.make_node("Mul", ["c", "s"], ["y"]),
    ]
    inputs = [vi("x", shape=[1, 3, 6, 6]), vi("r", shape=[1, 4, 6, 6])]
    m = model(nodes, inputs, [vi("y", shape=[1, 4, 6, 6])], [const("w", w)])
    feeds = {"x": rng.standard_normal((1, 3, 6, 6)).astype(np.float32),
             "r": rng.standard_normal((1, 4, 6, 6)).astype(np.float32)}
    return m, feeds


def test_the_derived_order_is_the_hand_written_one() -> None:
    assert pass_names() == HAND_WRITTEN_ORDER
    lines = describe()
    assert [line.split()[1] for line in lines] == HAND_WRITTEN_ORDER
    assert "attention_fusion reads in place" in lines[HAND_WRITTEN_ORDER.index("view_chain")]


def test_a_dropped_in_pass_runs_where_its_constraints_put_it(tmp_path: Path) -> None:
    import sys

    m, feeds = _conv_silu()
    expected = compile_model(m, passes=[], layout="nchw").run(dict(feeds))["y"]
    with probe_pass(tmp_path, 'after=("conv_fusion",), before=("silu_fusion",)'):
        names = pass_names()
        assert names.index("conv_fusion") + 1 == names.index("aaa_probe") == names.index("silu_fusion") - 1
        assert [n for n in names if n != "aaa_probe"] == HAND_WRITTEN_ORDER
        seen = sys.modules["runtime.passes.zz_probe_pass"].SEEN
        exe = compile_model(m, layout="nchw")
        # first round: conv_fusion has run before it, silu_fusion not yet
        assert "FusedConv" in seen[0] and "Conv" not in seen[0] and "Sigmoid" in seen[0]
        assert "Sigmoid" not in [n.op_type for n in exe.model.graph.nodes]
        np.testing.assert_allclose(exe.run(dict(feeds))["y"], expected, rtol=1e-5, atol=1e-5)
        seen.clear()
        compile_model(m, layout="nchw", disable=["aaa_probe"])
        assert seen == []  # disabled by name like any other pass
    assert "aaa_probe" not in pass_names()


def test_the_compile_stats_count_a_dropped_in_pass(tmp_path: Path) -> None:
    m, _ = _conv_silu()
    with probe_pass(tmp_path, 'after=("conv_fusion",), before=("silu_fusion",)'):
        counts = compile_model(m, layout="nchw").stats["passes"]
    assert counts["aaa_probe"] == 0 and counts["silu_fusion"] == 1


@pytest.mark.parametrize(
    ("constraints", "message"),
    [
        ('after=("no_such_pass",)', r"^pass 'aaa_probe' \(runtime\.passes\.zz_probe_pass\): after names unknown "
                                    r"pass 'no_such_pass'$"),
        ('before=("memory_plan",)', "before names unknown pass 'memory_plan'"),
        ('after=("layout",), before=("conv_fusion",)',
         r"^pass '\w+': after/before constraints form a cycle: .*aaa_probe"),
    ],
)
def test_constraints_that_cannot_hold_fail_on_one_line(tmp_path: Path, constraints: str, message: str) -> None:
    with probe_pass(tmp_path, constraints), pytest.raises(RuntimeModelError, match=message) as caught:
        pass_names()
    assert "\n" not in str(caught.value)


def test_a_pass_name_declared_twice_fails_naming_it(tmp_path: Path) -> None:
    text = "from runtime.passes.identity_elimination import PASS\n"
    with dropped_module(runtime.passes, "zz_twice", text, tmp_path, pipeline_module.rescan), pytest.raises(
        RuntimeModelError, match=r"pass 'identity_elimination' is declared twice \(again by runtime.passes.zz_twice\)"
    ):
        pass_names()


def test_python_m_runtime_passes_prints_the_order_with_reasons(capsys: pytest.CaptureFixture[str]) -> None:
    from runtime.__main__ import main

    assert main(["passes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1] for line in lines] == HAND_WRITTEN_ORDER
    assert lines[-1].endswith("disable it by name)")
