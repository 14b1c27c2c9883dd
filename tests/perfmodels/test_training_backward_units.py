"""Training steps priced by a framework's own training kernels swept as units: forward, backward, optimiser."""

from __future__ import annotations

import json
import math
import uuid

import numpy as np
import pytest

from analysis.units import Unit, encode_units, unit_features
from perfmodels.features import Route, Workload
from perfmodels.results_db import make_row
from perfmodels.targets import local_target_key
from perfmodels.training_fit import (
    STEP_CONSTANT_S,
    TRAIN_UNIT_FEATURES,
    TrainingFit,
    leave_one_family_out,
    mixed_precision,
    train_unit_matrix,
)
from perfmodels.training_units import (
    BACKWARD_FAMILY,
    OPTIMIZER_FAMILY,
    TRAIN_FORWARD_FAMILY,
    OptimizerCost,
    TrainingUnitRoute,
    alignment,
    cast_bytes,
    fit_optimizer,
    fit_training_units,
    param_tensors,
    trained,
    training_route,
    training_unit_features,
)
from tests.perfmodels.test_training_fit import _frame
from tests.perfmodels.test_training_units import MODELS, _units

OPTIMIZER = OptimizerCost(tensor_s=2e-6, element_s=1e-9)


class _Forward:
    """Matrix products at a rate that grows with their size (no single FLOP rate fits them all)."""

    def seconds(self, units, batch):
        return float(sum(u.count * _forward(u.at_batch(batch)) for u in units))


class _Backward:
    """dX and dW at the forward's rate, plus writing a weight-sized gradient at 1 GB/s: at a small batch the
    weight gradient, not the FLOPs, is the time (as the runtime's is)."""

    def seconds(self, units, batch):
        return float(sum(u.count * _backward(u.at_batch(batch)) for u in units))


def _forward(u: Unit) -> float:
    flops = 2.0 * u["m"] * u["k"] * u["n"]
    return flops / (2e8 * min(flops / 1e6, 40.0) ** 0.5)


def _backward(u: Unit) -> float:
    return 2.0 * _forward(u) + 4.0 * u["k"] * u["n"] / 1e9


ROUTES = {(local_target_key(), "appopt-runtime", "fp32"): TrainingUnitRoute(_Forward(), _Backward(), OPTIMIZER)}  # type: ignore[arg-type]
SHIPPED = {name: _units(shapes) for name, (_, shapes) in MODELS.items()}


def _true_step(units: tuple[Unit, ...], batch: int) -> float:
    params = sum(u["k"] * u["n"] for u in units)
    optimizer = OPTIMIZER.seconds(param_tensors(units), params)
    return _Forward().seconds(units, batch) + _Backward().seconds(units, batch) + optimizer + 20e-6 * len(units)


def _rows():
    rows = []
    for name, (family, shapes) in MODELS.items():
        units = SHIPPED[name]
        flops = sum(2.0 * k * n for k, n in shapes)
        for batch in (4, 32):
            rows.append(make_row(
                source="measured", target=local_target_key(), backend="appopt-runtime", framework="appopt-runtime",
                mode="training", precision="fp32", model=name, family=family, batch=batch, threads=1,
                scenario="training", flops_per_sample=flops, activation_bytes_per_sample=0.0,
                params=sum(k * n for k, n in shapes), flops_by_class={"gemm": flops},
                ops_by_class={"gemm": len(shapes)}, peak_gflops=50.0, bandwidth_gbs=10.0, metric="ms_per_step",
                value=_true_step(units, batch) * 1e3,
            ))  # fmt: skip
    return rows


def test_held_out_steps_are_priced_by_the_training_units(tmp_path):
    """The truth is forward + backward (weight-gradient bound at small batches) + optimiser + per node: priced by
    its training units every family is predicted held out, where the FLOP model (work at fitted FLOP rates) misses;
    the inner choice picks the training units in every fold."""
    frame = _frame(tmp_path, _rows())
    priced = leave_one_family_out(frame, shipped=SHIPPED, training_routes=ROUTES)
    by_flops = leave_one_family_out(frame, shipped={}, training_routes=ROUTES)
    assert len(priced.predictions) == len(by_flops.predictions) == 16
    assert priced.step_rmspe() < 0.02
    assert by_flops.step_rmspe() > 0.1
    assert priced.models == ("appopt-runtime train_units",)
    assert priced.nested is not None and _rmspe(priced.nested) < 0.02
    assert len(priced.picks) == 4 and all("appopt-runtime train_units" in p for p in priced.picks)
    assert any(line.startswith("nested (the set chosen") for line in priced.lines())


