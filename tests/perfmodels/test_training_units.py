"""Training steps priced by the inference kernel-unit models: rows, held-out evaluation, plans, shipped units."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import numpy as np
import pytest

from analysis.units import Unit, encode_units, unit_flops
from perfmodels import training_fit, training_units
from perfmodels.features import Route, Workload
from perfmodels.results_db import make_row, read_results, write_rows
from perfmodels.targets import local_target_key
from perfmodels.training_fit import (
    TrainingFit,
    feature_row,
    leave_one_family_out,
    pricing_group,
    unit_priced_forward,
)
from perfmodels.training_units import TRAINING_UNITS, convolution_outputs, forward_seconds, read_training_units

#: name: family, (k, n) of each matrix product of one sample (m = 1 per sample).
MODELS = {
    "mlp_a": ("mlp", ((64, 32), (32, 10))),
    "mlp_b": ("mlp", ((128, 64), (64, 10))),
    "cnn_a": ("cnn", ((288, 64), (576, 64), (256, 10))),
    "cnn_b": ("cnn", ((576, 128), (1152, 128), (512, 10))),
    "res_a": ("resnet", ((1152, 256), (2304, 256), (1024, 10))),
    "res_b": ("resnet", ((2304, 512), (4608, 512), (2048, 10))),
    "tf_a": ("transformer", ((512, 1536), (512, 2048), (2048, 512))),
    "tf_b": ("transformer", ((1024, 3072), (1024, 4096), (4096, 1024))),
}


def _units(shapes: tuple[tuple[int, int], ...]) -> tuple[Unit, ...]:
    return tuple(Unit("gemm", {"m": 1, "k": k, "n": n, "act": 0, "init_w": 1}) for k, n in shapes)


class _SizeDependentRoute:
    """A unit model whose matrix products run faster the larger they are (as measured kernels do): no single FLOP
    rate fits them all."""

    def unit_seconds(self, units, batch):
        scaled = [u.at_batch(batch) for u in units]
        flops = np.array([2.0 * u["m"] * u["k"] * u["n"] for u in scaled])
        return flops / (2e8 * np.minimum(flops / 1e6, 40.0) ** 0.5)


class _Units:
    """The inference unit models: PyTorch's kernels and JAX's XLA route (``BORROWED_UNITS``' lenders) swept at 1
    thread on this host, nothing else."""

    def route(self, key):
        target, framework, compiler, layout, precision, threads = key
        swept = (local_target_key(), "NCHW", "fp32", 1) == (target, layout, precision, threads)
        ok = swept and (framework, compiler) in (("pytorch", "none"), ("onnxruntime", "xla"))
        return _SizeDependentRoute() if ok else None


def _rows():
    route, rows = _SizeDependentRoute(), []
    for name, (family, shapes) in MODELS.items():
        units = _units(shapes)
        flops = sum(2.0 * k * n for k, n in shapes)
        params = sum(k * n for k, n in shapes)
        for batch in (8, 32):
            # the truth: backward twice the forward, at the forward's (size-dependent) kernel rates; 20 us per node
            seconds = 3.0 * forward_seconds(route, units, batch) + 20e-6 * len(shapes)  # type: ignore[arg-type]
            rows.append(make_row(
                source="measured", target=local_target_key(), backend="torch", framework="pytorch",
                mode="training", precision="fp32", model=name, family=family, batch=batch, threads=1,
                scenario="training", flops_per_sample=flops, activation_bytes_per_sample=0.0, params=params,
                flops_by_class={"gemm": flops}, ops_by_class={"gemm": len(shapes)}, peak_gflops=50.0,
                bandwidth_gbs=10.0, metric="ms_per_step", value=seconds * 1e3,
            ))  # fmt: skip
    return rows


def _frame(tmp_path):
    path = tmp_path / "t.csv"
    write_rows(path, _rows())
    return read_results(path)


SHIPPED = {name: _units(shapes) for name, (_, shapes) in MODELS.items()}


def test_held_out_families_borrow_kernel_rates_from_other_models(tmp_path):
    """Matrix products measured faster the larger they are: held out by family, the FLOP model (one rate) misses the
    smallest and largest families, while pricing each model's kernels by the unit model predicts every family."""
    frame = _frame(tmp_path)
    by_units = leave_one_family_out(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    by_flops = leave_one_family_out(frame, units=_Units(), shipped={})  # type: ignore[arg-type]
    assert len(by_units.predictions) == len(by_flops.predictions) == 16
    assert by_units.step_rmspe() < 0.02
    assert by_flops.step_rmspe() > 0.2


def test_a_row_whose_units_are_recorded_needs_no_shipped_units(tmp_path):
    """A row's own ``units`` column prices it (the shipped file is for rows recorded before rows carried units)."""
    rows = []
    for row in _rows():
        kept = {k: v for k, v in row.items() if k not in ("row_id", "crc", "schema_version")}
        rows.append(make_row(**{**kept, "units": encode_units(SHIPPED[row["model"]])}))
    path = tmp_path / "t.csv"
    write_rows(path, rows)
    evaluation = leave_one_family_out(read_results(path), units=_Units(), shipped={"unused": ()})  # type: ignore[arg-type]
    assert evaluation.step_rmspe() < 0.02


def test_plans_price_the_workloads_kernels_and_fall_back_without_them(tmp_path):
    """A PyTorch training plan on the measured host is priced by its kernel units and says so; a workload without
    units, or at a thread count whose units were never swept, gets the FLOP model."""
    fit = TrainingFit.from_frame(_frame(tmp_path), units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    assert set(fit.unit_groups) == {"torch|fp32"} and fit.unit_groups["torch|fp32"].features == "units"
    _, shapes = MODELS["res_b"]
    flops = sum(2.0 * k * n for k, n in shapes)
    workload = Workload(
        flops_per_sample=flops, activation_bytes_per_sample=0.0, params=1e6, mode="training", batch_size=16,
        flops_by_class={"gemm": flops}, ops_by_class={"gemm": 3}, model_name="res_b", units=_units(shapes),
    )  # fmt: skip
    route = Route("pytorch", "none", ("mkl",), "fp32", "NCHW", efficiency=0.5)
    priced = fit.predict(workload, route, local_target_key(), 1)
    assert priced is not None and "forward priced by kernel units" in priced.basis
    truth = 3.0 * forward_seconds(_SizeDependentRoute(), workload.units, 16) + 60e-6  # type: ignore[arg-type]
    assert priced.step_seconds == pytest.approx(truth, rel=0.02)
    bare = fit.predict(Workload(**{**workload.__dict__, "units": ()}), route, local_target_key(), 1)
    assert bare is not None and "kernel units" not in bare.basis


def test_the_fit_prices_nothing_without_unit_models(tmp_path):
    """Without inference unit models (a database with no unit sweeps) the FLOP model alone is fitted."""
    fit = TrainingFit.from_frame(_frame(tmp_path))
    assert fit.groups and not fit.unit_groups
    x = feature_row(1e6, 0.0, 1e3, 8, 50.0, 10.0, {"gemm": 1e6}, {"gemm": 1})
    assert fit.groups["torch|fp32"].seconds(x) > 0


def test_a_bad_shipped_units_entry_names_its_task(tmp_path):
    path = tmp_path / "units.json"
    path.write_text(json.dumps({"resnet8": '[["gemm",[1,2],1]]'}))
    with pytest.raises(ValueError, match="resnet8: gemm unit has 2 dimensions"):
        read_training_units(path)
    assert read_training_units(tmp_path / "missing.json") == {}


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch: extra not installed")
def test_the_shipped_units_are_the_suite_models_units():
    """The shipped file matches what the suite's models cut into now (a drifted model must regenerate it:
    ``python -m benchmarks.training_units``); the small tasks, to stay fast."""
    from benchmarks.training_suite import TASK_NAMES
    from benchmarks.training_units import suite_units

    names = ("digits_mlp", "digits_cnn", "resnet8", "transformer_tiny")
    shipped = json.loads(TRAINING_UNITS.read_text())
    assert set(shipped) == set(TASK_NAMES)
    assert suite_units(names) == {n: shipped[n] for n in names}


def test_convolution_outputs_count_what_training_normalises_apart():
    """The outputs of convolutions (a depthwise-pointwise pair's two), per sample; matrix products have none."""
    conv = Unit("conv", {"n": 1, "cin": 3, "cout": 16, "h": 8, "w": 8, "kh": 3, "kw": 3, "stride": 1, "group": 1,
                         "oh": 8, "ow": 8, "act": 1, "residual": 0, "init_w": 1}, count=2)  # fmt: skip
    dwpw = Unit("dwpw", {"n": 1, "c": 32, "h": 4, "w": 4, "kh": 3, "kw": 3, "stride": 1, "oh": 4, "ow": 4, "cout": 8,
                         "dw_act": 1, "act": 0, "residual": 0, "init_w": 1})  # fmt: skip
    gemm = _units(((64, 10),))[0]
    assert convolution_outputs((conv, dwpw, gemm)) == 2 * 16 * 64 + (32 + 8) * 16
    assert convolution_outputs((gemm,)) == 0.0


def test_a_max_pool_weighs_less_than_its_forward_times_the_fits_factor_and_an_average_pool_does_not():
    """A max pool has no weight gradient and its backward scatters to the picked inputs: its step costs about 1.25x
    its forward where the fits scale a forward by 3; an average pool's backward costs what the fits' factor gives."""
    dims = {"n": 1, "c": 8, "h": 8, "w": 8, "kh": 2, "kw": 2, "stride": 2, "oh": 4, "ow": 4}
    max_pool, avg_pool = Unit("pool", {**dims, "avg": 0}), Unit("pool", {**dims, "avg": 1})
    gemm = _units(((64, 10),))[0]

    class _Each:
        def unit_seconds(self, units, batch):
            return np.full(len(units), 3e-6)

    route = _Each()
    assert forward_seconds(route, [gemm, max_pool], 1) == pytest.approx(3e-6 + 1.25e-6)  # type: ignore[arg-type]
    assert forward_seconds(route, [gemm, avg_pool], 1) == pytest.approx(6e-6)  # type: ignore[arg-type]


def test_a_compiled_trainer_is_priced_without_the_pointwise_units_its_compiler_fuses_and_an_eager_one_with_them():
    """torch.compile and XLA fuse elementwise ops and copies into the kernels around them; an eager trainer runs each
    as a kernel of its own, as the unit sweep timed it."""
    gemm = _units(((64, 10),))[0]
    gate = Unit("eltwise", {"elements": 128, "inputs": 2, "heavy": 1}, count=3)
    copy = Unit("move", {"elements": 128}, count=2)

    class _Each:
        def unit_seconds(self, units, batch):
            return np.full(len(units), 3e-6)

    route = _Each()
    assert training_units.fused_kinds("none") == ()
    eager = forward_seconds(route, [gemm, gate, copy], 1, training_units.fused_kinds("none"))  # type: ignore[arg-type]
    compiled = forward_seconds(route, [gemm, gate, copy], 1, training_units.fused_kinds("inductor"))  # type: ignore[arg-type]
    assert eager == pytest.approx(6 * 3e-6)
    assert compiled == pytest.approx(3e-6)
    assert forward_seconds(route, [gate], 1, training_units.fused_kinds("xla")) == 0.0  # type: ignore[arg-type]


#: name: family, (cin, cout, pixels) of each 3x3 convolution of one sample.
CONV_MODELS = {
    "small_a": ("small", ((3, 8, 16), (8, 8, 16))),
    "small_b": ("small", ((3, 16, 16), (16, 16, 16))),
    "mid_a": ("mid", ((16, 32, 16), (32, 32, 16), (32, 32, 8))),
    "mid_b": ("mid", ((16, 64, 8), (64, 64, 8))),
    "wide_a": ("wide", ((64, 128, 8), (128, 128, 8))),
    "wide_b": ("wide", ((64, 128, 16), (128, 256, 8))),
    "deep_a": ("deep", ((32, 64, 16), (64, 64, 16), (64, 64, 16), (64, 128, 8))),
    "deep_b": ("deep", ((16, 32, 32), (32, 32, 32), (32, 64, 16))),
}


def _conv_units(shapes: tuple[tuple[int, int, int], ...]) -> tuple[Unit, ...]:
    return tuple(
        Unit("conv", {"n": 1, "cin": cin, "cout": cout, "h": px, "w": px, "kh": 3, "kw": 3, "stride": 1, "group": 1,
                      "oh": px, "ow": px, "act": 1, "residual": 0, "init_w": 1})
        for cin, cout, px in shapes
    )  # fmt: skip


class _ThreadedRoute:
    """Kernels at a FLOP rate; on a second thread large units speed up 1.8x and small ones slow down (0.8x), as
    PyTorch's do on this host (MobileNetV2's step is slower on two threads than on one)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads

    def unit_seconds(self, units, batch):
        flops = np.array([unit_flops(u, batch) for u in units])
        speed = np.where(flops / batch > 2e6, 1.8, 0.8) if self.threads == 2 else 1.0
        return flops / 5e9 / speed


class _ThreadedUnits:
    def route(self, key):
        target, framework, _, _, _, threads = key
        ok = target == local_target_key() and framework == "pytorch" and threads in (1, 2)
        return _ThreadedRoute(threads) if ok else None


def _conv_truth(units: tuple[Unit, ...], batch: int, threads: int, params: float) -> float:
    """Forward + backward at 3x the forward's kernels, the optimiser and the normalisation passes over the
    convolution outputs (sped up as the model's kernels are), and 40 us per node."""
    forward = forward_seconds(_ThreadedRoute(threads), units, batch)  # type: ignore[arg-type]
    speed_up = forward_seconds(_ThreadedRoute(1), units, batch) / forward  # type: ignore[arg-type]
    per_pass = 4.0 * convolution_outputs(units) * batch / 10e9
    return 3.0 * forward + (40.0 * per_pass + 2.0 * 24.0 * params / 10e9) / speed_up + 40e-6 * len(units)


def _conv_frame(tmp_path):
    rows = []
    for name, (family, shapes) in CONV_MODELS.items():
        units = _conv_units(shapes)
        flops = sum(unit_flops(u) for u in units)
        params = sum(9.0 * cin * cout for cin, cout, _ in shapes)
        for batch in (4, 16):
            for threads in (1, 2):
                rows.append(make_row(
                    source="measured", target=local_target_key(), backend="torch", framework="pytorch",
                    mode="training", precision="fp32", model=name, family=family, batch=batch, threads=threads,
                    scenario="training", flops_per_sample=flops, activation_bytes_per_sample=0.0, params=params,
                    flops_by_class={"conv": flops}, ops_by_class={"conv": len(units)}, peak_gflops=50.0 * threads,
                    bandwidth_gbs=10.0, metric="ms_per_step", value=_conv_truth(units, batch, threads, params) * 1e3,
                ))  # fmt: skip
    path = tmp_path / "conv.csv"
    write_rows(path, rows)
    return read_results(path)


def test_normalisation_traffic_and_each_models_thread_speed_up_are_priced(tmp_path):
    """Steps that pay passes over the convolution outputs (training's batch normalisation, which the inference
    units fold), and whose per-sample extra work speeds up on a second thread as the model's own kernels do (one
    model faster, another slower): held out by family, the unit-priced model predicts every row; a plan at two
    threads too."""
    frame = _conv_frame(tmp_path)
    shipped = {name: _conv_units(shapes) for name, (_, shapes) in CONV_MODELS.items()}
    evaluation = leave_one_family_out(frame, units=_ThreadedUnits(), shipped=shipped)  # type: ignore[arg-type]
    assert len(evaluation.predictions) == 32
    assert evaluation.step_rmspe() < 0.01  # 4.6% with no term for the outputs and a depthwise term sped up instead
    fit = TrainingFit.from_frame(frame, units=_ThreadedUnits(), shipped=shipped)  # type: ignore[arg-type]
    units = _conv_units(CONV_MODELS["wide_b"][1])
    flops = sum(unit_flops(u) for u in units)
    workload = Workload(
        flops_per_sample=flops, activation_bytes_per_sample=0.0, params=1e5, mode="training", batch_size=8,
        flops_by_class={"conv": flops}, ops_by_class={"conv": len(units)}, model_name="wide_b", units=units,
    )  # fmt: skip
    route = Route("pytorch", "none", ("mkl",), "fp32", "NCHW", efficiency=0.5)
    for threads in (1, 2):
        priced = fit.predict(workload, route, local_target_key(), threads)
        assert priced is not None and "forward priced by kernel units" in priced.basis
        assert priced.step_seconds == pytest.approx(_conv_truth(units, 8, threads, 1e5), rel=0.02)


# --- a framework with no unit sweep of its own, priced by a swept framework's units (``BORROWED_UNITS``) ----------


def _own_threads_frame(tmp_path):
    """TensorFlow steps at 1.4x three times PyTorch's one-thread forward, gaining only 2**0.1 from a second thread
    where PyTorch's large kernels gain 1.8x (``_ThreadedRoute``)."""
    rows = []
    for name, (family, shapes) in CONV_MODELS.items():
        units = _conv_units(shapes)
        flops = sum(unit_flops(u) for u in units)
        for batch in (4, 16):
            forward = forward_seconds(_ThreadedRoute(1), units, batch)  # type: ignore[arg-type]
            for threads in (1, 2):
                rows.append(make_row(
                    source="measured", target=local_target_key(), backend="keras", framework="tensorflow",
                    compiler="none", mode="training", precision="fp32", model=name, family=family, batch=batch,
                    threads=threads, scenario="training", flops_per_sample=flops, activation_bytes_per_sample=0.0,
                    params=0.0, flops_by_class={"conv": flops}, ops_by_class={"conv": len(units)},
                    peak_gflops=50.0 * threads, bandwidth_gbs=10.0, metric="ms_per_step",
                    value=1.4 * 3.0 * forward / threads**0.1 * 1e3,
                ))  # fmt: skip
    path = tmp_path / "tf-threads.csv"
    write_rows(path, rows)
    return read_results(path)


def test_a_borrower_with_threading_of_its_own_is_priced_at_one_thread_and_sped_up_by_its_exponent(
    tmp_path, monkeypatch
):
    """TensorFlow's eager steps barely gain from a second thread where PyTorch's kernels do: priced by PyTorch's
    units at one thread and its own rows' exponent, held out by family every row is predicted; carried by PyTorch's
    two-thread units instead, its two-thread steps are not."""
    frame = _own_threads_frame(tmp_path)
    shipped = {name: _conv_units(shapes) for name, (_, shapes) in CONV_MODELS.items()}
    own = leave_one_family_out(frame, units=_ThreadedUnits(), shipped=shipped)  # type: ignore[arg-type]
    assert len(own.predictions) == 32 and own.step_rmspe() < 0.01
    monkeypatch.setitem(training_units.BORROWED_UNITS, ("tensorflow", "none"), training_units.Lender("pytorch"))
    lenders = leave_one_family_out(frame, units=_ThreadedUnits(), shipped=shipped)  # type: ignore[arg-type]
    assert lenders.step_rmspe() > 0.1


#: How much slower than PyTorch's each TensorFlow route runs the same kernels in ``_tf_rows``' truth.
TF_SCALES = {"none": 1.4, "xla": 2.2}


def _tf_rows(models=tuple(MODELS), compilers=("none", "xla"), framework="tensorflow", other_cpu=0.0):
    """Steps of a framework with no unit sweep: PyTorch's truth (``_rows``) times a factor per compiler."""
    rows = []
    for row in _rows():
        if row["model"] not in models:
            continue
        kept = {k: v for k, v in row.items() if k not in ("row_id", "crc", "schema_version")}
        for compiler in compilers:
            backend = "keras" if compiler == "none" else f"keras-{compiler}"
            rows.append(make_row(**{
                **kept, "backend": backend, "framework": framework, "compiler": compiler,
                "value": float(row["value"]) * TF_SCALES[compiler], "other_cpu": other_cpu,
            }))  # fmt: skip
    return rows


def _tf_frame(tmp_path, rows):
    path = tmp_path / "tf.csv"
    write_rows(path, rows)
    return read_results(path)


def _workload(name: str, batch: int = 16) -> Workload:
    _, shapes = MODELS[name]
    flops = sum(2.0 * k * n for k, n in shapes)
    return Workload(
        flops_per_sample=flops, activation_bytes_per_sample=0.0, params=1e6, mode="training", batch_size=batch,
        flops_by_class={"gemm": flops}, ops_by_class={"gemm": len(shapes)}, model_name=name, units=_units(shapes),
    )  # fmt: skip


def _route(framework: str, compiler: str) -> Route:
    return Route(framework, compiler, ("onednn",), "fp32", "NHWC", efficiency=0.5)


def test_tensorflow_borrows_pytorchs_units_with_its_own_coefficients(tmp_path):
    """TensorFlow has no unit sweep; PyTorch's units price it, each route at its own scale: held out by family,
    every TensorFlow row is predicted as PyTorch's are, where its FLOP model (one rate per op class) misses."""
    frame = _tf_frame(tmp_path, _tf_rows())
    by_units = leave_one_family_out(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    by_flops = leave_one_family_out(frame, units=_Units(), shipped={})  # type: ignore[arg-type]
    assert len(by_units.predictions) == 32
    assert by_units.step_rmspe() < 0.02
    assert by_flops.step_rmspe() > 0.2
    assert "tensorflow units" in by_units.models
    fit = TrainingFit.from_frame(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    assert {k: g.features for k, g in fit.unit_groups.items()} == {"keras|fp32": "units", "keras-xla|fp32": "units"}


def test_borrowed_units_extrapolate_to_a_larger_model(tmp_path):
    """Fitted on the small models only, a TensorFlow plan for the largest model (4x the FLOPs of any row) is priced
    by its kernels within 2% of the truth, for both routes."""
    small = tuple(m for m in MODELS if m not in ("res_b", "tf_b"))
    frame = _tf_frame(tmp_path, _tf_rows(models=small))
    fit = TrainingFit.from_frame(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    workload = _workload("tf_b")
    for compiler, scale in TF_SCALES.items():
        truth = scale * (3.0 * forward_seconds(_SizeDependentRoute(), workload.units, 16) + 60e-6)  # type: ignore[arg-type]
        priced = fit.predict(workload, _route("tensorflow", compiler), local_target_key(), 1)
        assert priced is not None and "forward priced by kernel units" in priced.basis
        assert priced.step_seconds == pytest.approx(truth, rel=0.02)


def test_a_framework_no_swept_framework_prices_keeps_the_flop_model(tmp_path):
    """A framework neither swept nor in ``BORROWED_UNITS`` is fitted and planned by the FLOP model."""
    frame = _tf_frame(tmp_path, _tf_rows(compilers=("none",), framework="mxnet"))
    fit = TrainingFit.from_frame(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    assert fit.groups and not fit.unit_groups
    priced = fit.predict(_workload("tf_b"), _route("mxnet", "none"), local_target_key(), 1)
    assert priced is not None and "kernel units" not in priced.basis
    assert "mxnet flops" in leave_one_family_out(frame, units=_Units(), shipped=SHIPPED).models  # type: ignore[arg-type]


def test_a_route_that_does_not_borrow_is_fitted_apart_from_its_frameworks_borrowing_one(tmp_path, monkeypatch):
    """Were XLA's kernels not priced by PyTorch's units, its rows would keep the FLOP model in a group of their own,
    and plain TensorFlow's rows would still be unit-priced (not dragged to the FLOP model by the XLA rows)."""
    monkeypatch.setattr(training_units, "BORROWED_UNITS", {("tensorflow", "none"): training_units.Lender("pytorch")})
    assert pricing_group("tensorflow", "none") == "tensorflow"
    assert pricing_group("tensorflow", "xla") == "tensorflow xla"
    assert pricing_group("pytorch", "inductor") == "pytorch"
    assert pricing_group("pytorch", "inductor", families=3) == "pytorch"
    assert pricing_group("pytorch", "inductor", families=4) == "pytorch inductor"
    frame = _tf_frame(tmp_path, _tf_rows())
    fit = TrainingFit.from_frame(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    assert set(fit.unit_groups) == {"keras|fp32"}
    evaluation = leave_one_family_out(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    assert {"tensorflow units", "tensorflow xla flops"} <= set(evaluation.models)
    xla = fit.predict(_workload("tf_b"), _route("tensorflow", "xla"), local_target_key(), 1)
    assert xla is not None and "kernel units" not in xla.basis


def test_a_route_measured_only_under_load_is_unit_priced_too_and_says_so(tmp_path):
    """TensorFlow's rows all measured under load: its routes are fitted alone (not with the quiet rows), by the
    borrowed units too, and its plans say both."""
    frame = _tf_frame(tmp_path, [*_rows(), *_tf_rows(compilers=("none",), other_cpu=1.5)])
    fit = TrainingFit.from_frame(frame, units=_Units(), shipped=SHIPPED)  # type: ignore[arg-type]
    assert fit.unit_groups["keras|fp32"].under_load and not fit.unit_groups["torch|fp32"].under_load
    priced = fit.predict(_workload("tf_b"), _route("tensorflow", "none"), local_target_key(), 1)
    assert priced is not None
    assert "forward priced by kernel units" in priced.basis and "(rows measured under load)" in priced.basis


# --- a compiler's own kernels of some kinds, priced by its own sweep (``Lender.kinds``) ---------------------------


class _FixedRoute:
    """A unit model pricing every unit at ``seconds`` (a batch of one)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def unit_seconds(self, units, batch):
        return np.full(len(units), self.seconds * batch)


DEPTHWISE = Unit("dwconv", {"n": 1, "c": 32, "mult": 1, "h": 16, "w": 16, "kh": 3, "kw": 3, "stride": 1,
                            "oh": 16, "ow": 16, "act": 1, "residual": 0, "init_w": 1})  # fmt: skip
GEMM = Unit("gemm", {"m": 1, "k": 64, "n": 64, "act": 0, "init_w": 1})


class _TwoSweeps:
    """PyTorch's plain kernels at 1 µs a unit and JAX's XLA route at 50 µs, both swept at ``threads``."""

    def __init__(self, threads=(1,), xla=True) -> None:
        self.threads, self.xla = threads, xla

    def route(self, key):
        target, framework, compiler, layout, precision, threads = key
        if (target, layout, precision) != (local_target_key(), "NCHW", "fp32") or threads not in self.threads:
            return None
        if (framework, compiler) == ("pytorch", "none"):
            return _FixedRoute(1e-6)
        return _FixedRoute(50e-6) if self.xla and (framework, compiler) == ("onnxruntime", "xla") else None


def test_xla_prices_its_depthwise_convolutions_by_its_own_sweep_and_the_rest_by_pytorchs():
    """TensorFlow's XLA route: a depthwise unit at XLA's own swept speed, a matrix product at PyTorch's; plain
    TensorFlow prices both at PyTorch's."""
    units = [DEPTHWISE, GEMM, DEPTHWISE]
    xla = training_units.unit_route(_TwoSweeps(), local_target_key(), "tensorflow", 1, compiler="xla")  # type: ignore[arg-type]
    plain = training_units.unit_route(_TwoSweeps(), local_target_key(), "tensorflow", 1)  # type: ignore[arg-type]
    assert xla is not None and plain is not None
    assert list(xla.unit_seconds(units, 2)) == pytest.approx([100e-6, 2e-6, 100e-6])
    assert list(plain.unit_seconds(units, 2)) == pytest.approx([2e-6, 2e-6, 2e-6])
    assert forward_seconds(xla, [Unit("dwconv", DEPTHWISE.dims, count=3)], 1) == pytest.approx(150e-6)


def test_without_its_own_sweep_xla_is_not_priced_by_units():
    """Where JAX's XLA route was not swept (at those threads), XLA's steps are not priced as if its depthwise kernels
    were PyTorch's: no unit route, so the FLOP model prices them."""
    no_xla = _TwoSweeps(xla=False)
    assert training_units.unit_route(no_xla, local_target_key(), "tensorflow", 1, compiler="xla") is None  # type: ignore[arg-type]
    assert training_units.unit_route(no_xla, local_target_key(), "tensorflow", 1) is not None  # type: ignore[arg-type]
    assert training_units.unit_route(_TwoSweeps(), local_target_key(), "tensorflow", 2, compiler="xla") is None  # type: ignore[arg-type]


class _ThreadedSweeps(_TwoSweeps):
    """``_TwoSweeps`` at 1 and 2 threads: PyTorch's units twice as fast at 2 threads, JAX's XLA units no faster (a
    unit swept alone through JAX gains nothing from a second thread, as its depthwise units measured)."""

    def __init__(self, one_thread_xla: bool = True) -> None:
        super().__init__(threads=(1, 2))
        self.one_thread_xla = one_thread_xla

    def route(self, key):
        found = super().route(key)
        framework, threads = key[1], key[5]
        if found is None or (threads == 1 and framework == "onnxruntime" and not self.one_thread_xla):
            return None
        return _FixedRoute(found.seconds / threads) if framework == "pytorch" else found


def test_xlas_own_units_are_sped_up_from_one_thread_as_the_lenders_same_units_are():
    """At 2 threads, XLA's depthwise units are its one-thread sweep's times over PyTorch's speed-up of the same
    units (2x here), not its 2-thread sweep's (no speed-up); the rest stays PyTorch's at 2 threads. Without a
    one-thread XLA sweep, its units are priced as they ran at 2 threads."""
    units = [DEPTHWISE, GEMM]
    two = training_units.unit_route(_ThreadedSweeps(), local_target_key(), "tensorflow", 2, compiler="xla")  # type: ignore[arg-type]
    one = training_units.unit_route(_ThreadedSweeps(), local_target_key(), "tensorflow", 1, compiler="xla")  # type: ignore[arg-type]
    assert two is not None and one is not None
    assert list(one.unit_seconds(units, 1)) == pytest.approx([50e-6, 1e-6])
    assert list(two.unit_seconds(units, 1)) == pytest.approx([25e-6, 0.5e-6])
    as_ran = training_units.unit_route(
        _ThreadedSweeps(one_thread_xla=False), local_target_key(), "tensorflow", 2, compiler="xla"
    )  # type: ignore[arg-type]
    assert as_ran is not None
    assert list(as_ran.unit_seconds(units, 1)) == pytest.approx([50e-6, 0.5e-6])


# --- a lender's kinds the trainer runs on kernels of another library (``Lender.apart``) ---------------------------


#: name: family, convolutions (cin, cout, px), matrix products (k, n): families from all-convolution to no convolution.
APART_MODELS = {
    "conv_a": ("conv", ((3, 16, 16), (16, 32, 16)), ()),
    "conv_b": ("conv", ((16, 32, 16), (32, 64, 8)), ()),
    "mixed_a": ("mixed", ((3, 16, 8),), ((1024, 512), (512, 10))),
    "mixed_b": ("mixed", ((16, 32, 8),), ((2048, 512), (512, 10))),
    "dense_a": ("dense", (), ((512, 1536), (1536, 512))),
    "dense_b": ("dense", (), ((1024, 2048), (2048, 1024))),
    "wide_a": ("wide", ((32, 64, 16), (64, 64, 16)), ((4096, 256),)),
    "wide_b": ("wide", ((64, 128, 8),), ((2048, 1024), (1024, 10))),
}
#: How much slower than the lender's units XLA runs its convolutions, and its other kernels, in ``_xla_frame``.
XLA_CONV_SCALE, XLA_OTHER_SCALE = 2.5, 1.0


def _apart_units(name: str) -> tuple[Unit, ...]:
    _, convs, products = APART_MODELS[name]
    return _conv_units(convs) + _units(products)


class _LenderAndXla:
    """PyTorch's units and JAX's XLA route, both ``_ThreadedRoute`` at one thread."""

    def route(self, key):
        target, framework, compiler, layout, precision, threads = key
        routes = (("pytorch", "none"), ("onnxruntime", "xla"))
        ok = (target, layout, precision, threads) == (local_target_key(), "NCHW", "fp32", 1)
        return _ThreadedRoute(1) if ok and (framework, compiler) in routes else None


def _xla_frame(tmp_path, models=None, slow_kinds=("conv",)):
    """keras-xla steps: three times a forward whose ``slow_kinds`` (convolutions) run ``XLA_CONV_SCALE`` and other
    kernels ``XLA_OTHER_SCALE`` times the lender's units, and 40 us a node; ``models``: name -> (family, units),
    default ``APART_MODELS``."""
    rows = []
    models = models or {name: (family, _apart_units(name)) for name, (family, _, _) in APART_MODELS.items()}
    for name, (family, units) in models.items():
        flops = sum(unit_flops(u) for u in units)
        conv = [u for u in units if u.kind in slow_kinds]
        other = [u for u in units if u.kind not in slow_kinds]
        for batch in (4, 16):
            priced = [forward_seconds(_ThreadedRoute(1), part, batch) if part else 0.0 for part in (conv, other)]  # type: ignore[arg-type]
            seconds = 3.0 * (XLA_CONV_SCALE * priced[0] + XLA_OTHER_SCALE * priced[1]) + 40e-6 * len(units)
            rows.append(make_row(
                source="measured", target=local_target_key(), backend="keras-xla", framework="tensorflow",
                compiler="xla", mode="training", precision="fp32", model=name, family=family, batch=batch,
                threads=1, scenario="training", flops_per_sample=flops, activation_bytes_per_sample=0.0, params=0.0,
                flops_by_class={"conv": flops}, ops_by_class={"conv": len(units)}, peak_gflops=50.0,
                bandwidth_gbs=10.0, metric="ms_per_step", value=seconds * 1e3,
            ))  # fmt: skip
    path = tmp_path / "xla.csv"
    write_rows(path, rows)
    return read_results(path)


def test_xlas_convolutions_take_a_coefficient_of_their_own_where_they_run_on_other_kernels(tmp_path, monkeypatch):
    """XLA runs its dense convolutions on Eigen, not on the oneDNN kernels its lender's units time: held out by
    family, its steps are predicted with the convolutions apart (``Lender.apart``), and not with one coefficient
    for the whole forward; PyTorch's forward, priced by its own units, has no part apart."""
    shipped = {name: _apart_units(name) for name in APART_MODELS}
    frame = _xla_frame(tmp_path)
    units = _apart_units("wide_b")
    sweeps = _LenderAndXla()
    here = local_target_key()
    eager = unit_priced_forward(sweeps, {}, here, "pytorch", 1, units, 4, 10.0, tensors=0.0)  # type: ignore[arg-type]
    compiled = unit_priced_forward(sweeps, {}, here, "tensorflow", 1, units, 4, 10.0, compiler="xla", tensors=0.0)  # type: ignore[arg-type]
    conv = forward_seconds(_ThreadedRoute(1), units[:1], 4)  # type: ignore[arg-type]
    assert eager[3] == 0.0 and compiled[3] == pytest.approx(conv)
    assert compiled[0] == pytest.approx(eager[0])
    apart = leave_one_family_out(frame, units=sweeps, shipped=shipped)  # type: ignore[arg-type]
    assert len(apart.predictions) == 16 and apart.step_rmspe() < 0.01
    lender = training_units.BORROWED_UNITS[("tensorflow", "xla")]
    assert lender.apart == ("conv", "dwconv", "dwpw")
    fit = TrainingFit.from_frame(frame, units=sweeps, shipped=shipped)  # type: ignore[arg-type]
    flops = sum(unit_flops(u) for u in units)
    workload = Workload(
        flops_per_sample=flops, activation_bytes_per_sample=0.0, params=0.0, mode="training", batch_size=4,
        flops_by_class={"conv": flops}, ops_by_class={"conv": len(units)}, model_name="wide_b", units=units,
    )  # fmt: skip
    priced = fit.predict(workload, _route("tensorflow", "xla"), local_target_key(), 1)
    assert priced is not None
    assert "its conv units at a coefficient of their own (pytorch's units time them" in priced.basis
    assert training_fit._apart_note(workload, _route("pytorch", "none")) == ""  # PyTorch's own units: none apart
    eager_note = training_fit._apart_note(workload, _route("tensorflow", "none"))  # TensorFlow's: conv apart
    assert "its conv units at a coefficient of their own" in eager_note
    monkeypatch.setitem(training_units.BORROWED_UNITS, ("tensorflow", "xla"), replace(lender, apart=()))
    together = leave_one_family_out(frame, units=sweeps, shipped=shipped)  # type: ignore[arg-type]
    assert together.step_rmspe() > 0.1


def _dw_units(shapes: tuple[tuple[int, int], ...]) -> tuple[Unit, ...]:
    return tuple(
        Unit("dwconv", {"n": 1, "c": c, "mult": 1, "h": px, "w": px, "kh": 3, "kw": 3, "stride": 1, "oh": px, "ow": px,
                        "act": 1, "residual": 0, "init_w": 1})
        for c, px in shapes
    )  # fmt: skip


#: name: family, convolutions (cin, cout, px), depthwise convolutions (channels, px), matrix products (k, n).
SEPARABLE_MODELS = {
    "conv_a": ("conv", ((3, 16, 16), (16, 32, 16)), (), ()),
    "conv_b": ("conv", ((16, 32, 16), (32, 64, 8)), (), ()),
    "dense_a": ("dense", (), (), ((512, 1536), (1536, 512))),
    "dense_b": ("dense", (), (), ((1024, 2048), (2048, 1024))),
    "mixed_a": ("mixed", ((3, 16, 8),), (), ((1024, 512), (512, 10))),
    "mixed_b": ("mixed", ((16, 32, 8),), (), ((2048, 512), (512, 10))),
    "sep_a": ("separable", ((3, 32, 16),), ((32, 16), (64, 8)), ((256, 10),)),
    "sep_b": ("separable", ((3, 16, 16),), ((16, 16), (96, 8), (128, 4)), ((512, 10),)),
}


def test_xlas_depthwise_convolutions_take_the_convolutions_coefficient_not_the_forwards(tmp_path, monkeypatch):
    """XLA's depthwise convolutions are priced by JAX's units, but a step also runs their gradients as XLA kernels
    of its own: a family of them held out (here their step costs what dense convolutions' do over their units) is
    predicted with them apart, next to the dense convolutions, and not at the coefficient of the whole forward."""
    units_of = {
        name: _conv_units(convs) + _dw_units(dws) + _units(products)
        for name, (_, convs, dws, products) in SEPARABLE_MODELS.items()
    }
    models = {name: (family, units_of[name]) for name, (family, _, _, _) in SEPARABLE_MODELS.items()}
    frame = _xla_frame(tmp_path, models, ("conv", "dwconv"))
    sweeps = _LenderAndXla()
    apart = leave_one_family_out(frame, units=sweeps, shipped=units_of)  # type: ignore[arg-type]
    held = apart.predictions
    separable = held[held["family"] == "separable"]
    assert len(separable) == 4
    assert float(np.max(np.abs(separable["predicted"] / separable["measured"] - 1.0))) < 0.01
    lender = training_units.BORROWED_UNITS[("tensorflow", "xla")]
    monkeypatch.setitem(training_units.BORROWED_UNITS, ("tensorflow", "xla"), replace(lender, apart=("conv",)))
    dense_only = leave_one_family_out(frame, units=sweeps, shipped=units_of).predictions  # type: ignore[arg-type]
    separable = dense_only[dense_only["family"] == "separable"]
    assert float(np.max(np.abs(separable["predicted"] / separable["measured"] - 1.0))) > 0.1


def _adds(count: int) -> tuple[Unit, ...]:
    return tuple(Unit("eltwise", {"elements": 4096, "inputs": 2, "heavy": 0}) for _ in range(count))


#: name: family, convolutions, products, residual adds (no weights): weight tensors and nodes vary apart.
TENSOR_MODELS = {
    "few_a": ("few", ((3, 16, 8),), (), 8),
    "few_b": ("few", ((3, 16, 8), (16, 16, 8)), (), 12),
    "many_a": ("many", (), ((64, 32),) * 8, 0),
    "many_b": ("many", (), ((128, 32),) * 12, 2),
    "mixed_a": ("mixed", ((3, 8, 8),), ((512, 64),) * 4, 4),
    "mixed_b": ("mixed", ((3, 8, 8),) * 3, ((512, 64),), 6),
}
#: What each weight tensor costs a step in ``_tensor_frame``'s steps: the optimiser's, the zeroing's and the
#: accumulation's loops over tensors.
PER_TENSOR_S = 150e-6


def _tensor_units(name: str) -> tuple[Unit, ...]:
    _, convs, products, adds = TENSOR_MODELS[name]
    return _conv_units(convs) + _units(products) + _adds(adds)


def _tensor_frame(tmp_path):
    """PyTorch steps: three times the forward's kernels, 40 us a node and ``PER_TENSOR_S`` a weight tensor."""
    rows = []
    for name, (family, _, _, _) in TENSOR_MODELS.items():
        units = _tensor_units(name)
        flops = sum(unit_flops(u) for u in units)
        tensors = 2 * sum(u.kind in ("conv", "gemm") for u in units)
        for batch in (4, 16):
            seconds = 3.0 * forward_seconds(_ThreadedRoute(1), units, batch) + 40e-6 * len(units)  # type: ignore[arg-type]
            rows.append(make_row(
                source="measured", target=local_target_key(), backend="torch", framework="pytorch",
                mode="training", precision="fp32", model=name, family=family, batch=batch, threads=1,
                scenario="training", flops_per_sample=flops, activation_bytes_per_sample=0.0, params=0.0,
                flops_by_class={"gemm": flops}, ops_by_class={"gemm": len(units)}, peak_gflops=50.0,
                bandwidth_gbs=10.0, metric="ms_per_step", value=(seconds + PER_TENSOR_S * tensors) * 1e3,
                units=encode_units(units),
            ))  # fmt: skip
    path = tmp_path / "tensors.csv"
    write_rows(path, rows)
    return read_results(path)


def test_weight_tensors_count_what_a_step_updates():
    units = (
        *_conv_units(((3, 16, 8),)),
        *_units(((64, 10),)),
        Unit("recurrent", {"batch": 1, "steps": 8, "inputs": 16, "hidden": 32, "gates": 3, "directions": 2}),
        Unit("layernorm", {"rows": 8, "cols": 32}, count=3),
        *_adds(5),
    )
    assert training_units.weight_tensors(units) == 2 + 2 + 8 + 6


def test_a_steps_weight_tensors_are_priced_apart_from_its_nodes(tmp_path):
    """A step pays per weight tensor (optimiser, zeroing, accumulation loops), not per node nor per parameter byte:
    held out by family, steps of models whose tensors and nodes vary apart are predicted within 1%."""
    frame = _tensor_frame(tmp_path)
    shipped = {name: _tensor_units(name) for name in TENSOR_MODELS}
    evaluation = leave_one_family_out(frame, units=_ThreadedUnits(), shipped=shipped, nested=False)  # type: ignore[arg-type]
    assert len(evaluation.predictions) == 12
    assert evaluation.step_rmspe() < 0.01
    units = _tensor_units("many_b")
    tensors = training_units.weight_tensors(units)
    here = local_target_key()
    forward = unit_priced_forward(_ThreadedUnits(), {}, here, "pytorch", 1, units, 4, 10.0, tensors=tensors)  # type: ignore[arg-type]
    assert forward[4] == pytest.approx(training_fit.TENSOR_S * 24)
