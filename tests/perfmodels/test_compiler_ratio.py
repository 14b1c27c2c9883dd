"""A graph compiler's route estimated through its framework's plain route times a fitted ratio (compiler_ratio)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from perfmodels.compiler_ratio import RATIO_FEATURES, _huber_ridge, fit_ratios, paired_rows, ratio_features
from perfmodels.evaluate import leave_one_architecture_out, scores
from perfmodels.fit import query_features, training_rows
from perfmodels.fitted import fit_model
from tests.perfmodels.test_fit import DEVICE, MODELS, by_class, route, synthetic_frame, workload


def true_ratio(name: str, batch: int) -> float:
    """The compiler's speed-up in this synthetic world: 2x faster on matrix-product models, 3x slower on
    convolutional ones, a little better at batch 8."""
    classes = by_class(name)
    total = sum(classes.values())
    gemm = (classes["gemm"] + classes["gemv"]) / total
    return math.exp(math.log(3.0) * (1 - gemm) + math.log(0.5) * gemm) * (0.9 if batch == 8 else 1.0)


def with_compiler(frame: pd.DataFrame, ratio=true_ratio, compiler: str = "tvm") -> pd.DataFrame:
    """``frame`` plus the ``fast`` framework's rows through ``compiler``, each ``ratio(model, batch)`` times slower."""
    rows = frame[frame["framework"] == "fast"].copy()
    scale = np.array([ratio(m, int(b)) for m, b in zip(rows["model"], rows["batch"], strict=True)])
    rows["compiler"], rows["backend"] = compiler, f"fast-{compiler}"
    rows["value"] *= scale
    rows["median_ms"] *= scale
    rows["row_id"] = [f"c{i:031x}" for i in range(len(rows))]
    return pd.concat([frame, rows], ignore_index=True)


def test_ratio_features_read_the_op_classes_they_name():
    x = query_features({"gemm": 3e8, "conv": 1e8}, 4e8, 4e7, 0.0, 8, "fp32", ops_by_class={"conv": 9, "gemm": 90})
    f = dict(zip(RATIO_FEATURES, ratio_features(x, 8, 2), strict=True))
    assert f["gemm_share"] == pytest.approx(0.75) and f["conv_share"] == pytest.approx(0.25)
    assert f["other_share"] == f["norm_share"] == f["gemv_share"] == f["conv_dw_share"] == 0.0
    assert f["log_flops_per_sample"] == pytest.approx(math.log10(4e8))
    assert f["log_nodes"] == pytest.approx(math.log10(100))
    assert f["log_batch"] == 3.0 and f["log_threads"] == 1.0


def test_pairs_join_the_same_model_batch_and_threads_of_the_plain_route():
    rows = training_rows(with_compiler(synthetic_frame()))
    pairs = paired_rows(rows)
    assert len(pairs) == len(rows[rows["compiler"] == "tvm"]) == 2 * len(MODELS)
    assert set(pairs["base_layout"]) == {"NCHWc"}  # the fast framework's own layout, not the other framework's
    expected = [math.log(true_ratio(m, int(b))) for m, b in zip(pairs["model"], pairs["batch"], strict=True)]
    assert pairs["log_ratio"].to_numpy() == pytest.approx(expected, rel=1e-9)


def test_the_fitted_ratio_follows_the_op_mix_and_batch():
    (ratio,) = fit_ratios(training_rows(with_compiler(synthetic_frame())))
    assert ratio.usable and ratio.route.compiler == "tvm" and ratio.base_layout == "NCHWc"
    for name in ("cnn_a", "tx", "mlp", "vgg"):
        for batch in (1, 8):
            x = query_features(by_class(name), sum(by_class(name).values()), MODELS[name][7], 0.0, batch, "fp32")
            assert ratio.ratio(x, batch, 4) == pytest.approx(true_ratio(name, batch), rel=0.15), (name, batch)
    assert math.isfinite(ratio.heldout_log_error) and ratio.heldout_log_error < 0.2
    assert ratio.describe().endswith(
        f"ratio to fast/none/NCHWc/fp32 from 28 pairs of {len(ratio.families)} families,"
        f" held-out log error {ratio.heldout_log_error:.2f}"
    )