def test_a_mixed_precision_route_is_its_fp32_steps_plus_its_casts(tmp_path):
    """Mixed precision computes in fp32 and casts its products' operands (weights included, every step): its step
    is the fp32 step plus the casts' traffic. Held out by family it is predicted so; a scale of its own over the fp32
    coefficients cannot be, since the casts' share of a step differs by family (weight-heavy products cast most)."""
    bandwidth = 10e9
    rows = _rows()
    for row in list(rows):
        units = SHIPPED[row["model"]]
        casts = 3.0 * cast_bytes(units, row["batch"]) / bandwidth
        step_ms = row["value"] + 50e3 * casts  # casts at a 50th of the bandwidth: 1.1-3.5x the fp32 step
        rows.append({**row, "row_id": uuid.uuid4().hex, "backend": "appopt-runtime-amp", "precision": "fp16",
                     "value": step_ms})  # fmt: skip
    evaluation = leave_one_family_out(_frame(tmp_path, rows), shipped=SHIPPED, training_routes=ROUTES, nested=False)
    mixed = evaluation.predictions[evaluation.predictions["backend"] == "appopt-runtime-amp"]
    assert len(mixed) == 16
    assert _rmspe(mixed) < 0.03


def _rmspe(frame) -> float:
    return float(np.sqrt(np.mean((frame["predicted"] / frame["measured"] - 1) ** 2)))


def test_the_backward_is_priced_at_each_rows_batch(tmp_path):
    """A route that priced every row at one sample (the forward unit's shape, not the batch's) fails the same
    evaluation: the parts must be priced at the row's batch."""

    class _OneSample(TrainingUnitRoute):
        def parts(self, units, batch, params):
            return super().parts(units, 1, params)

    wrong = {key: _OneSample(r.forward, r.backward, r.optimizer) for key, r in ROUTES.items()}
    evaluation = leave_one_family_out(_frame(tmp_path, _rows()), shipped=SHIPPED, training_routes=wrong)
    assert evaluation.step_rmspe() > 0.1


def _res_b_training(units: tuple[Unit, ...]) -> tuple[Workload, Route]:
    """``res_b`` (three products) trained at batch 16 on appopt-runtime."""
    flops = sum(2.0 * u["k"] * u["n"] for u in units)
    workload = Workload(
        flops_per_sample=flops, activation_bytes_per_sample=0.0, params=sum(u["k"] * u["n"] for u in units),
        mode="training", batch_size=16, flops_by_class={"gemm": flops}, ops_by_class={"gemm": 3},
        model_name="res_b", units=units,
    )  # fmt: skip
    return workload, Route("appopt-runtime", "none", ("numpy",), "fp32", "NCHW", efficiency=0.5)


def test_plans_price_the_workloads_training_kernels(tmp_path):
    """An appopt-runtime training plan is priced by its training units and says so; without units, the FLOP
    model."""
    fit = TrainingFit.from_frame(_frame(tmp_path, _rows()), shipped=SHIPPED, training_routes=ROUTES)
    assert fit.unit_groups["appopt-runtime|fp32"].features == "train_units"
    units = SHIPPED["res_b"]
    workload, route = _res_b_training(units)
    priced = fit.predict(workload, route, local_target_key(), 1)
    assert priced is not None and "training kernel units" in priced.basis
    assert priced.step_seconds == pytest.approx(_true_step(units, 16), rel=0.02)
    bare = fit.predict(Workload(**{**workload.__dict__, "units": ()}), route, local_target_key(), 1)
    assert bare is not None and "kernel units" not in bare.basis


# --- the unit models themselves ---------------------------------------------------------------------------------


def test_each_precision_is_fitted_from_its_own_sweep_and_falls_back_to_fp32s(tmp_path):
    """Mixed-precision sweep rows make a route of their own (never mixed into fp32's), with fp32's optimiser; a
    precision not swept is priced by its framework's fp32 units."""
    fp32 = _sweep_rows(np.random.default_rng(0))
    slow = [{**r, "precision": "fp16", "backend": "appopt-runtime-amp",
             "value": 3 * r["value"], "median_ms": 3 * r["median_ms"]}
            for r in _sweep_rows(np.random.default_rng(1)) if r["family"] != OPTIMIZER_FAMILY]  # fmt: skip
    routes = fit_training_units(_frame(tmp_path, fp32 + slow))
    target = local_target_key()
    assert set(routes) == {(target, "appopt-runtime", "fp32"), (target, "appopt-runtime", "fp16")}
    units = [Unit("gemm", {"m": 1, "k": 700, "n": 300, "act": 0, "init_w": 1})]
    low, full = routes[(target, "appopt-runtime", "fp16")], routes[(target, "appopt-runtime", "fp32")]
    assert low.parts(units, 8, 1e5)[0] == pytest.approx(3 * full.parts(units, 8, 1e5)[0], rel=0.3)
    assert low.optimizer == full.optimizer
    assert training_route(routes, target, "appopt-runtime", "bf16") is full
    assert training_route(routes, target, "pytorch", "fp32") is None


