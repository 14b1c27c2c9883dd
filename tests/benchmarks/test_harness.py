"""Scenario logic on a simulated SUT with a fake clock: exact, fast, and independent of machine load."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.harness import (
    ScenarioSettings,
    compare_outputs,
    offline,
    poisson_arrivals,
    run_scenario,
    server,
    server_at,
)


class FakeTime:
    """A clock that only moves when the SUT works or the harness sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(seconds, 0.0)


def sut_with_latencies(fake: FakeTime, latencies_ms: list[float]):
    calls: list[int] = []

    def sut(i: int) -> None:
        fake.now += latencies_ms[len(calls) % len(latencies_ms)] / 1e3
        calls.append(i)

    return sut, calls


def test_single_stream_reports_p90_of_timed_queries_after_warmup():
    fake = FakeTime()
    # two warm-up queries take 100 ms and must not count; then 1..10 ms
    sut, calls = sut_with_latencies(fake, [100, 100, *range(1, 11)])
    settings = ScenarioSettings(min_duration_s=0.0, min_queries=10, warmup_queries=2)
    result = run_scenario("SingleStream", sut, settings, clock=fake.clock)
    assert result.queries == 10
    assert len(calls) == 12
    assert result.metric == "p90_latency_ms"
    assert result.value == pytest.approx(np.percentile(range(1, 11), 90))
    assert result.median_ms == pytest.approx(5.5)


def test_min_duration_extends_the_run_beyond_min_queries():
    fake = FakeTime()
    sut, _ = sut_with_latencies(fake, [10])
    result = run_scenario(
        "SingleStream", sut, ScenarioSettings(min_duration_s=1.0, min_queries=3, warmup_queries=0), clock=fake.clock
    )
    assert result.queries == 100
    assert result.duration_s == pytest.approx(1.0)


def test_max_queries_caps_a_long_run():
    fake = FakeTime()
    sut, _ = sut_with_latencies(fake, [0.001])
    settings = ScenarioSettings(min_duration_s=1e9, min_queries=1, max_queries=50, warmup_queries=0)
    assert run_scenario("SingleStream", sut, settings, clock=fake.clock).queries == 50


def test_multistream_uses_eight_samples_per_query_and_p99():
    fake = FakeTime()
    sut, _ = sut_with_latencies(fake, [*([1.0] * 99), 50.0])
    settings = ScenarioSettings(min_duration_s=0.0, min_queries=100, warmup_queries=0)
    result = run_scenario("MultiStream", sut, settings, clock=fake.clock)
    assert result.samples_per_query == 8
    assert result.samples == 800
    assert result.metric == "p99_latency_ms"
    assert 1.0 < result.value <= 50.0


def test_offline_throughput_counts_all_samples():
    fake = FakeTime()
    sut, calls = sut_with_latencies(fake, [20])  # 20 ms per query of 4 samples -> 200 samples/s
    settings = ScenarioSettings(min_duration_s=0.0, offline_samples=64, samples_per_query=4, warmup_queries=1)
    result = offline(sut, settings, clock=fake.clock)
    assert result.queries == 16
    assert len(calls) == 17
    assert result.value == pytest.approx(200.0)


def test_offline_reissues_the_batch_until_the_minimum_duration():
    fake = FakeTime()
    sut, _ = sut_with_latencies(fake, [1])  # 64 queries take 0.064 s; the run must last 0.5 s
    settings = ScenarioSettings(min_duration_s=0.5, offline_samples=64, warmup_queries=0)
    result = offline(sut, settings, clock=fake.clock)
    assert result.duration_s >= 0.5
    assert result.queries == 64 * 8  # whole batches: 8 × 0.064 s is the first to reach 0.5 s
    assert result.value == pytest.approx(1000.0)
    capped = offline(sut, ScenarioSettings(min_duration_s=10.0, max_duration_s=0.2, warmup_queries=0), fake.clock)
    assert 0.2 <= capped.duration_s < 0.3


