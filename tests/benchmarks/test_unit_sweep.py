"""The kernel-unit sweep: sampled units built as one-unit models that the graph cutter reads back unchanged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from analysis.unitgraph import graph_units
from analysis.units import KINDS, Unit, decode_units, encode_units, unit_flops
from benchmarks.models import get_model
from benchmarks.unit_sweep import (
    MAX_UNIT_FLOPS,
    SAMPLER_KINDS,
    SWEEP_ROUNDS,
    SWEEP_SIZES,
    run_unit_sweep,
    sample_rounds,
    sample_units,
    unit_kernels,
    unit_model,
    unmeasured,
)
from perfmodels.results_db import read_results
from perfmodels.unitfit import fit_units


def test_the_sample_is_seeded_and_covers_every_kind():
    first, again, other = sample_units(per_kind=3), sample_units(per_kind=3), sample_units(per_kind=3, seed=1)
    assert [u.signature() for u in first] == [u.signature() for u in again]
    assert [u.signature() for u in first] != [u.signature() for u in other]
    assert {u.kind for u in first} == set(SWEEP_SIZES)
    assert {SAMPLER_KINDS[name] for sizes in SWEEP_ROUNDS for name in sizes} == set(KINDS)  # later rounds add kinds
    convs = sample_units(kinds=("conv", "pool"))
    assert [u.signature() for u in convs] == [u.signature() for u in sample_units() if u.kind in ("conv", "pool")]


def test_later_rounds_extend_the_sweep_without_changing_what_was_measured_before():
    full, rounds = sample_units(), sample_rounds()
    assert [u.signature() for u in full] == [u.signature() for round_ in rounds for u in round_]
    assert [len(r) for r in rounds[1:]] == [sum(sizes.values()) for sizes in SWEEP_ROUNDS[1:]]
    # the first round is the sample the sweep took before later rounds existed: the same stream, drawn first
    assert SWEEP_ROUNDS[0] is SWEEP_SIZES and len(rounds[0]) == sum(SWEEP_SIZES.values())
    assert len({u.signature() for u in full}) > 0.95 * len(full)
    convs = [u for u in full if u.kind == "conv"]
    assert len(convs) == sum(n for r in SWEEP_ROUNDS for name, n in r.items() if SAMPLER_KINDS[name] == "conv")
    large = [u for u in rounds[2] if u.kind == "conv"]
    assert max(unit_flops(u) for u in large) > 4 * MAX_UNIT_FLOPS >= max(unit_flops(u) for u in rounds[0])


def test_unmeasured_keeps_the_units_a_database_has_no_rows_of():
    units = sample_units(per_kind=2, kinds=("gemm", "pool"))
    measured = [encode_units([units[0]]), encode_units([units[2]]), None, float("nan")]
    assert unmeasured(units, measured) == [units[1], units[3]]
    assert unmeasured(units, []) == units


def test_every_sampled_unit_builds_a_valid_model_that_cuts_back_into_that_unit():
    rounds = sample_rounds()
    later = [u for round_ in rounds[1:4] for u in round_ if u.kind == "skipnorm"]
    later += [u for round_ in rounds[4:] for u in round_]
    for unit in sample_units(per_kind=12) + later:
        if unit.kind == "noop":
            continue
        model, inputs = unit_model(unit)
        onnx.checker.check_model(model)
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
        assert set(inputs) == {i.name for i in model.graph.input}
        (back,) = graph_units(model)
        assert back.signature() == unit.signature(), unit.signature()


@pytest.mark.parametrize("name", ["zoo_inception_v1", "zoo_squeezenet", "tiny_lenet5"])
def test_a_suite_models_units_build_models_of_their_output_size(name):
    # inception's last AveragePool reads 6x6 through a 7x7 window with one row of padding: built without its pads,
    # that unit had no output at all and onnxruntime died of a division by zero measuring it
    for unit in graph_units(get_model(name).model()):
        if unit.kind == "noop":
            continue
        model, _ = unit_model(unit)
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        (output,) = inferred.graph.output
        dims = [d.dim_value for d in output.type.tensor_type.shape.dim]
        if unit.kind in ("conv", "dwconv", "dwpw", "pool"):
            assert dims[-2:] == [unit["oh"], unit["ow"]], unit.signature()


def test_recurrent_units_are_lstms_grus_and_rnns_our_runtime_and_onnxruntime_agree_on():
    """Each as PyTorch exports it (a GRU's reset gate after its product), in one direction or two."""
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed")
    from benchmarks.unit_sweep import RECURRENT_OPS
    from runtime import compile_model

    base = {"batch": 2, "steps": 5, "inputs": 6, "hidden": 4}
    for gates, op in RECURRENT_OPS.items():
        for directions in (1, 2):
            unit = Unit("recurrent", {**base, "gates": gates, "directions": directions})
            model, inputs = unit_model(unit)
            assert model.graph.node[-1].op_type == op
            feeds = {n: np.random.default_rng(0).standard_normal(s).astype(np.float32) for n, s in inputs.items()}
            ours = next(iter(compile_model(model, threads=1).run(feeds).values()))
            theirs = ort.InferenceSession(model.SerializeToString()).run(None, feeds)[0]
            assert ours.shape == (5, directions, 2, 4)
            np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    layers = [u for u in sample_rounds()[6] if u.kind == "recurrent"]
    assert {u["gates"] for u in layers} == {1, 3, 4} and {u["directions"] for u in layers} == {1, 2}


def test_unit_kernels_carry_their_unit():
    kernels = unit_kernels(sample_units(per_kind=1))
    assert all(k.kind == "unit" and len(decode_units(k.units)) == 1 for k in kernels)
    assert len({k.name for k in kernels}) == len(kernels)


@pytest.mark.slow
def test_a_small_sweep_on_our_runtime_records_rows_a_unit_model_fits(tmp_path):
    pytest.importorskip("sklearn", reason="scikit-learn: extra not installed (the unit models are its regressors)")
    db = tmp_path / "units.csv"
    units = sample_units(per_kind=8, kinds=("gemm", "eltwise", "conv", "noop"))
    outcomes = list(run_unit_sweep(units, str(db), backends=("appopt-runtime",), threads=(1,), int8=False))
    assert all(o.status == "ok" for o in outcomes), [o.describe() for o in outcomes if o.status != "ok"]
    frame = read_results(db)
    assert len(frame) == len(units) and frame["units"].notna().all()
    convs = frame[frame["model"].str.startswith("unit_conv")]
    assert (convs["boundary_ms"] > 0).all()  # our runtime converts a lone convolution to NHWC and back
    # every lone unit also pays for staging its inputs and copying its output out; a matrix product nothing else
    gemms = frame[frame["model"].str.startswith("unit_gemm")]
    assert (gemms["boundary_ms"] > 0).all() and (gemms["boundary_ms"] < convs["boundary_ms"].max()).all()
    route = fit_units(frame).route((frame["target"].iloc[0], "appopt-runtime", "none", "NCHW", "fp32", 1))
    assert route is not None and set(route.kinds) == {"gemm", "eltwise", "conv"} and route.call_s > 0


def test_the_shipped_sweep_is_the_default_sample_so_it_can_be_measured_again():
    """The shipped database holds every unit of every round of the default sample and nothing outside it: the next
    ``record-default`` measures the same units, and ``bench units --new`` has nothing left to add."""
    from perfmodels.results_db import DEFAULT_DB
    from perfmodels.unitfit import UNIT_FAMILY

    shipped = read_results(DEFAULT_DB)
    measured = set(shipped.loc[shipped["family"] == UNIT_FAMILY, "units"])
    assert measured == {encode_units([u]) for round_ in sample_rounds() for u in round_}
    assert unmeasured(sample_units(), measured) == []


def test_sweep_rounds_leaves_out_the_unit_rows_of_later_rounds():
    import pandas as pd

    from benchmarks.sweep_rounds import rows_of_rounds

    first, second = sample_rounds()[:2]
    frame = pd.DataFrame(
        {
            "family": ["kernel-unit", "kernel-unit", "resnet"],
            "units": [encode_units([first[0]]), encode_units([second[0]]), encode_units([second[0]])],
        }
    )
    assert list(rows_of_rounds(frame, 1).index) == [0, 2]  # a suite model's units are never left out
    assert list(rows_of_rounds(frame, 2).index) == [0, 1, 2]


def test_computed_weights_are_quantised_by_onnxruntime_in_a_convolution_and_left_alone_in_a_matrix_product():
    """The fifth round's computed-weight units are what the light zoo's int8 models run: onnxruntime's dynamic
    quantiser converts such a convolution (its weights quantised on every run) and keeps such a matrix product."""
    pytest.importorskip("onnxruntime.quantization", reason="onnxruntime: extra not installed (the subject)")
    from benchmarks.engines.onnxruntime import _quantize_dynamic_uncached

    computed = [u for u in sample_rounds()[4] if u.dims.get("init_w") == 0]
    conv = next(u for u in computed if u.kind == "conv")
    gemm = next(u for u in computed if u.kind == "gemm")
    ops = {}
    for unit in (conv, gemm):
        model, _ = unit_model(unit)
        assert "ConstantOfShape" in [n.op_type for n in model.graph.node] and len(model.graph.initializer) <= 2
        quantised = onnx.load_from_string(_quantize_dynamic_uncached(model.SerializeToString()))
        ops[unit.kind] = [n.op_type for n in quantised.graph.node]
    assert "ConvInteger" in ops["conv"] and ops["conv"].count("DynamicQuantizeLinear") == 2  # input and weights
    assert "MatMulInteger" not in ops["gemm"] and "DynamicQuantizeLinear" not in ops["gemm"]


def test_the_backends_take_turns_so_each_ones_units_sample_the_same_stretches_of_the_machine(monkeypatch):
    """``turn`` units on every backend and thread count, then the next ones with the backends reversed."""
    from types import SimpleNamespace

    import benchmarks.unit_sweep as sweep

    calls: list[tuple[int, tuple[str, ...], tuple[int, ...], str]] = []

    def suite(kernels, backends, threads, settings, db, precision="fp32"):  # type: ignore[no-untyped-def]
        calls.append((len(kernels), tuple(backends), tuple(threads), precision))
        return iter([SimpleNamespace(kernel=k) for k in kernels])

    monkeypatch.setattr(sweep, "run_kernel_suite", suite)
    units = sample_units(per_kind=1, kinds=("gemm", "eltwise", "conv", "pool", "noop"))
    outcomes = list(run_unit_sweep(units, None, backends=("a", "b"), threads=(1, 2), int8=False, turn=2))
    assert len(outcomes) == len(units) and len(units) > 4
    assert [c[0] for c in calls] == [2] * (len(units) // 2) + ([len(units) % 2] if len(units) % 2 else [])
    assert [c[1] for c in calls[:3]] == [("a", "b"), ("b", "a"), ("a", "b")]
    assert {c[2] for c in calls} == {(1, 2)} and {c[3] for c in calls} == {"fp32"}
