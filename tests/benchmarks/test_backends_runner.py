"""Backends behind one interface, and the runner turning measurements into valid database rows."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.backends import BackendSkipped, all_backends, get_backend
from benchmarks.harness import ScenarioSettings
from benchmarks.models import get_model, suite
from benchmarks.runner import BenchRequest, ModelFeatures, plan_jobs, run_benchmarks
from perfmodels.results_db import read_results, validate_row

TINY = ScenarioSettings(
    min_duration_s=0.0,
    min_queries=3,
    warmup_queries=1,
    offline_samples=8,
    server_search_steps=2,
    server_latency_bound_ms=1e4,
)


def fake_features(model) -> ModelFeatures:
    return ModelFeatures(1e6, 1e3, 10.0, {"gemm": 1e6}, {"gemm": 3})


def test_unknown_backend_lists_the_known_ones():
    with pytest.raises(KeyError, match="onnxruntime"):
        get_backend("tensorflow-lite")


def test_every_backend_reports_availability_and_versions():
    for backend in all_backends().values():
        reason = backend.unavailable_reason()
        assert reason is None or isinstance(reason, str)
        assert backend.route.framework
        if reason is None:
            assert all(isinstance(v, str) for v in backend.versions().values())


def test_missing_or_unsupported_backends_are_skipped_not_failed():
    mlp = get_model("mlp").model()
    torch = get_backend("torch")
    if torch.unavailable_reason():
        with pytest.raises(BackendSkipped, match="not installed"):
            torch.prepare(mlp)
    with pytest.raises(BackendSkipped, match="not int8"):
        get_backend("appopt-runtime").prepare(mlp, precision="int8")
    with pytest.raises(BackendSkipped, match="not bf16"):
        get_backend("onnxruntime").prepare(mlp, precision="bf16")


@pytest.mark.parametrize("name", ["onnxruntime", "onnxruntime-extended", "appopt-runtime", "onnx-reference", "torch"])
def test_backends_agree_on_the_mlp(name):
    backend = get_backend(name)
    reason = backend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    model = get_model("mlp")
    feeds = model.feeds(batch=4)
    got = backend.prepare(model.model(), threads=1).run(feeds)
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_onnxruntime_int8_runs_and_stays_close():
    model = get_model("mlp")
    feeds = model.feeds(batch=2)
    got = get_backend("onnxruntime").prepare(model.model(), precision="int8").run(feeds)[0]
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)[0]
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()


def test_int8_quantises_a_model_once_for_every_thread_count(monkeypatch):
    pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed (the peer compared with)")
    import benchmarks.engines.onnxruntime as backends

    calls: list[int] = []
    real = backends._quantize_dynamic_uncached

    def counting(data: bytes) -> bytes:
        calls.append(len(data))
        return real(data)

    monkeypatch.setattr(backends, "_quantize_dynamic_uncached", counting)
    backends._QUANTIZED.clear()
    mlp = get_model("mlp").model()
    for threads in (1, 2):
        get_backend("onnxruntime").prepare(mlp, threads=threads, precision="int8")
    assert len(calls) == 1


def test_runner_writes_valid_rows_with_provenance(tmp_path):
    db = tmp_path / "shard.csv"
    request = BenchRequest(
        models=suite("mlp,zoo_squeezenet"),
        backends=("onnxruntime", "torch"),
        scenarios=("SingleStream", "MultiStream", "Offline", "Server", "accuracy"),
        batches=(1, 2),
        settings=TINY,
    )
    outcomes = list(run_benchmarks(request, fake_features, db))
    assert len(outcomes) == len(plan_jobs(request)) * 2 * 5
    ok = [o for o in outcomes if o.status == "ok"]
    assert {o.scenario for o in ok} == {"SingleStream", "MultiStream", "Offline", "Server", "accuracy"}
    # squeezenet has a fixed batch: batch 2 is skipped with the reason, never failed
    assert all(o.status == "skipped" for o in outcomes if o.job.model.name == "zoo_squeezenet" and o.batch == 2)
    assert all(o.status == "skipped" for o in outcomes if o.job.backend == "torch") or any(
        o.job.backend == "torch" and o.status == "ok" for o in outcomes
    )
    assert not [o for o in outcomes if o.status == "failed"]
    frame = read_results(db)
    assert len(frame) == len(ok)
    for row in frame.to_dict(orient="records"):
        assert row["host"] and row["cpu_model"] and row["blas"] and row["appopt_revision"]
        assert row["peak_gflops"] > 0 and row["bandwidth_gbs"] > 0
        assert row["flops_per_sample"] == 1e6
    accuracy = frame[(frame["scenario"] == "accuracy") & (frame["model"] == "mlp")]
    assert set(accuracy["accuracy"]) == {"pass"}  # onnxruntime checked against onnx's reference evaluator
    multistream = frame[frame["scenario"] == "MultiStream"]
    assert set(multistream["notes"]) == {"8 sample(s) per query"}


def test_rows_from_outcomes_validate():
    request = BenchRequest(models=suite("mlp"), backends=("onnxruntime",), settings=TINY)
    (outcome,) = list(run_benchmarks(request, None))
    assert outcome.row is not None
    validate_row(outcome.row)
    assert "p90_latency_ms" in outcome.describe()


@pytest.mark.parametrize("name", ["bert", "mobilenetv2", "zoo_densenet121", "zoo_alexnet"])
def test_torch_eager_matches_onnxruntime(name):
    backend = get_backend("torch")
    reason = backend.unavailable_reason()
    if reason:
        pytest.skip(reason)
    model = get_model(name)
    feeds = model.feeds(batch=1, seed=3)
    got = backend.prepare(model.model(), threads=1).run(feeds)
    want = get_backend("onnxruntime").prepare(model.model()).run(feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-3, atol=1e-4)


def test_torch_eager_names_an_unsupported_op():
    from onnx import TensorProto, helper

    backend = get_backend("torch")
    if backend.unavailable_reason():
        pytest.skip(str(backend.unavailable_reason()))
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    with pytest.raises(BackendSkipped, match="Hardmax"):
        backend.prepare(helper.make_model(graph))
