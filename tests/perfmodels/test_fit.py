"""Fitting, predicting and evaluating on synthetic measurements whose true costs are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfmodels import Device, Route, Workload
from perfmodels.evaluate import WEIGHT_GRID, decisions, leave_one_architecture_out, nested_weights, scores
from perfmodels.fit import FEATURES, fit, query_features, training_rows
from perfmodels.fitted import FittedModel, fit_model
from perfmodels.results_db import make_row, to_frame
from perfmodels.roofline import RooflinePrior
from tests.rows import fit_row

TARGET = "test-cpu-4c"
#: True costs per route, in ``FEATURES`` order: conv, depthwise conv, gemm, gemv, norm, LRN, other (s/FLOP),
#: activations, hot, cached and streamed gemv weights (s/byte), conv nodes, other nodes (s/node), queries (s/query).
TRUTH = {
    ("fast", "NCHWc"): (
        *(1 / 150e9, 1 / 10e9, 1 / 120e9, 1 / 60e9, 1 / 1e9, 1 / 0.05e9, 1 / 5e9),
        *(1 / 20e9, 1 / 100e9, 1 / 60e9, 1 / 20e9),
        *(3e-6, 1e-6, 5e-6),
    ),
    ("slow", "NCHW"): (
        *(1 / 60e9, 1 / 3e9, 1 / 90e9, 1 / 30e9, 1 / 0.5e9, 1 / 0.1e9, 1 / 2e9),
        *(1 / 8e9, 1 / 50e9, 1 / 30e9, 1 / 10e9),
        *(3e-5, 2e-5, 4e-5),
    ),
}
#: name: (family, conv, depthwise conv, gemm, gemv, norm, other FLOPs, activation bytes, nodes) per sample; every
#: cost is exercised by at least two families and the overheads by tiny models of several, as in the real suite.
MODELS = {
    "cnn_a": ("cnn", 4e9, 0.0, 0.0, 4e6, 0.0, 2e7, 5e7, 120),
    "cnn_b": ("cnn", 2e9, 0.0, 0.0, 1e6, 0.0, 1e7, 3e7, 60),
    "dw": ("depthwise", 3e8, 2e7, 0.0, 2e6, 0.0, 1e7, 6e7, 100),
    "shuffle": ("shufflenet", 1.5e8, 1e7, 0.0, 1e6, 0.0, 2e7, 4e7, 200),
    "tx": ("transformer", 0.0, 0.0, 9e8, 0.0, 2e6, 5e6, 3e7, 140),
    "tx_small": ("transformer", 0.0, 0.0, 5e7, 0.0, 3e5, 1e6, 3e6, 70),
    "mlp": ("mlp", 0.0, 0.0, 0.0, 4e6, 0.0, 2e3, 1e4, 5),
    "autoencoder": ("mlp", 0.0, 0.0, 0.0, 5e5, 0.0, 2e3, 1e4, 19),
    "vgg": ("vgg", 2e10, 0.0, 0.0, 2.5e8, 0.0, 1e7, 1e8, 45),
    "alex": ("alexnet", 1.4e9, 0.0, 0.0, 1.2e8, 3e6, 1e6, 1e7, 25),
    "inc": ("inception", 1.5e9, 0.0, 0.0, 2e6, 3e6, 2e7, 4e7, 230),
    "lenet": ("lenet", 6e5, 0.0, 0.0, 1e6, 0.0, 1e4, 5e4, 12),
    "rnn": ("rnn", 0.0, 0.0, 2e7, 2e6, 1e5, 1e6, 1e6, 30),
    "kws": ("ds-cnn", 4e6, 5e5, 0.0, 2e3, 0.0, 5e4, 3e5, 21),
}


#: Models whose normalisation is LRN (the others': LayerNorm).
LRN_MODELS = ("alex", "inc")


def by_class(name: str) -> dict[str, float]:
    _, conv, dw, gemm, gemv, norm, other, _, _ = MODELS[name]
    lrn = norm if name in LRN_MODELS else 0.0
    return {
        "conv": conv,
        "conv_dw": dw,
        "gemm": gemm,
        "gemv": gemv,
        "norm": norm - lrn,
        "lrn": lrn,
        "elementwise": other,
    }


def ops_by_class(name: str) -> dict[str, int]:
    """A third of a convolutional model's nodes are convolutions."""
    nodes = MODELS[name][8]
    convs = nodes // 3 if MODELS[name][1] or MODELS[name][2] else 0
    return {"conv": convs, "elementwise": nodes - convs}


