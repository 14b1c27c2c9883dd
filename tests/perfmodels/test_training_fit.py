"""The training performance model: fits step time from features, held out by family, and serves training plans."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perfmodels.features import Device, Route, Workload
from perfmodels.fitted import fit_model
from perfmodels.results_db import make_row, read_results, write_rows
from perfmodels.targets import local_target_key
from perfmodels.training_fit import (
    FEATURES,
    PROBE_FAMILY,
    TrainingEvaluation,
    TrainingFit,
    TrainingGroupFit,
    feature_row,
    leave_one_family_out,
    step_rows,
    step_seconds,
    thread_exponent,
)

#: In ``FEATURES`` order: convolutions, matrix products, depthwise, activations, optimizer, kernel nodes.
TRUE_COEF = np.array([2.4, 1.2, 4.0, 2.0, 1.0, 30.0])
MODELS = {  # name: family, forward flops/sample, activation bytes/sample, params, nodes, light share, weighted nodes
    "mlp_a": ("mlp", 2e5, 4e3, 1e5, 8, 0.01, 3),
    "mlp_b": ("mlp", 8e5, 8e3, 4e5, 8, 0.005, 4),
    "cnn_a": ("cnn", 3e6, 2e5, 2e5, 20, 0.02, 5),
    "cnn_b": ("cnn", 1e7, 5e5, 6e5, 30, 0.01, 8),
    "res_a": ("resnet", 4e7, 2e6, 1e6, 80, 0.004, 20),
    "res_b": ("resnet", 9e7, 4e6, 3e6, 120, 0.006, 50),
    "tf_a": ("transformer", 5e6, 3e5, 4e5, 60, 0.03, 12),
    "tf_b": ("transformer", 2e7, 9e5, 1.5e6, 110, 0.02, 24),
}


def _classes(
    family: str, flops: float, nodes: int, light: float, weighted: int
) -> tuple[dict[str, float], dict[str, int]]:
    """FLOPs and nodes by op class: convolutions (``light`` of the FLOPs depthwise) in the CNN families, matrix
    products (``light`` element-wise) in the others; ``weighted`` of the nodes with weights, two of shape
    bookkeeping."""
    dense, rest = ("conv", "conv_dw") if family in ("cnn", "resnet") else ("gemm", "elementwise")
    by_ops = {dense: weighted, "elementwise": nodes - weighted - 2, "other": 2}
    return {dense: flops * (1 - light), rest: flops * light}, by_ops


def _rows(
    noise: float = 0.0, other_cpu: float = 0.0, backend: str = "appopt-runtime", tta: bool = False, models=MODELS
):
    rng = np.random.default_rng(0)
    rows = []
    for name, (family, flops, act, params, nodes, light, weighted) in models.items():
        by_flops, by_ops = _classes(family, flops, nodes, light, weighted)
        for batch in (8, 32):
            for threads, peak, gbs in ((1, 50.0, 10.0), (2, 100.0, 10.0)):  # one core's peak: no speed-up
                x = feature_row(flops, act, params, batch, peak, gbs, by_flops, by_ops, threads)
                seconds = float(TRUE_COEF @ x) * (1 + noise * rng.standard_normal())
                common = dict(
                    source="measured", target=local_target_key(), backend=backend, framework="appopt-runtime",
                    mode="training", precision="fp32", model=name, family=family, batch=batch, threads=threads,
                    scenario="training", flops_per_sample=flops, activation_bytes_per_sample=act, params=params,
                    flops_by_class=by_flops, ops_by_class=by_ops, peak_gflops=peak, bandwidth_gbs=gbs,
                    other_cpu=other_cpu, settings=json.dumps({"steps_per_epoch": 10}),
                )  # fmt: skip
                rows.append(make_row(**common, metric="ms_per_step", value=seconds * 1e3))
                if tta:
                    rows.append(make_row(**common, metric="epochs_to_target", value=3.0))
                    rows.append(make_row(**common, metric="compile_s", value=seconds + 0.2))
                    rows.append(make_row(**common, metric="seconds_to_target", value=30 * seconds + 0.2))
    return rows


def _frame(tmp_path, rows):
    path = tmp_path / "t.csv"
    write_rows(path, rows)
    return read_results(path)


def test_held_out_families_are_predicted_from_the_others(tmp_path):
    evaluation = leave_one_family_out(_frame(tmp_path, _rows(noise=0.02, tta=True)))
    assert set(evaluation.predictions["family"]) == {"mlp", "cnn", "resnet", "transformer"}
    assert evaluation.step_rmspe() < 0.10
    assert len(evaluation.time_to_target) == len(MODELS) * 4 and evaluation.tta_rmspe() < 0.10
    assert any("goal 20%" in line for line in evaluation.lines())


def test_the_per_node_probes_are_in_every_fit_and_never_held_out(tmp_path):
    """The probes (chains of tiny layers) are no architecture: no fold predicts them, each fit keeps them, and a
    route needs two architecture families besides them to be held out."""
    probes = {f"chain_{n}": (PROBE_FAMILY, 2e3 * n, 1e2 * n, 3e2 * n, 2 * n + 3, 0.5, n) for n in (4, 64)}
    rows, probe_rows = _rows(noise=0.02), _rows(noise=0.02, models=probes)
    evaluation = leave_one_family_out(_frame(tmp_path, rows + probe_rows))
    assert set(evaluation.predictions["family"]) == {"mlp", "cnn", "resnet", "transformer"}
    assert len(evaluation.predictions) == len(rows)
    without = leave_one_family_out(_frame(tmp_path, rows)).predictions["predicted"].to_numpy()
    assert not np.allclose(evaluation.predictions["predicted"].to_numpy(), without, rtol=1e-9)
    one_family = [r for r in rows if r["family"] == "mlp"] + probe_rows
    with pytest.raises(ValueError, match="single architecture family"):
        leave_one_family_out(_frame(tmp_path, one_family))


def test_busy_rows_are_left_out_unless_asked_for(tmp_path):
    frame = _frame(tmp_path, _rows(other_cpu=1.5))
    with pytest.raises(ValueError, match="measured quietly"):
        leave_one_family_out(frame)
    assert leave_one_family_out(frame, include_busy=True).step_rmspe() < 0.05


def test_a_single_family_cannot_be_held_out(tmp_path):
    rows = [r for r in _rows() if r["family"] == "mlp"]
    with pytest.raises(ValueError, match="single architecture family"):
        leave_one_family_out(_frame(tmp_path, rows))


def _workload(batch: int = 32) -> Workload:
    return Workload(3e6, 2e5, 2e5, "training", batch, total_samples=3200.0, ops_by_class={"conv": 20})


def _route(framework: str = "appopt-runtime") -> Route:
    return Route(framework, "none", (), "fp32", "NCHW", 0.5)


def test_training_plans_on_a_measured_host_use_the_fit_and_gpus_keep_the_prior(tmp_path):
    model = fit_model(_frame(tmp_path, _rows()), source="t.csv")
    cpu = Device("local", "cpu", {"fp32": 1e11}, 2e10)
    fitted = model.predict(_workload(), _route(), cpu)
    assert fitted.basis.startswith("fitted-training:")
    peak, gbs = {1.0: (50.0, 10.0), 2.0: (100.0, 10.0)}[fitted.detail["threads"]]  # this host's usable cores
    threads = int(fitted.detail["threads"])
    expected = float(TRUE_COEF @ feature_row(3e6, 2e5, 2e5, 32, peak, gbs, {}, {"conv": 20}, threads))
    assert fitted.step_seconds == pytest.approx(expected, rel=1e-3)
    assert fitted.total_seconds == pytest.approx(100 * fitted.step_seconds)
    gpu = model.predict(_workload(), _route(), Device("a100", "gpu", {"fp32": 1.9e13}, 1.5e12))
    assert gpu.basis.startswith("roofline-prior") and "no GPU training measured" in gpu.basis
    other = model.predict(_workload(), _route("tensorflow"), cpu)
    assert "no training rows for tensorflow" in other.basis


def test_the_fit_recovers_the_generating_coefficients(tmp_path):
    fit = TrainingFit.from_frame(_frame(tmp_path, _rows()))
    (group,) = fit.groups.values()
    assert np.allclose(group.coef, TRUE_COEF, rtol=1e-3) and group.train_rmspe < 1e-6


def test_models_evaluate_mode_training_prints_held_out_figures(tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    path = tmp_path / "t.csv"
    write_rows(path, _rows(noise=0.02, tta=True))
    result = CliRunner().invoke(app, ["models", "evaluate", "--mode", "training", "--db", str(path)])
    assert result.exit_code == 0, result.output
    assert "held out by family: RMSPE" in result.output and "time to target accuracy" in result.output
    bad = CliRunner().invoke(app, ["models", "evaluate", "--mode", "tuning", "--db", str(path)])
    assert bad.exit_code != 0 and "--mode: 'tuning'" in bad.output
    empty = tmp_path / "empty.csv"
    write_rows(empty, [r for r in _rows() if r["family"] == "mlp"])
    lone = CliRunner().invoke(app, ["models", "evaluate", "--mode", "training", "--db", str(empty)])
    assert lone.exit_code != 0 and "single architecture family" in lone.output


def test_a_route_measured_only_under_load_still_predicts_and_says_so(tmp_path):
    model = fit_model(_frame(tmp_path, _rows(other_cpu=1.5)), source="t.csv")
    cpu = Device("local", "cpu", {"fp32": 1e11}, 2e10)
    bf16 = Route("appopt-runtime", "none", (), "bf16", "NCHW", 0.5)
    basis = model.predict(_workload(), bf16, cpu).basis
    assert basis.startswith("fitted-training:") and "under load" in basis and "bf16 not measured" in basis


def test_a_compiled_training_route_is_predicted_from_its_own_rows():
    """torch.compile (compiler ``inductor``) and eager PyTorch share a framework: each route takes the group measured
    with its own compiler, and a compiler with no rows says it was not measured."""
    def group(backend: str, compiler: str) -> TrainingGroupFit:
        coef = (1.0,) * len(FEATURES)
        return TrainingGroupFit(backend, "pytorch", "fp32", coef, 10, ("cnn",), ("t",), 0.1, compiler=compiler)

    fit = TrainingFit(
        groups={"torch|fp32": group("torch", "none"), "torch-compile|fp32": group("torch-compile", "inductor")}
    )
    route = Route("pytorch", "inductor", ("mkl",), "fp32", "NCHW", efficiency=0.5)
    assert fit.group_for(route).backend == "torch-compile"  # type: ignore[union-attr]
    eager = Route("pytorch", "none", ("mkl",), "fp32", "NCHW", efficiency=0.5)
    assert fit.group_for(eager).backend == "torch"  # type: ignore[union-attr]
    del fit.groups["torch-compile|fp32"]
    assert fit.group_for(route).backend == "torch"  # type: ignore[union-attr]


def test_a_training_route_takes_the_group_measured_in_its_layout_and_says_when_none_was():
    """PyTorch's NHWC route (channels-last) takes the rows measured so (``torch-nhwc``), its NCHW route the rows
    measured so, or whose layout was not recorded; a layout no group measured is said in the basis."""
    def group(backend: str, layout: str, rows: int) -> TrainingGroupFit:
        coef = (1.0,) * len(FEATURES)
        return TrainingGroupFit(backend, "pytorch", "fp32", coef, rows, ("cnn",), ("t",), 0.1, layout=layout)

    fit = TrainingFit(groups={"torch|fp32": group("torch", "", 60), "torch-nhwc|fp32": group("torch-nhwc", "NHWC", 9)})
    nhwc = Route("pytorch", "none", ("onednn",), "fp32", "NHWC", efficiency=0.5)
    nchw = Route("pytorch", "none", ("onednn",), "fp32", "NCHW", efficiency=0.5)
    assert fit.group_for(nhwc).backend == "torch-nhwc"  # type: ignore[union-attr]
    assert fit.group_for(nchw).backend == "torch"  # type: ignore[union-attr]
    fit.groups["torch|fp32"] = group("torch", "NCHW", 60)
    assert fit.group_for(nchw).backend == "torch"  # type: ignore[union-attr]
    del fit.groups["torch|fp32"]
    assert fit.group_for(nchw).backend == "torch-nhwc"  # type: ignore[union-attr]
    from perfmodels.training_fit import _unmeasured

    assert _unmeasured(fit.groups["torch-nhwc|fp32"], nchw) == "; NCHW not measured"
    assert _unmeasured(fit.groups["torch-nhwc|fp32"], nhwc) == ""


def test_a_fitted_group_keeps_the_layout_its_rows_were_measured_in(tmp_path):
    rows = _rows()
    fitted = TrainingFit.from_frame(_frame(tmp_path, rows)).groups["appopt-runtime|fp32"]
    assert fitted.layout == ""  # (not recorded)
    laid_out = [{**r, "layout": "NHWC"} for r in rows]
    assert TrainingFit.from_frame(_frame(tmp_path, laid_out)).groups["appopt-runtime|fp32"].layout == "NHWC"


def test_routes_share_coefficients_so_a_sparsely_measured_route_is_still_predicted(tmp_path):
    """A second route, 1.7x slower throughout, measured on two families only: held out by family, its shared
    coefficients (fitted with the first route's rows) and its own scale predict it; alone, its few rows could not."""
    full = _rows()
    sparse = [
        make_row(**{
            **{k: v for k, v in row.items() if k not in ("row_id", "crc", "schema_version")},
            "backend": "appopt-runtime-amp", "precision": "fp16", "value": 1.7 * row["value"],
        })
        for row in full
        if row["family"] in ("mlp", "resnet")
    ]  # fmt: skip
    evaluation = leave_one_family_out(_frame(tmp_path, full + sparse))
    amp = evaluation.predictions[evaluation.predictions["backend"] == "appopt-runtime-amp"]
    assert set(amp["family"]) == {"mlp", "resnet"}
    np.testing.assert_allclose(amp["predicted"], amp["measured"], rtol=1e-3)
    fit = TrainingFit.from_frame(_frame(tmp_path, full + sparse))
    ratio = np.asarray(fit.groups["appopt-runtime-amp|fp16"].coef) / np.asarray(fit.groups["appopt-runtime|fp32"].coef)
    np.testing.assert_allclose(ratio, 1.7, rtol=1e-3)


def test_a_compiled_route_measured_on_enough_families_fits_coefficients_of_its_own(tmp_path, monkeypatch):
    """A compiler that fuses: its steps pay no per-node cost for element-wise nodes (``kernel_nodes``) and a fifth of
    the eager route's for the others. Fitted on three families with three enough, coefficients of its own predict
    each held-out family; with four needed, the route shares the eager route's at a scale of its own, which cannot."""
    from perfmodels import training_fit

    own = TRUE_COEF * np.array([1, 1, 1, 1, 1, 0.2])
    eager, fused = _rows(), []
    for row in eager:
        x = feature_row(
            row["flops_per_sample"], row["activation_bytes_per_sample"], row["params"], row["batch"],
            row["peak_gflops"], row["bandwidth_gbs"], row["flops_by_class"], row["ops_by_class"], row["threads"],
            compiler="fuser",
        )  # fmt: skip
        kept = {k: v for k, v in row.items() if k not in ("row_id", "crc", "schema_version")}
        fused.append(make_row(**{**kept, "backend": "fused", "compiler": "fuser", "value": float(own @ x) * 1e3}))
    frame = _frame(tmp_path, eager + fused)

    def held_out_error() -> float:
        predictions = leave_one_family_out(frame, nested=False).predictions
        return TrainingEvaluation._rmspe(predictions[predictions["backend"] == "fused"])

    assert training_fit.FAMILIES_FOR_OWN_COEFFICIENTS == 4
    assert held_out_error() > 0.02
    monkeypatch.setattr(training_fit, "FAMILIES_FOR_OWN_COEFFICIENTS", 3)
    assert held_out_error() < 1e-3


def test_features_split_flops_and_nodes_by_op_class():
    """Convolutions apart from matrix products, both at one core's share of the peak; depthwise at bandwidth;
    element-wise FLOPs cost nothing of their own; every node but shape bookkeeping (``other``) counts; a row without
    classes counts every FLOP a matrix product and no node."""
    by_flops = {"conv": 6e5, "conv_dw": 1e5, "gemm": 2e5, "elementwise": 3e5}
    row = feature_row(1.2e6, 0.0, 0.0, 1, 2.0, 1.0, by_flops, {"conv": 2, "conv_dw": 1, "other": 4, "norm": 3}, 2)
    x = dict(zip(FEATURES, row, strict=True))
    assert x["conv_compute"] == pytest.approx(3 * 6e5 / 1e9) and x["matmul_compute"] == pytest.approx(3 * 2e5 / 1e9)
    assert x["depthwise"] == pytest.approx(3 * 1e5 * 8 / 1e9)
    assert x["kernel_nodes"] == pytest.approx(6e-6)
    bare = dict(zip(FEATURES, feature_row(1e6, 0.0, 0.0, 1, 1.0, 1.0), strict=True))
    assert bare["matmul_compute"] == pytest.approx(3e-3) and bare["conv_compute"] == bare["kernel_nodes"] == 0.0


def test_a_step_is_never_predicted_below_its_dense_flops_at_the_peak():
    """The roofline floor: coefficients fitted on small models must not promise a large one faster than its
    convolutions and matrix products can run at the host's measured GEMM peak."""
    coef = (0.1,) * len(FEATURES)
    group = TrainingGroupFit("appopt-runtime", "appopt-runtime", "fp32", coef, 10, ("cnn",), ("t",), 0.1)
    x = feature_row(4e9, 1e6, 2.5e7, 256, 100.0, 20.0, {"conv": 4e9}, {"conv": 53})
    assert group.seconds(x) == pytest.approx(3 * 4e9 * 256 / 100e9)
    small = feature_row(1e5, 1e6, 2.5e7, 8, 100.0, 20.0, {"conv": 1e5}, {"conv": 53})
    assert group.seconds(small) == pytest.approx(float(np.dot(group.coef, small)))


def test_a_routes_thread_speed_up_is_measured_from_its_own_rows(tmp_path):
    """The exponent is the median over (model, batch) of log(t_1 / t_2) / log 2; a model at one thread count says
    nothing, a step slower on more threads counts as no speed-up, and a route without pairs runs at one core."""
    rows = step_rows(_frame(tmp_path, _rows()))
    assert thread_exponent(rows) == pytest.approx(0.0, abs=1e-9)  # equal per-core peaks, no exponent in the truth
    timed = rows.assign(value=rows["value"] / np.where(rows["threads"] == 2, 1.6, 1.0))
    assert thread_exponent(timed) == pytest.approx(np.log2(1.6))
    slower = rows.assign(value=rows["value"] * np.where(rows["threads"] == 2, 1.3, 1.0))
    assert thread_exponent(slower) == 0.0 and thread_exponent(rows[rows["threads"] == 1]) == 0.0


def test_a_route_that_speeds_up_with_threads_is_predicted_at_both_thread_counts(tmp_path):
    """Rows whose per-sample work runs 2 ** 0.7 faster on two threads (the per-step terms not at all): the fit
    takes the route's exponent from its rows and predicts each family held out at both counts."""
    rows = []
    for row in _rows():
        if row["threads"] == 2:
            x = feature_row(
                row["flops_per_sample"], row["activation_bytes_per_sample"], row["params"], row["batch"],
                row["peak_gflops"], row["bandwidth_gbs"], row["flops_by_class"], row["ops_by_class"], 2,
            )  # fmt: skip
            value = float(step_seconds(TRUE_COEF, x, 2, 0.7)) * 1e3
            row = make_row(**{**{k: v for k, v in row.items() if k not in ("row_id", "crc", "schema_version")},
                              "value": value})  # fmt: skip
        rows.append(row)
    frame = _frame(tmp_path, rows)
    (group,) = TrainingFit.from_frame(frame).groups.values()
    assert 0.4 < group.thread_exponent < 0.75
    evaluation = leave_one_family_out(frame)
    assert evaluation.step_rmspe() < 0.15


def test_the_shipped_rows_held_out_by_family_bound_the_step_and_time_to_target_errors():
    """The shipped training rows, each family predicted by a fit of the others (docs/decisions.md, 2026-11-26).
    Issue 17's goals: step time 20% (NOT met), time to target 25% (21.0%: met). On the suite of nine families with
    the full-size tasks the step is 28.8% over 332 rows (37.7% before appopt-runtime's two priced passes shared one
    coefficient, XLA's depthwise convolutions were priced by XLA's own units and compiled routes fitted coefficients
    of their own; 30.3% before mixed precision's casts were priced): PyTorch 27.5%, appopt-runtime 25.4% (30.2%
    before the casts), TensorFlow 33.0%. Bounded here so none regresses. Needs the shipped rows refeatured by the
    fixed analyser (``appopt bench refresh-features``)."""
    from perfmodels.results_db import DEFAULT_DB

    evaluation = leave_one_family_out(read_results(DEFAULT_DB))
    assert len(evaluation.predictions) >= 320 and len(evaluation.time_to_target) >= 90
    assert set(evaluation.predictions["family"]) >= {"vgg", "densenet", "vit", "rnn"}
    assert evaluation.tta_rmspe() < 0.25
    predictions = evaluation.predictions

    def rmspe(*backends: str) -> float:
        chosen = predictions[predictions["backend"].isin(backends)]
        assert len(chosen) >= 50 * len(backends) // 2
        return TrainingEvaluation._rmspe(chosen)

    assert rmspe("torch", "torch-compile") < 0.29  # 29.4% sharing eager's coefficients
    assert rmspe("appopt-runtime", "appopt-runtime-amp") < 0.27  # 43.5% a coefficient per pass; 30.2% casts unpriced
    assert rmspe("appopt-runtime", "appopt-runtime-amp", "torch", "torch-compile") < 0.28
    assert rmspe("keras", "keras-xla") < 0.35  # 38.8% with XLA's depthwise priced as PyTorch's
    assert evaluation.step_rmspe() < 0.30


def test_a_compiled_step_dispatches_no_element_wise_node():
    """A graph compiler fuses element-wise nodes into its kernels: on its route a step pays the per-node cost of the
    others only (a GRU's gates: 188 of its 285 nodes)."""
    from perfmodels.training_fit import ELEMENTWISE_CLASS

    by_ops = {"gemm": 3, ELEMENTWISE_CLASS: 188, "other": 48}
    nodes = FEATURES.index("kernel_nodes")
    assert feature_row(1e6, 0.0, 0.0, 1, 1.0, 1.0, {"gemm": 1e6}, by_ops)[nodes] == pytest.approx(191e-6)
    compiled = feature_row(1e6, 0.0, 0.0, 1, 1.0, 1.0, {"gemm": 1e6}, by_ops, compiler="inductor")
    assert compiled[nodes] == pytest.approx(3e-6)


def test_a_compiled_routes_held_out_family_is_priced_without_its_element_wise_nodes(tmp_path):
    """Steps of a compiled route that pay no per-node cost for element-wise nodes: held out by family, each is
    predicted (with the element-wise nodes counted, a family whose share of them differs from the others' is not)."""
    rows = []
    for row in _rows(backend="compiled"):
        fused = {k: v for k, v in row["ops_by_class"].items() if k != "elementwise"}
        x = feature_row(
            row["flops_per_sample"], row["activation_bytes_per_sample"], row["params"], row["batch"],
            row["peak_gflops"], row["bandwidth_gbs"], row["flops_by_class"], fused, row["threads"],
        )  # fmt: skip
        rows.append({**row, "compiler": "inductor", "value": float(TRUE_COEF @ x) * 1e3})
    evaluation = leave_one_family_out(_frame(tmp_path, rows), shipped={}, nested=False)
    assert len(evaluation.predictions) == len(rows) and evaluation.step_rmspe() < 0.01  # 3.6% with them counted
