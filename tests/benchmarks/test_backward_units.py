"""The training-unit sweep: each unit's training graph, how its profile splits into forward and backward, rows."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.units import Unit, decode_units
from benchmarks.backward_units import (
    WIDE_SWEEP,
    _feeds,
    backward_sweep_units,
    main,
    measure_unit,
    mixed_precision_casts,
    split_profile,
    sweep_rows,
    training_unit_model,
)
from perfmodels.results_db import make_row, read_results, write_rows
from perfmodels.training_units import BACKWARD_FAMILY, TRAIN_FORWARD_FAMILY, fit_training_units

CONV = Unit(
    "conv",
    {"n": 2, "cin": 4, "cout": 8, "h": 6, "w": 6, "kh": 3, "kw": 3, "stride": 1, "group": 1, "oh": 6, "ow": 6,
     "act": 1, "residual": 1, "init_w": 1},
)  # fmt: skip


def _run_training_graph(unit: Unit) -> tuple[dict[str, np.ndarray], dict[str, tuple[int, ...]], list[str]]:
    """The unit's training graph run once: its gradients by tensor, the unit model's input shapes and weights."""
    from runtime.executor import compile_model
    from runtime.training.graph import build_training_graph

    model = training_unit_model(unit)
    graph = build_training_graph(model.proto, loss="mse")
    exe = compile_model(graph.to_onnx(), 1, passes=())
    feeds = {**graph.params, graph.loss.target: np.zeros(model.output_shape, np.float32), graph.program.seed: 1.0}
    out = exe.run({k: np.asarray(v, dtype=np.float32) for k, v in feeds.items()})
    grads = {name: out[g] for name, g in graph.program.gradients.items()}
    shapes = {**model.inputs, **{name: graph.params[name].shape for name in model.weights}}
    return grads, shapes, list(model.weights)


def test_a_units_backward_computes_every_gradient_at_its_forward_shapes():
    """The unit's inputs are trained tensors, so its backward has the input gradient (dX) a model's inner units
    compute, beside the weight and bias gradients (the convolution's, its batch normalisation's), each of its
    forward tensor's shape."""
    grads, shapes, weights = _run_training_graph(CONV)
    assert len(weights) == 4  # the convolution's weight and bias, the normalisation's scale and shift
    assert set(grads) == set(shapes)  # dX, d(residual), and the four weights'
    for name, grad in grads.items():
        assert grad.shape == shapes[name], name
        assert np.abs(grad).sum() > 0, name


def test_a_convolution_trains_with_a_batch_normalisation_before_its_residual_add():
    """Inference graphs fold the normalisation into the convolution; the training unit puts it back where CNNs
    train it: Conv, BatchNormalization, then the residual Add and the activation; its running statistics are not
    trained weights."""
    model = training_unit_model(CONV)
    assert [n.op_type for n in model.proto.graph.node] == ["Conv", "BatchNormalization", "Add", "Relu"]
    assert len(model.forward_nodes) == 4 and not any(w.endswith(("_mean", "_var")) for w in model.weights)
    gemm = training_unit_model(Unit("gemm", {"m": 4, "k": 16, "n": 8, "act": 1, "init_w": 1}))
    assert [n.op_type for n in gemm.proto.graph.node] == ["Gemm", "Relu"]


def test_a_matrix_product_with_computed_weights_is_swept_with_stored_ones():
    """Training reads and updates stored weights: a forward unit whose weight is computed (``init_w`` 0, a
    transposed MatMul weight) is swept as the unit a trainer runs, with its weight gradient."""
    unit = Unit("gemm", {"m": 4, "k": 16, "n": 8, "act": 0, "init_w": 0})
    grads, shapes, weights = _run_training_graph(unit)
    weight = next(w for w in weights if len(shapes[w]) == 2)
    assert grads[weight].shape == (16, 8)


def test_the_profile_splits_into_the_units_forward_and_its_gradient_kernels():
    """Forward: the unit's own nodes; backward: the nodes named after them and its weights' gradient outputs; the
    loss, the loss's gradient and the stand-in inputs' gradient outputs belong to neither."""
    nodes = {
        "unit0": 1.0,
        "unit1": 0.5,
        "loss__sub": 7.0,
        "loss__mean__ReduceGrad": 7.0,
        "grad__Sum": 7.0,
        "unit1__ReluGrad": 0.25,
        "unit0__ConvGrad": 2.0,
        "c0__grad_out": 0.125,
        "x0__grad_out": 7.0,
    }
    assert split_profile(nodes, ("unit0", "unit1"), ("c0",)) == (1.5, 2.375)