def test_every_row_is_priced_with_its_activations_traffic_and_mixed_precision_with_its_casts_too():
    """The training-unit features: the passes summed, the optimiser, nodes, the step constant, on a mixed-precision
    row the activations' traffic and its products' operands for its casts, and on every row the activations' traffic
    (kept for the backward)."""
    flops_x = np.array([[1.0, 2.0, 3.0, 0.25, 5.0, 6.0]] * 2)
    parts = np.array([[0.5, 1.0, 0.125, 0.0, 1e-5, 0.75], [0.5, 1.0, 0.125, 1.0, 2e-5, 0.75]])
    x = train_unit_matrix(flops_x, parts)
    assert x.shape == (2, len(TRAIN_UNIT_FEATURES))
    assert x[0].tolist() == [1.5, 0.125, 6.0, STEP_CONSTANT_S, 0.0, 0.25, 1e-5, 0.0]
    assert x[1].tolist() == [1.5, 0.125, 6.0, STEP_CONSTANT_S, 0.25, 0.25, 2e-5, 0.75]
    assert mixed_precision("fp16") == mixed_precision("bf16") == 1.0
    assert mixed_precision("fp32") == mixed_precision(None) == 0.0


def _sweep_rows(rng: np.random.Generator) -> list[dict]:
    """Sweep rows of matrix products whose parts take ``_forward`` / ``_backward`` seconds, and optimiser rows."""
    common = dict(
        source="measured", target=local_target_key(), backend="appopt-runtime", framework="appopt-runtime",
        compiler="none", layout="NCHW", precision="fp32", threads=1, mode="training", batch=1, scenario="kernel",
        metric="ms", unit="ms", peak_gflops=50.0, bandwidth_gbs=10.0, other_cpu=0.0,
    )  # fmt: skip
    rows = []
    for i in range(60):
        m, k, n = int(rng.integers(1, 64)), int(2 ** rng.uniform(6, 12)), int(2 ** rng.uniform(6, 12))
        unit = Unit("gemm", {"m": m, "k": k, "n": n, "act": 0, "init_w": 1})
        for family, seconds in ((TRAIN_FORWARD_FAMILY, _forward(unit)), (BACKWARD_FAMILY, _backward(unit))):
            rows.append(make_row(**common, model=f"u{i}", family=family, units=encode_units([unit]),
                                 value=seconds * 1e3, median_ms=seconds * 1e3))  # fmt: skip
    for tensors, elements in ((1, 1 << 20), (8, 1 << 16), (64, 256), (16, 1 << 18)):
        seconds = OPTIMIZER.seconds(tensors, tensors * elements)
        settings = json.dumps({"tensors": tensors, "elements": elements})
        rows.append(make_row(**common, model=f"sgd{tensors}", family=OPTIMIZER_FAMILY, settings=settings,
                             value=seconds * 1e3, median_ms=seconds * 1e3))  # fmt: skip
    return rows


def test_training_units_are_learned_from_sweep_rows_and_price_other_shapes(tmp_path):
    """Each part's kinds are learned per target and framework from its sweep rows; a shape not swept is priced
    within the regressor's error, a kind not swept is not priced (NaN), and the optimiser's costs are recovered."""
    frame = _frame(tmp_path, _sweep_rows(np.random.default_rng(0)))
    (key, route), = fit_training_units(frame).items()  # fmt: skip
    assert key == (local_target_key(), "appopt-runtime", "fp32")
    assert _costs(route.optimizer) == pytest.approx(_costs(OPTIMIZER), rel=1e-3)
    units = [Unit("gemm", {"m": 1, "k": 700, "n": 300, "act": 0, "init_w": 1}, count=2)]
    forward, backward, optimizer = route.parts(units, 8, 210_000)
    truth = units[0].at_batch(8)
    assert forward == pytest.approx(2 * _forward(truth), rel=0.3)
    assert backward == pytest.approx(2 * _backward(truth), rel=0.3)
    assert optimizer == pytest.approx(OPTIMIZER.seconds(4, 210_000), rel=1e-3)
    assert math.isnan(route.parts([Unit("pool", dict.fromkeys(("n", "c", "h", "w", "kh", "kw", "stride", "oh",
                                                                "ow", "avg"), 1))], 1, 0.0)[1])  # fmt: skip


