"""PyTorch's training kernels swept as units: two rows per unit (forward, backward), the optimiser's, bad flags."""

from __future__ import annotations

import pytest

from analysis.units import Unit, decode_units
from benchmarks import torch_backward_units
from benchmarks.backward_units import OPTIMIZER_SHAPES
from perfmodels.training_units import BACKWARD_FAMILY, OPTIMIZER_FAMILY, TRAIN_FORWARD_FAMILY

CONV = Unit("conv", {"n": 2, "cin": 8, "cout": 16, "h": 8, "w": 8, "kh": 3, "kw": 3, "stride": 1, "group": 1,
                     "oh": 8, "ow": 8, "act": 1, "residual": 0, "init_w": 1})  # fmt: skip
MAX_POOL = Unit("pool", {"n": 2, "c": 8, "h": 8, "w": 8, "kh": 2, "kw": 2, "stride": 2, "oh": 4, "ow": 4, "avg": 0})


def test_each_unit_gives_a_forward_and_a_backward_row_and_the_optimiser_its_own() -> None:
    pytest.importorskip("torch", reason="extra not installed (torch runs the units)")
    rows = list(torch_backward_units.sweep_rows([CONV, MAX_POOL], hardware=(100.0, 10.0, 50.0)))
    units = [r for r in rows if r["family"] != OPTIMIZER_FAMILY]
    assert [r["family"] for r in units] == [TRAIN_FORWARD_FAMILY, BACKWARD_FAMILY] * 2
    assert [decode_units(r["units"])[0] for r in units[::2]] == [CONV, MAX_POOL]
    assert all(r["framework"] == "pytorch" and r["threads"] == 1 and r["value"] > 0 for r in units)
    optimizer = [r for r in rows if r["family"] == OPTIMIZER_FAMILY]
    assert len(optimizer) == len(OPTIMIZER_SHAPES)


def test_a_convolution_is_timed_without_a_normalisation_and_its_weights_get_gradients() -> None:
    pytest.importorskip("torch", reason="extra not installed (torch runs the units)")
    graph = torch_backward_units._TrainedGraph(torch_backward_units.training_unit_model(CONV, normalise=False))
    graph.forward().sum().backward()
    assert not any(fn.__name__ == "batch_norm" for fn, _, _ in graph.steps)
    assert len(graph.leaves) >= 2 and all(leaf.grad is not None for leaf in graph.leaves)


def test_a_bad_scale_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        torch_backward_units.main(["--out", "x.csv", "--scale", "0"])
    assert exit_.value.code == 2
    assert "--scale: 0.0 is not in (0, 4]" in capsys.readouterr().err
