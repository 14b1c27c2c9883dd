"""GPU step fits (perfmodels.gpu_fit): the fit's form, transfer to another GPU, data-parallel split, held-out figures,
and that the CPU fits never see GPU rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from perfmodels.features import Device, Route, Workload
from perfmodels.gpu_fit import GpuFit, GpuRow, StepLine, kernel_nodes, match_source, roofline_seconds
from perfmodels.results_db import cpu_rows, on_gpu

SOURCE = Device("h200", "gpu", {"fp32": 67e12, "bf16": 989e12, "tf32": 495e12}, 4.8e12)
SLOWER = Device("half", "gpu", {"fp32": 33.5e12, "bf16": 494.5e12, "tf32": 247.5e12}, 2.4e12)
FIXED, PER_NODE, EFFICIENCY = 2e-4, 5e-6, 3.0


def workload(model: str, gflops: float, nodes: int, batch: int, mode: str = "training") -> Workload:
    return Workload(gflops * 1e9, 1e6, 1e6, mode, batch, flops_by_class={"gemm": gflops * 1e9},  # type: ignore[arg-type]
                    ops_by_class={"gemm": nodes, "other": 50}, model_name=model)


def truth(w: Workload, device: Device = SOURCE) -> float:
    return FIXED + PER_NODE * kernel_nodes(w) + EFFICIENCY * roofline_seconds(w, "pytorch", "bf16", "NCHW", device)


def rows(compiled_speedup: float | None = None) -> tuple[GpuRow, ...]:
    out = []
    for family, model, gflops, nodes in (("mlp", "a", 0.01, 5), ("cnn", "b", 1.0, 40), ("resnet", "c", 8.0, 170),
                                         ("transformer", "d", 20.0, 270)):
        for batch in (8, 128):
            w = workload(model, gflops, nodes, batch)
            out.append(GpuRow("NVIDIA H200", model, family, "training", "pytorch", "none", "bf16", "NCHW", w,
                              truth(w)))
            if compiled_speedup:
                out.append(GpuRow("NVIDIA H200", model, family, "training", "pytorch", "inductor", "bf16", "NCHW", w,
                                  truth(w) / compiled_speedup))
    return tuple(out)


ROUTE = Route("pytorch", "none", ("cublas",), "bf16", "NCHW", efficiency=0.5)


def test_match_source_takes_the_longest_preset_key_whose_words_occur_in_the_gpu_name() -> None:
    presets = {"a100": SOURCE, "a100-80gb": SLOWER, "h200": SOURCE}
    assert match_source("NVIDIA A100-SXM4-80GB", presets) is SLOWER
    assert match_source("NVIDIA A100-SXM4-40GB", presets) is SOURCE
    assert match_source("NVIDIA H20", presets) is None  # h20 is not h200


def test_step_line_recovers_fixed_per_node_and_roofline_terms() -> None:
    nodes, roof = [5, 40, 170, 270, 10, 90], [1e-6, 1e-4, 1e-3, 4e-3, 2e-3, 5e-5]
    seconds = [FIXED + PER_NODE * n + EFFICIENCY * r for n, r in zip(nodes, roof, strict=True)]
    line = StepLine.fit(nodes, roof, seconds, 3)
    assert line.fixed == pytest.approx(FIXED, rel=1e-6)
    assert line.per_node == pytest.approx(PER_NODE, rel=1e-6)
    assert line.efficiency == pytest.approx(EFFICIENCY, rel=1e-6)


def test_on_the_measuring_gpu_the_fit_reproduces_its_rows_and_says_fitted() -> None:
    fit = GpuFit(rows(), {"h200": SOURCE})
    w = workload("new", 3.0, 100, 64)
    p = fit.predict(w, ROUTE, SOURCE)
    assert p is not None and p.basis.startswith("fitted-gpu:NVIDIA H200")
    assert p.step_seconds == pytest.approx(truth(w), rel=1e-6)


def test_another_gpu_scales_the_roofline_share_only() -> None:
    fit = GpuFit(rows(), {"h200": SOURCE})
    w = workload("new", 3.0, 100, 64)
    p = fit.predict(w, ROUTE, SLOWER)
    assert p is not None and p.basis.startswith("transferred-gpu:NVIDIA H200 -> half")
    assert p.step_seconds == pytest.approx(truth(w, SLOWER), rel=1e-6)
    assert truth(w) < p.step_seconds < 2 * truth(w)  # launches do not slow down with the data sheet


def test_several_gpus_split_the_batch_and_pay_the_prior_scaling() -> None:
    fit = GpuFit(rows(), {"h200": SOURCE})
    w = workload("new", 3.0, 100, 256)
    eight = Device("h200", "gpu", SOURCE.peak_flops, SOURCE.mem_bandwidth, per_node=8)
    p = fit.predict(w, ROUTE, eight)
    one = truth(workload("new", 3.0, 100, 32))
    assert p is not None and "8 devices, batch 32 each" in p.basis
    assert p.step_seconds > one / 0.95**3 and p.step_seconds == pytest.approx(
        one / 0.95**3 + p.step_seconds - one / 0.95**3)
    assert p.step_seconds < truth(w)


def test_a_compiled_route_carries_its_measured_speedup() -> None:
    fit = GpuFit(rows(compiled_speedup=1.25), {"h200": SOURCE})
    w = workload("new", 3.0, 100, 64)
    eager = fit.predict(w, ROUTE, SOURCE)
    compiled = fit.predict(w, Route("pytorch", "inductor", (), "bf16", "NCHW", efficiency=0.5), SOURCE)
    assert eager is not None and compiled is not None
    assert eager.step_seconds / compiled.step_seconds == pytest.approx(1.25, rel=1e-3)


def test_frameworks_and_devices_nothing_measured_get_none() -> None:
    fit = GpuFit(rows(), {"h200": SOURCE})
    w = workload("new", 3.0, 100, 64)
    assert fit.predict(w, Route("tensorflow", "none", (), "bf16", "NCHW", efficiency=0.5), SOURCE) is None
    other = fit.predict(w, Route("pytorch", "none", (), "fp16", "NCHW", efficiency=0.5), SOURCE)
    assert other is not None and "at every precision and layout" in other.basis  # said, not hidden
    assert fit.predict(w, ROUTE, Device("cpu", "cpu", {"fp32": 1e12}, 1e11)) is None
    assert GpuFit(rows(), {"a100": SOURCE}).predict(w, ROUTE, SOURCE) is None  # the measured GPU is not a preset


def test_held_out_figures_predict_each_family_from_the_others() -> None:
    fit = GpuFit(rows(), {"h200": SOURCE})
    frame = fit.held_out()
    assert set(frame["family"]) == {"mlp", "cnn", "resnet", "transformer"}
    rmspe, low, high = fit.heldout("training")
    assert rmspe == pytest.approx(0.0, abs=1e-6)  # exact data: every held-out family is predicted exactly
    assert low <= high
    assert math.isnan(fit.heldout("inference")[0])


def test_cpu_fits_never_see_gpu_rows() -> None:
    frame = pd.DataFrame({"accelerator": ["none", "", None, "NVIDIA H200"], "value": [1, 2, 3, 4]})
    assert on_gpu(frame).tolist() == [False, False, False, True]
    assert cpu_rows(frame)["value"].tolist() == [1, 2, 3]


def test_a_compiled_route_pays_its_measured_compile_per_node_once() -> None:
    from dataclasses import replace

    base = rows(compiled_speedup=1.25)
    timed = tuple(replace(r, first_step_s=r.seconds + 0.1 * kernel_nodes(r.workload)) if r.compiler == "inductor"
                  else r for r in base)
    fit = GpuFit(timed, {"h200": SOURCE})
    w = workload("new", 3.0, 100, 64)
    compiled = fit.predict(w, Route("pytorch", "inductor", (), "bf16", "NCHW", efficiency=0.5), SOURCE)
    eager = fit.predict(w, ROUTE, SOURCE)
    assert compiled is not None and compiled.detail["compile_s"] == pytest.approx(0.1 * 100)
    assert eager is not None and "compile_s" not in eager.detail