def test_the_optimiser_is_not_fitted_from_one_shape(tmp_path):
    rows = [r for r in _sweep_rows(np.random.default_rng(0)) if r["family"] == OPTIMIZER_FAMILY]
    assert fit_optimizer(_frame(tmp_path, rows[:1])) is None
    assert _costs(fit_optimizer(_frame(tmp_path, rows[:2]))) == pytest.approx(_costs(OPTIMIZER), rel=1e-3)


def _costs(cost: OptimizerCost | None) -> tuple[float, float]:
    assert cost is not None
    return cost.tensor_s, cost.element_s


def test_alignment_counts_powers_of_two_of_the_strided_dimensions():
    """Power-of-two widths are what slowed the runtime's weight gradients 4-5x: the regressors see each strided
    dimension's alignment beside the inference features."""
    assert [alignment(n) for n in (1, 3, 8, 520, 2048, 1 << 20)] == [0, 0, 3, 3, 11, 12]
    conv = Unit("conv", {"n": 1, "cin": 512, "cout": 2040, "h": 1, "w": 1, "kh": 1, "kw": 1, "stride": 1,
                         "group": 1, "oh": 1, "ow": 1, "act": 0, "residual": 0, "init_w": 1})  # fmt: skip
    assert training_unit_features(conv) == [*unit_features(conv), 9.0, 3.0]
    eltwise = Unit("eltwise", {"elements": 1024, "inputs": 2, "heavy": 0})
    assert training_unit_features(eltwise) == unit_features(eltwise)


def test_a_trainer_runs_stored_weights():
    computed = Unit("gemm", {"m": 4, "k": 16, "n": 8, "act": 0, "init_w": 0}, count=3)
    assert trained(computed).dims["init_w"] == 1 and trained(computed).count == 3
    stored = trained(computed)
    assert trained(stored) is stored
    assert param_tensors([computed, Unit("pool", dict.fromkeys(("n", "c", "h", "w", "kh", "kw", "stride", "oh",
                                                                "ow", "avg"), 1))]) == 6  # fmt: skip


# --- carried to another CPU --------------------------------------------------------------------------------------


class _SourceUnits:
    """The source's appopt-runtime unit model at one thread: every unit 1 ms, the call 10 us."""

    class _Route:
        call_s = 1e-5

        def unit_seconds(self, units, batch):
            return [1e-3] * len(units)

    def __init__(self) -> None:
        self._key = (local_target_key(), "appopt-runtime", "none", "NCHW", "fp32", 1)

    def keys(self):
        return [self._key]

    def route(self, key):
        return self._Route() if tuple(key) == self._key else None


def test_a_step_priced_by_training_units_is_carried_to_another_cpu_by_its_own_units_its_products_at_gemm_peak(
    tmp_path,
):
    """On another CPU at the source's thread count, our runtime's training step takes the ratio of its own
    calibrated forward units, its products (NumPy's BLAS) at one core's GEMM peak there over here: its gemm units
    are inference's small products, bound by memory, which an AMD EPYC host ran 0.63x the Xeon's while its GEMM
    peak per core was 0.8x. At another thread count the GEMM peak carries the step as before."""
    from perfmodels.calibration import Calibration, KindRatio
    from perfmodels.training_fit import CalibratedHost

    fit = TrainingFit.from_frame(_frame(tmp_path, _rows()), shipped=SHIPPED, training_routes=ROUTES)
    workload, route = _res_b_training(SHIPPED["res_b"])
    key = ("appopt-runtime", "none", "NCHW", "fp32")
    half = {kind: KindRatio(math.log(0.5), 6) for kind in ("gemm", "conv", "noop")}
    calibration = Calibration("here-1c", local_target_key(), 18, ratios={key: half}, log_ratios={key: [math.log(0.5)]})
    there = fit.predict(workload, route, local_target_key(), 1)
    # the rows' GEMM peak is 50 GFLOP/s at one thread; here 40: products run 1.25x as long
    same = fit.calibrated(workload, route, CalibratedHost(calibration, _SourceUnits(), 40.0, 10.0, 1))  # type: ignore[arg-type]
    assert same is not None and there is not None
    assert "appopt-runtime's forward units (its products at one core's GEMM peak)" in same.basis
    assert same.step_seconds / there.step_seconds == pytest.approx(1.25, rel=0.01)  # every unit a product
    two = fit.calibrated(workload, route, CalibratedHost(calibration, _SourceUnits(), 80.0, 10.0, 2))  # type: ignore[arg-type]
    assert two is not None and "one core's GEMM peak there over here" in two.basis
