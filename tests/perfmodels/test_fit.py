"""Fitting, predicting and evaluating on synthetic measurements whose true costs are known."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import pytest

from perfmodels import Device, Route, Workload
from perfmodels.evaluate import leave_one_architecture_out, scores
from perfmodels.fit import FEATURES, fit, query_features
from perfmodels.fitted import FittedModel, fit_model
from perfmodels.results_db import make_row, to_frame
from perfmodels.roofline import RooflinePrior

TARGET = "test-cpu-4c"
#: True inverse rates per route: conv, gemm, norm, other (s/FLOP), activations, cached and streamed parameters
#: (s/byte), nodes (s/node).
TRUTH = {
    ("fast", "NCHWc"): (1 / 150e9, 1 / 120e9, 1 / 1e9, 1 / 5e9, 1 / 20e9, 1 / 60e9, 1 / 20e9, 5e-6),
    ("slow", "NCHW"): (1 / 60e9, 1 / 90e9, 1 / 0.5e9, 1 / 2e9, 1 / 8e9, 1 / 30e9, 1 / 10e9, 4e-5),
}
MODELS = {  # name: (family, conv, gemm, norm, other FLOPs, activation bytes, params, nodes)
    "cnn_a": ("cnn", 4e9, 1e7, 0.0, 2e7, 5e7, 1e7, 120),
    "cnn_b": ("cnn", 2e9, 1e6, 0.0, 1e7, 3e7, 5e6, 60),
    "dw": ("depthwise", 3e8, 1e6, 0.0, 1e7, 6e7, 3e6, 100),
    "tx": ("transformer", 0.0, 9e8, 2e6, 5e6, 3e7, 5e6, 140),
    "mlp": ("mlp", 0.0, 4e6, 0.0, 2e3, 1e4, 2e6, 5),
    "vgg": ("vgg", 2e10, 2e8, 0.0, 1e7, 1e8, 1.4e8, 45),
    "inc": ("inception", 1.5e9, 1e6, 3e6, 2e7, 4e7, 7e6, 230),
    # a second family for every cost the others lean on, as the real suite has (shufflenet, alexnet's FC layers…)
    "shuffle": ("shufflenet", 1.5e8, 1e6, 0.0, 2e7, 4e7, 2e6, 200),
    "alex": ("alexnet", 1.4e9, 1.2e8, 3e6, 1e6, 1e7, 6e7, 25),
    "tiny": ("tiny", 1e6, 2e6, 0.0, 1e4, 1e4, 1e6, 8),
}


def synthetic_frame(noise: float = 0.0, seed: int = 0, threads: int = 4) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for (framework, layout), coef in TRUTH.items():
        for name, (family, conv, gemm, norm, other, act, params, nodes) in MODELS.items():
            for batch in (1, 8):
                by_class = {"conv": conv, "gemm": gemm, "norm": norm, "elementwise": other}
                x = query_features(by_class, conv + gemm + norm + other, act, params, batch, "fp32", nodes)
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
                        flops_per_sample=conv + gemm + norm + other,
                        flops_by_class=by_class,
                        ops_by_class={"conv": nodes},
                        activation_bytes_per_sample=act,
                        params=params,
                        scenario="SingleStream",
                        metric="p90_latency_ms",
                        value=seconds * 1e3,
                        median_ms=seconds * 1e3,
                        peak_gflops=200.0,
                        bandwidth_gbs=20.0,
                    )
                )
    return to_frame(rows)


@dataclass(frozen=True)
class CountedWorkload(Workload):
    """A Workload that also carries node counts by op class (what ``workload_features`` reads when present)."""

    ops_by_class: dict[str, int] = field(default_factory=dict)


def workload(name: str, batch: int = 1, mode: str = "inference") -> Workload:
    _, conv, gemm, norm, other, act, params, nodes = MODELS[name]
    return CountedWorkload(
        conv + gemm + norm + other,
        act,
        params,
        mode,  # type: ignore[arg-type]
        batch,
        flops_by_class={"conv": conv, "gemm": gemm, "norm": norm, "elementwise": other},
        model_name=name,
        ops_by_class={"conv": nodes},
    )


def route(framework: str = "fast", layout: str = "NCHWc", precision: str = "fp32", compiler: str = "none") -> Route:
    return Route(framework, compiler, ("lib",), precision, layout, efficiency=0.5)


DEVICE = Device(TARGET, "cpu", {"fp32": 200e9, "int8": 800e9}, 20e9)


def test_fit_recovers_known_costs_from_exact_data():
    result = fit(synthetic_frame(), ridge=0.0)
    assert len(result.groups) == 2
    for group in result.groups:
        truth = TRUTH[(group.route.framework, group.route.layout)]
        assert group.train_rmspe < 0.02
        x = query_features({"conv": 1e9, "gemm": 1e8, "norm": 1e6}, 1.101e9, 2e7, 4e7, 4, "fp32", 80)
        assert group.seconds(x) == pytest.approx(float(np.dot(truth, x)), rel=0.03)


def test_leave_one_architecture_out_meets_the_goals_on_lightly_noisy_data():
    # the linear cost model is exactly right for this data, so no pull toward the prior is needed
    evaluation = leave_one_architecture_out(synthetic_frame(noise=0.03), ridge=0.0)
    assert evaluation.fitted.rmspe < 0.15
    assert evaluation.fitted.mean_regret <= 1.10
    assert evaluation.fitted.spearman > 0.95
    assert set(evaluation.predictions["family"]) == {m[0] for m in MODELS.values()}
    assert evaluation.prior.rmspe > evaluation.fitted.rmspe  # fitting must beat the uncorrected prior here
    assert any("fitted model" in line for line in evaluation.lines())


def test_scores_compute_regret_against_the_measured_best():
    predictions = pd.DataFrame(
        {
            "target": ["t"] * 4,
            "threads": [1] * 4,
            "model": ["a", "a", "b", "b"],
            "batch": [1] * 4,
            "precision": ["fp32"] * 4,
            "y": [1.0, 2.0, 1.0, 3.0],
            "predicted": [2.0, 1.0, 1.0, 2.0],
        }
    )
    s = scores(predictions, "predicted")
    assert s.max_regret == pytest.approx(2.0)  # model a: picked the 2.0 s route over the 1.0 s one
    assert s.mean_regret == pytest.approx(1.5)
    assert s.top1_hits == pytest.approx(0.5)
    assert s.within_10pct == pytest.approx(0.25)


def test_fitted_predictions_use_measurements_and_say_so():
    model = fit_model(synthetic_frame())
    fast = model.predict(workload("cnn_a"), route("fast", "NCHWc"), DEVICE)
    slow = model.predict(workload("cnn_a"), route("slow", "NCHW"), DEVICE)
    assert fast.basis == slow.basis == f"fitted:{TARGET}"
    x = query_features({"conv": 4e9, "gemm": 1e7, "elementwise": 2e7}, 4.03e9, 5e7, 1e7, 1, "fp32", 120)
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
        return make_row(
            source="measured",
            target=TARGET,
            backend="b",
            framework="fast",
            layout="NCHWc",
            precision="fp32",
            threads=threads,
            cores=2,
            load_avg=load,
            mode="inference",
            model=f"m{threads}-{load}",
            family="f",
            batch=1,
            flops_per_sample=1e9,
            flops_by_class={"conv": 1e9},
            activation_bytes_per_sample=1e6,
            params=1e6,
            scenario="SingleStream",
            metric="p90_latency_ms",
            value=wall,
            median_ms=wall,
            cpu_ms=cpu,
            peak_gflops=100.0,
            bandwidth_gbs=10.0,
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