def test_under_mixed_precision_the_casts_around_the_unit_and_their_gradients_are_its_own():
    """The casts the AMP pass puts around a unit's nodes (``<value>__cast``) are its forward, their gradients
    (``<cast>__Cast``) its backward; the loss's nodes stay out."""
    nodes = {
        "x0__low__cast": 0.5,
        "unit0": 1.0,
        "t1__fp32__cast": 0.25,
        "loss__sub": 7.0,
        "t1__fp32__cast__Cast": 0.125,
        "unit0__ConvGrad": 2.0,
        "x0__low__cast__Cast": 1.0,
        "c0__grad_out": 0.125,
        "gradients_finite__check": 7.0,
    }
    casts = ("x0__low__cast", "t1__fp32__cast")
    assert split_profile(nodes, ("unit0",), ("c0",), casts) == (1.75, 3.25)
    assert split_profile(nodes, ("unit0",), ("c0",)) == (1.0, 2.125)


def test_a_mixed_precision_unit_is_seeded_with_the_loss_scale_and_knows_its_casts():
    from runtime.training.graph import build_training_graph
    from runtime.training.loss_scale import DynamicLossScaler

    model = training_unit_model(CONV)
    graph = build_training_graph(model.proto, loss="mse", precision="fp16")
    casts = mixed_precision_casts(graph)
    assert casts and all(c.endswith("__cast") or "__cast_" in c for c in casts)
    assert _feeds(graph, model.output_shape)[graph.program.seed] == DynamicLossScaler().scale
    fp32 = build_training_graph(model.proto, loss="mse")
    assert mixed_precision_casts(fp32) == () and _feeds(fp32, model.output_shape)[fp32.program.seed] == 1.0
    times = measure_unit(CONV, precision="fp16")
    assert times.forward_ms > 0 and times.backward_ms > 0


def test_measuring_a_unit_times_both_parts():
    times = measure_unit(CONV)
    assert times.forward_ms > 0 and times.backward_ms > 0 and times.runs >= 3
    assert times.forward_cpu_ms > 0 and times.backward_cpu_ms > 0


def test_the_sweeps_units_are_seeded_and_end_with_the_wide_samplers():
    units = backward_sweep_units(scale=0.025)
    assert [u.signature() for u in units] == [u.signature() for u in backward_sweep_units(scale=0.025)]
    wide = units[-len(WIDE_SWEEP) :]  # one of each wide sampler at this scale
    assert [u.kind for u in wide] == ["conv", "gemm"]
    assert {u.kind for u in units} >= {"conv", "dwpw", "gemm", "bmm", "pool", "eltwise", "layernorm", "softmax"}


def test_swept_rows_are_valid_and_fit_the_training_units(tmp_path):
    """Rows of both parts for each unit, with the load probe's reading; they round-trip the database and the
    training-unit fit reads them (here too few per kind to learn one: the kinds stay unpriced)."""
    rows = list(sweep_rows([CONV], optimizer=False, hardware=(50.0, 10.0, 40.0), notes="test"))
    assert [r["family"] for r in rows] == [TRAIN_FORWARD_FAMILY, BACKWARD_FAMILY]
    assert all("other_cpu" in r and r["notes"] == "test" and r["threads"] == 1 for r in rows)
    path = tmp_path / "rows.csv"
    write_rows(path, [make_row(**r) for r in rows])
    frame = read_results(path)
    assert decode_units(frame["units"].iloc[0]) == [CONV]
    (route,) = fit_training_units(frame).values()
    assert not route.backward.kinds and np.isnan(route.backward.seconds([CONV], 1))


def test_mixed_precision_rows_are_the_amp_routes(tmp_path):
    rows = list(sweep_rows([CONV], optimizer=False, hardware=(50.0, 10.0, 40.0), precision="fp16"))
    assert {(r["backend"], r["precision"]) for r in rows} == {("appopt-runtime-amp", "fp16")}
    path = tmp_path / "rows.csv"
    write_rows(path, [make_row(**r) for r in rows])
    ((_target, framework, precision),) = fit_training_units(read_results(path))
    assert (framework, precision) == ("appopt-runtime", "fp16")


def test_a_bad_scale_is_one_line_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--out", str(tmp_path / "x.csv"), "--scale", "0"])
    assert exit_info.value.code != 0
    assert "--scale: 0.0 is not in (0, 4]" in capsys.readouterr().err
