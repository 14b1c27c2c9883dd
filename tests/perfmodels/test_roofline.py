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


def test_tensor_cores_reach_a_smaller_share_of_their_peak() -> None:
    from perfmodels.priors import TENSOR_CORE_EFFICIENCY

    prior = RooflinePrior()
    fp32 = prior.predict(workload(), route("fp32"), GPU).detail["compute_s"]
    fp16 = prior.predict(workload(), route("fp16"), GPU).detail["compute_s"]
    assert fp32 / fp16 == pytest.approx(300 / 20 * TENSOR_CORE_EFFICIENCY)  # not the peaks' 15x


def test_fp32_uses_tf32_tensor_cores_for_the_share_the_framework_runs_there() -> None:
    from dataclasses import replace

    from perfmodels.priors import TENSOR_CORE_EFFICIENCY, tf32_share

    ampere = replace(GPU, peak_flops={**GPU.peak_flops, "tf32": 150e12})
    prior = RooflinePrior()
    plain = prior.predict(workload(), route("fp32"), ampere).detail["compute_s"]
    half = replace(route("fp32"), tf32_share=0.5)
    mixed = prior.predict(workload(), half, ampere).detail["compute_s"]
    flops = 64 * 8e9
    assert mixed == pytest.approx(flops * 0.5 / (150e12 * 0.5 * TENSOR_CORE_EFFICIENCY) + flops * 0.5 / (20e12 * 0.5))
    assert mixed < plain
    # The share is ignored without a TF32 peak (a V100) and at reduced precision.
    assert prior.predict(workload(), half, GPU).detail["compute_s"] == pytest.approx(plain)
    assert tf32_share("pytorch", {"conv": 3.0, "gemm": 1.0}) == pytest.approx(0.75)
    assert tf32_share("tensorflow", {"conv": 3.0, "gemm": 1.0}) == 1.0
    assert tf32_share("mxnet", {"conv": 3.0}) == 0.0


def test_compilers_speed_up_compute_not_memory_traffic() -> None:
    from perfmodels.priors import MEMORY_BOUND_COMPILER_GAIN, capped_compiler_speedup

    prior = RooflinePrior()
    memory_bound = workload(flops=1e6, act=1e9)
    base = prior.predict(memory_bound, route(), GPU).detail["memory_s"]
    compiled = prior.predict(memory_bound, route(speedup=2.14), GPU).detail["memory_s"]
    assert base / compiled == pytest.approx(MEMORY_BOUND_COMPILER_GAIN)
    untuned = prior.predict(memory_bound, route(speedup=0.02), GPU).detail["memory_s"]
    assert untuned == pytest.approx(base / 0.02)  # a slow compiler is slow everywhere
    # The compute gain lifts a route at most to the kernel ceiling (0.85 of peak).
    assert capped_compiler_speedup(2.14, 0.34) == pytest.approx(2.14)
    assert capped_compiler_speedup(2.14, 0.69) == pytest.approx(0.85 / 0.69)
    assert capped_compiler_speedup(2.14, 0.9) == 1.0
    assert capped_compiler_speedup(0.5, 0.9) == 0.5


def test_layout_changes_nothing_without_convolutions() -> None:
    assert layout_factor("cpu", "NCHW", "fp32", has_convolutions=False) == 1.0
    assert layout_factor("gpu", "NCHW", "fp16", has_convolutions=False) == 1.0
    assert layout_factor("cpu", "NCHW", "fp32") < 1.0


def test_a_setup_adds_to_the_whole_job_only() -> None:
    p = RooflinePrior().predict(workload(), route(), GPU)
    q = p.with_setup(3600.0)
    assert q.step_seconds == p.step_seconds and q.total_seconds == pytest.approx((p.total_seconds or 0) + 3600)
    assert q.detail["setup_s"] == 3600 and p.with_setup(0.0) is p