def test_a_model_unlike_every_pair_gets_a_ratio_within_the_measured_ones():
    (ratio,) = fit_ratios(training_rows(with_compiler(synthetic_frame())))
    measured = [true_ratio(name, batch) for name in MODELS for batch in (1, 8)]
    for classes, batch in (({"gemv": 1e12}, 64), ({"conv_dw": 1e3}, 1), ({"lrn": 1e9, "conv": 1.0}, 512)):
        x = query_features(classes, sum(classes.values()), 1e3, 0.0, batch, "fp32", ops_by_class={"conv": 5000})
        assert min(measured) * (1 - 1e-9) <= ratio.ratio(x, batch, 64) <= max(measured) * (1 + 1e-9), classes


def test_an_outlying_pair_barely_moves_the_robust_fit():
    rng = np.random.default_rng(0)
    z = rng.standard_normal((40, 2))
    t = 0.3 + 0.5 * z[:, 0] + 0.01 * rng.standard_normal(40)
    t[0] += 5.0  # one pair 150x off
    a, b = _huber_ridge(z, t, ridge=1e-4)
    assert a == pytest.approx(0.3, abs=0.02) and b[0] == pytest.approx(0.5, abs=0.02)
    plain = np.linalg.lstsq(np.hstack([np.ones((40, 1)), z]), t, rcond=None)[0]
    assert abs(plain[0] - 0.3) > 0.1  # least squares is pulled far off


def test_held_out_compiler_rows_are_predicted_without_their_familys_measurements():
    """Held out by family: a family's compiler rows multiplied by 100 change no prediction of that family (its own
    pairs are never in the ratio it is predicted with), and the ratio carries the other families' figures there."""
    frame = with_compiler(synthetic_frame(noise=0.02))
    evaluation = leave_one_architecture_out(frame, ridge=0.0, nested=False)
    p = evaluation.predictions
    compiled = p[p["compiler"] == "tvm"]
    assert compiled["ratio"].notna().all() and p[p["compiler"] == "none"]["ratio"].isna().all()
    assert scores(compiled, "predicted").rmspe < 0.20  # (the plain route it stands on errs 9% here)
    assert evaluation.fitted.mean_regret <= 1.05
    # the choice is printed with the frameworks alone and with the compiler's routes among them
    lines = [line.strip() for line in evaluation.lines()]
    assert any(line.startswith("frameworks alone") for line in lines)
    assert any(line.startswith("+ tvm") for line in lines)
    family = "transformer"
    spoiled = frame.copy()
    mine = (spoiled["compiler"] == "tvm") & (spoiled["family"] == family)
    spoiled.loc[mine, ["value", "median_ms"]] *= 100
    again = leave_one_architecture_out(spoiled, ridge=0.0, nested=False).predictions
    ours = ["model", "batch", "framework", "compiler"]
    before = p[p["family"] == family].set_index(ours)["predicted"].sort_index()
    after = again[again["family"] == family].set_index(ours)["predicted"].sort_index()
    assert after.to_numpy() == pytest.approx(before.to_numpy(), rel=1e-9)


def test_the_planner_joins_a_compiler_routes_own_fit_with_its_framework_times_the_ratio():
    model = fit_model(with_compiler(synthetic_frame()))
    assert any("fast/tvm/NCHWc/fp32: time as a ratio to fast/none/NCHWc/fp32" in line for line in model.describe())
    for name, batch in (("tx", 1), ("cnn_a", 8)):
        work = workload(name, batch)
        compiled = model.predict(work, route("fast", "NCHWc", compiler="tvm"), DEVICE)
        plain = model.predict(work, route("fast", "NCHWc"), DEVICE)
        assert "and fast x the tvm ratio" in compiled.basis and compiled.basis.startswith("fitted:")
        factor, detail = compiled.detail["compiler_ratio"], compiled.detail
        assert detail["framework_step_s"] == pytest.approx(plain.step_seconds, rel=1e-9)
        weight = detail["whole_model_weight"]
        assert compiled.step_seconds == pytest.approx(
            detail["whole_model_step_s"] ** weight * (plain.step_seconds * factor) ** (1 - weight), rel=1e-9
        )
        # (the ridge pulls the op-mix slopes toward the median ratio: near, not at, the truth)
        assert factor == pytest.approx(true_ratio(name, batch), rel=0.3)
        assert compiled.step_seconds == pytest.approx(true_ratio(name, batch) * plain.step_seconds, rel=0.3)
    # transformers faster through the compiler, convolutional models slower: the choice follows the ratio
    tx = workload("tx", 1)
    assert (
        model.predict(tx, route("fast", "NCHWc", compiler="tvm"), DEVICE).step_seconds
        < model.predict(tx, route("fast", "NCHWc"), DEVICE).step_seconds
    )


