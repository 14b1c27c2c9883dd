"""The analytic prior: the roofline's arithmetic and its scaling rules."""

from __future__ import annotations

import pytest

from perfmodels import Device, RooflinePrior, Route, Workload
from perfmodels.priors import layout_factor

GPU = Device(name="gpu", kind="gpu", peak_flops={"fp32": 20e12, "fp16": 300e12}, mem_bandwidth=2e12)


def workload(mode: str = "inference", batch: int = 64, flops: float = 8e9, act: float = 1e8) -> Workload:
    return Workload(flops_per_sample=flops, activation_bytes_per_sample=act, params=25e6, mode=mode,  # type: ignore[arg-type]
                    batch_size=batch, total_samples=1e6)


def route(precision: str = "fp32", efficiency: float = 0.5, speedup: float = 1.0) -> Route:
    return Route("fw", "none", (), precision, "NHWC", efficiency=efficiency, compiler_speedup=speedup)


def test_compute_bound_step_is_flops_over_achieved_peak() -> None:
    p = RooflinePrior().predict(workload(), route(), GPU)
    expected = 64 * 8e9 / (20e12 * 0.5) + 1e-3
    assert p.bound == "compute"
    assert p.step_seconds == pytest.approx(expected)
    assert p.total_seconds == pytest.approx(1e6 / 64 * expected)
    assert p.basis == "roofline-prior"


def test_memory_bound_workload_is_limited_by_bandwidth() -> None:
    p = RooflinePrior().predict(workload(flops=1e6, act=1e9), route(), GPU)
    assert p.bound == "memory"
    assert p.detail["memory_s"] > p.detail["compute_s"]


def test_training_costs_about_three_forward_passes() -> None:
    prior = RooflinePrior()
    infer = prior.predict(workload("inference"), route(), GPU).detail["compute_s"]
    train = prior.predict(workload("training"), route(), GPU).detail["compute_s"]
    assert train == pytest.approx(3 * infer)


def test_reduced_precision_and_compiler_speedups_shorten_steps() -> None:
    prior = RooflinePrior()
    base = prior.predict(workload(), route(), GPU).step_seconds
    assert prior.predict(workload(), route("fp16"), GPU).step_seconds < base / 5
    assert prior.predict(workload(), route(speedup=2.0), GPU).step_seconds < base


def test_more_devices_help_but_less_than_linearly_and_training_pays_allreduce() -> None:
    prior = RooflinePrior()
    one = prior.predict(workload("training"), route(), GPU).step_seconds
    many_dev = Device(name="gpu", kind="gpu", peak_flops=GPU.peak_flops, mem_bandwidth=2e12, per_node=4, nodes=2)
    eight = prior.predict(workload("training"), route(), many_dev)
    assert one / 8 < eight.step_seconds < one
    assert eight.detail["communication_s"] > 0


def test_layout_priors_prefer_nhwc_for_tensor_cores_and_blocked_on_cpu() -> None:
    assert layout_factor("gpu", "NHWC", "fp16") > layout_factor("gpu", "NCHW", "fp16")
    assert layout_factor("cpu", "NCHWc", "fp32") > layout_factor("cpu", "NCHW", "fp32")