def test_poisson_arrivals_are_seeded_and_have_the_requested_rate():
    a = poisson_arrivals(100.0, 20_000, seed=3)
    assert np.array_equal(a, poisson_arrivals(100.0, 20_000, seed=3))
    assert not np.array_equal(a, poisson_arrivals(100.0, 20_000, seed=4))
    assert a[0] == 0.0 and np.all(np.diff(a) >= 0)
    assert len(a) / a[-1] == pytest.approx(100.0, rel=0.03)
    with pytest.raises(ValueError):
        poisson_arrivals(0.0, 10, 0)


def test_server_latency_includes_queueing_when_arrivals_outpace_the_sut():
    fake = FakeTime()
    sut, _ = sut_with_latencies(fake, [10])  # capacity 100 QPS
    settings = ScenarioSettings(min_duration_s=2.0, min_queries=10)
    light = server_at(sut, 10.0, settings, seed=0, clock=fake.clock, sleep=fake.sleep)
    heavy = server_at(sut, 300.0, settings, seed=0, clock=fake.clock, sleep=fake.sleep)
    assert np.percentile(light, 99) < 30
    assert np.percentile(heavy, 99) > 100  # the queue grows without bound above capacity


def test_server_search_finds_the_highest_qps_meeting_the_bound():
    fake = FakeTime()
    sut, _ = sut_with_latencies(fake, [10])
    settings = ScenarioSettings(
        min_duration_s=5.0, min_queries=10, server_latency_bound_ms=50.0, server_search_steps=8, warmup_queries=0
    )
    result = server(sut, settings, clock=fake.clock, sleep=fake.sleep)
    assert result.metric == "max_qps"
    assert 30.0 < result.value < 100.0  # below capacity, well above the first probe
    assert result.extra["latency_bound_ms"] == 50.0
    assert result.p99_ms <= 50.0


def test_server_at_fixed_qps_reports_p99_and_whether_it_meets_the_bound():
    fake = FakeTime()
    sut, _ = sut_with_latencies(fake, [10])
    settings = ScenarioSettings(min_duration_s=1.0, server_target_qps=20.0, server_latency_bound_ms=40.0)
    result = server(sut, settings, clock=fake.clock, sleep=fake.sleep)
    assert result.metric == "p99_latency_ms"
    assert result.extra["meets_bound"] == float(result.value <= 40.0)


def test_compare_outputs_passes_within_tolerance_and_fails_outside():
    ref = [[np.ones((2, 3), dtype=np.float32)]]
    assert compare_outputs([[ref[0][0] + 1e-6]], ref).ok
    bad = compare_outputs([[ref[0][0] + 0.1]], ref)
    assert not bad.ok and bad.max_abs_error == pytest.approx(0.1, rel=1e-3)
    assert "sample 0 output 0" in bad.detail
    shape = compare_outputs([[np.ones((3, 2))]], ref)
    assert not shape.ok and "shape" in shape.detail


def test_unknown_scenario_is_an_error():
    with pytest.raises(ValueError, match="unknown scenario"):
        run_scenario("Bogus", lambda i: None)  # type: ignore[arg-type]


def test_max_duration_stops_a_slow_sut_after_three_queries():
    fake = FakeTime()
    sut, calls = sut_with_latencies(fake, [1000])  # one second per query
    settings = ScenarioSettings(min_duration_s=0.5, min_queries=7, max_duration_s=2.5, warmup_queries=2)
    result = run_scenario("SingleStream", sut, settings, clock=fake.clock)
    assert result.queries == 3 and len(calls) == 5  # the cap overrides min_queries, but never below three
    fast, _ = sut_with_latencies(fake, [1])
    assert run_scenario("SingleStream", fast, settings, clock=fake.clock).queries == 500  # the cap does not bind


def test_warm_up_stops_early_once_its_time_is_spent():
    fake = FakeTime()
    sut, calls = sut_with_latencies(fake, [800, 10])
    settings = ScenarioSettings(min_duration_s=0.0, min_queries=3, warmup_queries=2, warmup_max_s=0.5)
    run_scenario("SingleStream", sut, settings, clock=fake.clock)
    assert len(calls) == 1 + 3  # one slow warm-up query was enough