def _thin(frame: pd.DataFrame, models: tuple[str, ...]) -> pd.DataFrame:
    """``with_compiler`` at a flat 3.5x slower, its compiler rows kept on ``models`` at batch 1 only."""
    rows = with_compiler(frame, ratio=lambda name, batch: 3.5, compiler="tvm-tuned")
    keep = (rows["compiler"] != "tvm-tuned") | (rows["model"].isin(models) & (rows["batch"] == 1))
    return rows[keep].reset_index(drop=True)


def test_a_thinly_measured_compiler_carries_its_median_ratio_instead_of_tying_with_its_framework():
    model = fit_model(_thin(synthetic_frame(), ("cnn_a", "dw", "tx", "shuffle")))  # 4 pairs of 4 families
    ratio = next(q for q in model.result.ratios if q.route.compiler == "tvm-tuned")
    assert not ratio.usable and ratio.pairs == 4 and ratio.median_ratio == pytest.approx(3.5)
    work = workload("cnn_b", 1)
    plain = model.predict(work, route("fast", "NCHWc"), DEVICE)
    tuned = model.predict(work, route("fast", "NCHWc", compiler="tvm-tuned"), DEVICE)
    assert tuned.step_seconds == pytest.approx(3.5 * plain.step_seconds, rel=1e-9)
    assert "x the tvm-tuned median ratio 3.5 (4 pairs of 4 families, too few to fit)" in tuned.basis


def test_three_pairs_or_one_family_are_too_few_even_for_the_median():
    for models in (("cnn_a", "dw", "tx"), ("tx", "tx_small")):
        model = fit_model(_thin(synthetic_frame(), models))
        ratio = next(q for q in model.result.ratios if q.route.compiler == "tvm-tuned")
        assert ratio.median_ratio is None
        work = workload("cnn_b", 1)
        tuned = model.predict(work, route("fast", "NCHWc", compiler="tvm-tuned"), DEVICE)
        assert tuned.step_seconds == pytest.approx(model.predict(work, route("fast", "NCHWc"), DEVICE).step_seconds)
        assert "tvm-tuned not measured here" in tuned.basis


def test_a_preset_nothing_was_measured_on_carries_the_compiler_ratio_of_a_host_of_its_instruction_set():
    from perfmodels import Device

    frame = with_compiler(synthetic_frame()).assign(cpu_flags="avx2 avx512f fma sse4_2")
    model = fit_model(frame)
    work = workload("tx", 1)
    for arch, carried in (("x86_64", True), ("aarch64", False), ("", False)):
        preset = Device("some-preset", "cpu", {"fp32": 2e12}, 200e9, arch=arch)
        compiled = model.predict(work, route("fast", "NCHWc", compiler="tvm"), preset)
        plain = model.predict(work, route("fast", "NCHWc"), preset)
        if carried:  # the x86 host's fits, the compiler's ratio among them, carried by the machines' descriptors
            assert " via descriptors (" in compiled.basis and "x the tvm ratio (" in compiled.basis, compiled.basis
            assert compiled.detail["compiler_ratio"] == pytest.approx(true_ratio("tx", 1), rel=0.3)
            assert compiled.step_seconds / plain.step_seconds == pytest.approx(true_ratio("tx", 1), rel=0.3)
        else:  # another instruction set (or none known): the prior alone, as before
            assert "ratio measured on" not in compiled.basis
            assert compiled.step_seconds == pytest.approx(plain.step_seconds)