def model_features(name: str, batch: int) -> np.ndarray:
    classes = by_class(name)
    act = MODELS[name][7]
    return query_features(classes, sum(classes.values()), act, 0.0, batch, "fp32", ops_by_class=ops_by_class(name))


def synthetic_frame(noise: float = 0.0, seed: int = 0, threads: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for (framework, layout), coef in TRUTH.items():
        for name, (family, *_, act, _nodes) in MODELS.items():
            for batch in (1, 8):
                classes = by_class(name)
                x = model_features(name, batch)
                seconds = float(np.dot(coef, x)) * (1 + noise * rng.standard_normal())
                rows.append(
                    make_row(
                        source="measured",
                        target=TARGET,
                        backend=framework,
                        framework=framework,
                        compiler="none",
                        layout=layout,
                        precision="fp32",
                        threads=threads,
                        mode="inference",
                        model=name,
                        family=family,
                        batch=batch,
                        flops_per_sample=sum(classes.values()),
                        flops_by_class=classes,
                        ops_by_class=ops_by_class(name),
                        activation_bytes_per_sample=act,
                        params=1e6,
                        scenario="SingleStream",
                        metric="p90_latency_ms",
                        value=seconds * 1e3,
                        median_ms=seconds * 1e3,
                        peak_gflops=200.0,
                        bandwidth_gbs=20.0,
                    )
                )
    return to_frame(rows)


def workload(name: str, batch: int = 1, mode: str = "inference") -> Workload:
    classes = by_class(name)
    return Workload(
        sum(classes.values()),
        MODELS[name][7],
        1e6,
        mode,  # type: ignore[arg-type]
        batch,
        flops_by_class=classes,
        ops_by_class=ops_by_class(name),
        model_name=name,
    )


def route(framework: str = "fast", layout: str = "NCHWc", precision: str = "fp32", compiler: str = "none") -> Route:
    return Route(framework, compiler, ("lib",), precision, layout, efficiency=0.5)


DEVICE = Device(TARGET, "cpu", {"fp32": 200e9, "int8": 800e9}, 20e9)


def test_fit_recovers_known_costs_from_exact_data():
    result = fit(synthetic_frame(), ridge=0.0, overhead_ridge=0.0)
    assert len(result.groups) == 2
    for group in result.groups:
        truth = TRUTH[(group.route.framework, group.route.layout)]
        assert group.train_rmspe < 0.02 and group.usable
        x = query_features({"conv": 1e9, "gemm": 1e8, "norm": 1e6, "gemv": 1e6}, 1.101e9, 2e7, 0.0, 4, "fp32", 80)
        assert group.seconds(x) == pytest.approx(float(np.dot(truth, x)), rel=0.03)
        tiny = model_features("lenet", 1)  # mostly per-query and per-node overhead
        assert group.seconds(tiny) == pytest.approx(float(np.dot(truth, tiny)), rel=0.03)


def test_leave_one_architecture_out_meets_the_goals_on_lightly_noisy_data():
    # the linear cost model is exactly right for this data, so no pull toward the prior is needed
    evaluation = leave_one_architecture_out(synthetic_frame(noise=0.03), ridge=0.0)
    assert evaluation.fitted.rmspe < 0.15
    assert evaluation.fitted.mean_regret <= 1.10
    assert evaluation.fitted.spearman > 0.95
    assert set(evaluation.predictions["family"]) == {m[0] for m in MODELS.values()}
    assert evaluation.prior.rmspe > evaluation.fitted.rmspe  # fitting must beat the uncorrected prior here
    assert any("fitted model" in line for line in evaluation.lines())
    # with its own family in the fit, a row is predicted about as well as the noise allows
    assert evaluation.in_sample is not None and evaluation.in_sample.rmspe <= evaluation.fitted.rmspe
    assert any(line.startswith("in-sample fit") for line in evaluation.lines())


def test_nested_weights_choose_each_familys_weight_without_its_measurements():
    """The whole-model fit's weight for a held-out family comes from the other families alone: unit sums far off on
    one family pull every other family's weight up, never its own."""
    frame = synthetic_frame(noise=0.03)
    data = training_rows(frame)
    exact = {index: float(row["y"]) for index, row in data.iterrows()}  # unit sums as good as it gets: weight 0
    weights = nested_weights(frame, data, exact, ridge=0.0)
    assert set(weights) == set(data["family"]) and set(weights.values()) == {0.0}
    family = "cnn"
    off = {index: y * (3.0 if data.loc[index, "family"] == family else 1.0) for index, y in exact.items()}
    again = nested_weights(frame, data, off, ridge=0.0)
    assert again[family] == 0.0
    assert all(again[other] > 0.0 for other in again if other != family)
    assert max(again.values()) <= max(WEIGHT_GRID)


def test_leave_one_architecture_out_scores_the_nested_weight_too():
    evaluation = leave_one_architecture_out(synthetic_frame(noise=0.03), ridge=0.0)
    # no unit sweeps in this frame: the combination is the whole-model fit whatever the weight
    assert evaluation.nested is not None and evaluation.nested.rmspe == pytest.approx(evaluation.fitted.rmspe)
    assert any(line.strip().startswith("nested weight") for line in evaluation.lines())
    assert leave_one_architecture_out(synthetic_frame(noise=0.03), ridge=0.0, nested=False).nested is None


def _two_decisions(y: list[float], predicted: list[float]) -> pd.DataFrame:
    """Two decisions (models a and b) of two routes each (fw/none, fw/jit) with these measured and predicted s."""
    return pd.DataFrame(
        {
            "target": ["t"] * 4,
            "threads": [1] * 4,
            "model": ["a", "a", "b", "b"],
            "batch": [1] * 4,
            "precision": ["fp32"] * 4,
            "framework": ["fw"] * 4,
            "compiler": ["none", "jit", "none", "jit"],
            "layout": ["NCHW"] * 4,
            "y": y,
            "predicted": predicted,
        }
    )


def test_scores_compute_regret_against_the_measured_best():
    s = scores(_two_decisions([1.0, 2.0, 1.0, 3.0], [2.0, 1.0, 1.0, 2.0]), "predicted")
    assert s.max_regret == pytest.approx(2.0)  # model a: picked the 2.0 s route over the 1.0 s one
    assert s.mean_regret == pytest.approx(1.5)
    assert s.top1_hits == pytest.approx(0.5)
    assert s.within_10pct == pytest.approx(0.25)


def test_the_decision_table_names_the_fastest_and_the_first_ranked_route_worst_first():
    table = decisions(_two_decisions([1.0, 2.0, 1.0, 1.2], [2.0, 1.5, 1.0, 2.0]), "predicted")
    assert list(table["model"]) == ["a", "b"]  # worst first
    worst = table.iloc[0]
    assert worst["regret"] == pytest.approx(2.0)
    assert (worst["best"], worst["chosen"]) == ("fw/none/NCHW", "fw/jit/NCHW")
    assert (worst["best_ms"], worst["best_predicted_ms"]) == pytest.approx((1e3, 2e3))
    assert (worst["chosen_ms"], worst["chosen_predicted_ms"]) == pytest.approx((2e3, 1.5e3))
    assert table.iloc[1]["regret"] == pytest.approx(1.0)


def test_fitted_predictions_use_measurements_and_say_so():
    model = fit_model(synthetic_frame())
    fast = model.predict(workload("cnn_a"), route("fast", "NCHWc"), DEVICE)
    slow = model.predict(workload("cnn_a"), route("slow", "NCHW"), DEVICE)
    assert fast.basis == slow.basis == f"fitted:{TARGET}"
    x = model_features("cnn_a", 1)
    group = model.anchor(workload("cnn_a"), route("fast", "NCHWc"), DEVICE)
    assert group is not None and fast.step_seconds == pytest.approx(group.seconds(x))
    assert fast.step_seconds == pytest.approx(float(np.dot(TRUTH[("fast", "NCHWc")], x)), rel=0.25)
    assert fast.step_seconds < slow.step_seconds
    assert fast.detail["correction"] == pytest.approx(fast.step_seconds / fast.detail["prior_step_s"])


def test_unmeasured_precision_scales_the_nearest_measurement_by_the_prior():
    model = fit_model(synthetic_frame())
    fp32 = model.predict(workload("cnn_a"), route(precision="fp32"), DEVICE)
    int8 = model.predict(workload("cnn_a"), route(precision="int8"), DEVICE)
    assert int8.basis == f"fitted:{TARGET} x prior(precision)"
    prior = RooflinePrior()
    ratio = (
        prior.predict(workload("cnn_a"), route(precision="int8"), DEVICE).step_seconds
        / prior.predict(workload("cnn_a"), route(precision="fp32"), DEVICE).step_seconds
    )
    assert int8.step_seconds == pytest.approx(fp32.step_seconds * ratio)


@pytest.mark.parametrize(
    ("work", "rt", "device"),
    [
        (workload("cnn_a"), route("tensorflow", "NHWC"), DEVICE),  # unmeasured framework
        (workload("cnn_a", mode="training"), route(), DEVICE),  # no training data
        (workload("cnn_a"), route(), Device("other-cpu", "cpu", {"fp32": 1e12}, 1e11)),  # another machine
        (workload("cnn_a"), route(), Device("a100", "gpu", {"fp32": 19.5e12}, 1.5e12)),
        (workload("cnn_a"), route(), Device(TARGET, "cpu", {"fp32": 200e9}, 20e9, nodes=4)),
    ],
)
def test_without_matching_measurements_the_prior_answers(work, rt, device):
    model = fit_model(synthetic_frame())
    prediction = model.predict(work, rt, device)
    assert prediction.basis == "roofline-prior"
    assert prediction == RooflinePrior().predict(work, rt, device)


def test_the_local_device_maps_to_this_machine(monkeypatch):
    import perfmodels.fitted as fitted

    monkeypatch.setattr(fitted, "local_target_key", lambda: TARGET)
    monkeypatch.setattr(fitted, "usable_cores", lambda: 4)
    model = fit_model(synthetic_frame())
    local = Device("local", "cpu", {"fp32": 100e9}, 10e9)
    assert model.predict(workload("mlp"), route(), local).basis == f"fitted:{TARGET}"


def test_threads_closest_to_the_machine_are_preferred(monkeypatch):
    import perfmodels.fitted as fitted

    monkeypatch.setattr(fitted, "local_target_key", lambda: TARGET)
    monkeypatch.setattr(fitted, "usable_cores", lambda: 2)
    frame = pd.concat([synthetic_frame(threads=1), synthetic_frame(threads=2), synthetic_frame(threads=4)])
    model = FittedModel(fit(frame))
    prediction = model.predict(workload("cnn_b"), route(), Device("local", "cpu", {"fp32": 1e11}, 1e10))
    assert prediction.detail["threads"] == 2.0


def test_features_put_unclassified_flops_in_other():
    x = query_features({"conv": 1.0}, 3.0, 0.0, 0.0, 2, "fp32")
    assert dict(zip(FEATURES, x, strict=True))["other_flops"] == pytest.approx(4.0)
    assert dict(zip(FEATURES, query_features({}, 5.0, 0.0, 0.0, 1, "fp32"), strict=True))["gemm_flops"] == 5.0


def test_gemv_weights_are_read_once_per_query_and_spill_past_the_cache():
    from perfmodels.fit import CACHED_PARAM_BYTES, HOT_PARAM_BYTES

    small = dict(zip(FEATURES, query_features({"gemv": 2e6}, 2e6, 0.0, 0.0, 8, "fp32", 3), strict=True))
    assert small["gemv_flops"] == 16e6  # FLOPs scale with the batch …
    assert small["gemv_weight_bytes_hot"] + small["gemv_weight_bytes_cached"] == 4e6  # … the weights do not
    assert small["gemv_weight_bytes_hot"] == HOT_PARAM_BYTES  # the first MiB stays in a core's own cache
    assert small["gemv_weight_bytes_streamed"] == 0.0 and small["other_nodes"] == 3 and small["queries"] == 1
    big = dict(zip(FEATURES, query_features({"gemv": 1e8}, 1e8, 0.0, 0.0, 1, "int8"), strict=True))
    assert big["gemv_weight_bytes_hot"] + big["gemv_weight_bytes_cached"] == CACHED_PARAM_BYTES
    assert big["gemv_weight_bytes_streamed"] == pytest.approx(0.5e8 - CACHED_PARAM_BYTES)  # int8: 1 byte each
    dw_nodes = query_features({}, 1.0, 0.0, 0.0, 1, "fp32", ops_by_class=ops_by_class("dw"))
    counted = dict(zip(FEATURES, dw_nodes, strict=True))
    assert counted["conv_nodes"] == 33 and counted["other_nodes"] == 67


def test_a_rate_the_rows_barely_exercise_stays_at_its_physical_value():
    from perfmodels.fit import fit_weights

    rng = np.random.default_rng(1)
    x = np.column_stack([rng.uniform(1e9, 5e9, 12), rng.uniform(0, 1e3, 12)])  # column 2: negligible in every row
    y = x[:, 0] / 100e9
    prior = np.array([1 / 150e9, 1 / 10e9])
    w = fit_weights(x, y, prior, ridge=0.01, groups=())
    assert w[0] == pytest.approx(1 / 100e9, rel=0.02)  # the data decides what it can
    assert w[1] == pytest.approx(prior[1], rel=0.05)  # the rest stays at the prior, not at an arbitrary value


def test_an_unexercised_rate_takes_the_efficiency_of_its_group():
    from perfmodels.fit import fit_weights

    rng = np.random.default_rng(2)
    x = np.column_stack([rng.uniform(1e9, 5e9, 12), np.zeros(12), rng.uniform(1e6, 1e8, 12)])
    y = x[:, 0] / 50e9 + x[:, 2] / 1e9  # the first rate runs at a third of its prior (150 GFLOP/s)
    prior = np.array([1 / 150e9, 1 / 150e9, 1 / 5e9])
    w = fit_weights(x, y, prior, ridge=0.01, groups=((0, 1), (2,)))
    assert w[0] == pytest.approx(1 / 50e9, rel=0.03) and w[2] == pytest.approx(1 / 1e9, rel=0.03)
    assert w[1] == pytest.approx(w[0], rel=0.1)  # no row uses it: it follows its group, not the roofline


def test_a_workload_far_below_the_fitted_range_gets_the_prior_and_says_so():
    frame = synthetic_frame()
    big_only = frame[frame["model"].isin(["cnn_a", "cnn_b", "vgg", "tx", "alex", "inc"])]
    model = fit_model(big_only)
    prediction = model.predict(workload("lenet"), route(), DEVICE)
    assert prediction.basis == f"roofline-prior (below the fitted range of {TARGET})"
    assert prediction.step_seconds == RooflinePrior().predict(workload("lenet"), route(), DEVICE).step_seconds
    # with tiny models from several families in the data, the same workload is predicted from the fit
    fitted = fit_model(frame).predict(workload("lenet"), route(), DEVICE)
    truth = float(np.dot(TRUTH[("fast", "NCHWc")], model_features("lenet", 1)))
    assert fitted.basis == f"fitted:{TARGET}" and fitted.step_seconds == pytest.approx(truth, rel=0.25)
    assert 0 < fitted.detail["overhead_s"] < fitted.step_seconds


def test_groups_with_too_little_data_are_not_used():
    frame = synthetic_frame()
    few = frame[frame["model"].isin(["cnn_a", "cnn_b", "dw"])]  # 6 rows from 2 families
    model = fit_model(few)
    assert model.result.groups and not any(g.usable for g in model.result.groups)
    assert model.predict(workload("cnn_a"), route(), DEVICE).basis == "roofline-prior"
    assert all("not used" in line for line in model.describe())


def test_nnls_matches_scipy():
    from scipy.optimize import nnls as scipy_nnls

    from perfmodels.fit import nnls

    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.standard_normal((30, 8))
        b = rng.standard_normal(30)
        ours, theirs = nnls(a, b), scipy_nnls(a, b)[0]
        assert np.all(ours >= 0)
        assert np.linalg.norm(a @ ours - b) == pytest.approx(np.linalg.norm(a @ theirs - b), rel=1e-9, abs=1e-12)


def test_fitted_model_reports_its_own_evaluation_once():
    model = fit_model(synthetic_frame(noise=0.03))
    evaluation = model.evaluation()
    assert evaluation is not None and evaluation.fitted.predictions > 0
    assert model.evaluation() is evaluation
    assert FittedModel(fit(synthetic_frame())).evaluation() is None  # no data kept: nothing to evaluate


def test_busy_machine_rows_use_cpu_time_or_are_left_out():
    from perfmodels.fit import training_rows

    def measured(threads: int, load: float, wall: float, cpu: float) -> dict[str, object]:
        return fit_row(
            f"m{threads}-{load}",
            target=TARGET,
            layout="NCHWc",
            threads=threads,
            load_avg=load,
            value=wall,
            median_ms=wall,
            cpu_ms=cpu,
            schema_version=1,  # recorded before other_cpu existed: the load average decides
        )

    frame = to_frame(
        [
            measured(1, 5.0, 30.0, 10.0),
            measured(1, 0.5, 12.0, 11.0),
            measured(2, 5.0, 50.0, 20.0),
            measured(2, 0.5, 6.0, 11.0),
        ]
    )
    rows = training_rows(frame).set_index("model")["y"] * 1e3
    assert rows.to_dict() == pytest.approx({"m1-5.0": 10.0, "m1-0.5": 12.0, "m2-0.5": 6.0})  # m2-5.0 left out
    assert (training_rows(frame, "wall").set_index("model")["y"] * 1e3).to_dict()["m2-5.0"] == pytest.approx(50.0)


def test_spearman_matches_scipy_with_ties():
    from scipy.stats import spearmanr

    from perfmodels.evaluate import spearman

    a = np.array([1.0, 2.0, 2.0, 5.0, 3.0, 9.0])
    b = np.array([2.0, 1.0, 4.0, 4.0, 6.0, 8.0])
    assert spearman(a, b) == pytest.approx(spearmanr(a, b).statistic)


def test_rows_measured_under_load_are_judged_by_other_processes_cpu_use():
    from perfmodels.fit import measured_under_load

    base = dict(
        source="measured", target=TARGET, backend="b", model="m", scenario="SingleStream", metric="x", value=1.0
    )
    frame = to_frame(
        [
            make_row(**base, cores=2, load_avg=3.0, other_cpu=0.05),  # our own threads raised the load: quiet
            make_row(**base, cores=2, load_avg=0.5, other_cpu=0.9),  # another process ran: busy
            make_row(**base, cores=2, load_avg=3.0, schema_version=1),  # before other_cpu: the load average decides
            make_row(**base, cores=2, load_avg=3.0),  # too short for the probe: the load average proves nothing
        ]
    )
    assert measured_under_load(frame).tolist() == [False, True, True, False]


def test_predictions_carry_the_held_out_figures_stored_next_to_the_database(tmp_path):
    from perfmodels.fitted import (
        evaluation_path,
        read_evaluation_summary,
        write_evaluation_summary,
    )
    from perfmodels.results_db import frame_rows, read_results, write_rows

    db = tmp_path / "db.csv"
    write_rows(db, frame_rows(synthetic_frame(noise=0.03)))
    frame = read_results(db)
    evaluation = leave_one_architecture_out(frame)
    assert read_evaluation_summary(db) is None
    write_evaluation_summary(db, evaluation)
    stored = read_evaluation_summary(db)
    assert stored is not None and stored[""].rmspe == pytest.approx(evaluation.fitted.rmspe)
    assert stored["fp32"].predictions == evaluation.by_precision()["fp32"].predictions
    model = fit_model(frame, db=db)
    detail = model.predict(workload("cnn_a"), route(), DEVICE).detail
    assert detail["heldout_rmspe"] == pytest.approx(evaluation.fitted.rmspe)
    assert detail["heldout_families"] == evaluation.predictions["family"].nunique()
    assert model._evaluation is None  # read back, not recomputed
    with open(db, "a", encoding="utf-8") as handle:  # any change to the database invalidates the stored figures
        handle.write("\n")
    assert read_evaluation_summary(db) is None and evaluation_path(db).is_file()


def test_a_model_reads_the_stored_evaluation_and_hashes_the_database_once(tmp_path, monkeypatch):
    """Held-out figures and route errors come from one reading of the summary (the database hashed once per model,
    where each reader hashed it before)."""
    import perfmodels.fitted as fitted
    from perfmodels.results_db import frame_rows, read_results, write_rows

    db = tmp_path / "db.csv"
    write_rows(db, frame_rows(synthetic_frame(noise=0.03)))
    frame = read_results(db)
    evaluation = leave_one_architecture_out(frame)
    fitted.write_evaluation_summary(db, evaluation)
    hashed = []
    real = fitted._digest
    monkeypatch.setattr(fitted, "_digest", lambda path: hashed.append(path) or real(path))
    model = fit_model(frame, db=db)
    assert model.heldout() is not None and model.heldout("fp32") is not None
    group = next(g for g in model.result.groups if g.usable)
    model.route_errors(group)
    model.predict(workload("cnn_a"), route(), DEVICE)
    assert hashed == [db]
    stored = fitted.read_evaluation(db)
    assert stored is not None and stored.figures[""].rmspe == pytest.approx(evaluation.fitted.rmspe)
    assert stored.route_errors is not None and len(stored.route_errors) == len(evaluation.route_errors)
