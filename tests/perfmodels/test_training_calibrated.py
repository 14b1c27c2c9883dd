"""A training fit carried to a calibrated host the training rows never saw (``TrainingFit.calibrated``): each fitted
model as its features say, and the roofline transfer where the calibration cannot carry it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from analysis.units import Unit
from perfmodels.calibration import Calibration, KindRatio
from perfmodels.features import Device, Route, Workload
from perfmodels.fitted import fit_model
from perfmodels.results_db import read_results, write_rows
from perfmodels.roofline import RooflinePrior
from perfmodels.targets import local_target_key
from perfmodels.training_fit import CalibratedHost, calibration_factor, training_prediction
from tests.perfmodels.test_training_transfer import _training_db

GEMM = Unit("gemm", {"m": 64, "k": 256, "n": 256, "act": 0, "init_w": 1})
SMALL = Unit("gemm", {"m": 8, "k": 64, "n": 64, "act": 0, "init_w": 1})
ORT = ("onnxruntime", "none", "NCHW", "fp32")
OPENVINO = ("openvino", "none", "NCHW", "fp32")
TORCH = Route("pytorch", "none", (), "fp32", "NCHW", 0.65)
SOURCE = "src-2c"


@dataclass
class _Route:
    """A source unit model: every unit 1 ms, the call 10 us."""

    call_s: float = 1e-5

    def unit_seconds(self, units: list[Unit], batch: int) -> list[float]:
        return [1e-3] * len(units)


class _Units:
    """Unit models of the source on the routes named (the part of ``UnitFit`` the factor reads)."""

    def __init__(self, *routes: tuple[str, str, str, str]) -> None:
        self._keys = [(SOURCE, *r, 2) for r in routes]

    def keys(self) -> list[tuple[object, ...]]:
        return list(self._keys)

    def route(self, key: tuple[object, ...]) -> _Route | None:
        return _Route() if key in self._keys else None


def _calibration(ratios: dict[tuple[str, str, str, str], float]) -> Calibration:
    """Every kind (and the call) of each route ``ratio`` times the source's time here."""
    return Calibration(
        host="here-2c",
        source=SOURCE,
        units=12,
        ratios={r: {k: KindRatio(math.log(v), 6) for k in ("gemm", "conv", "noop")} for r, v in ratios.items()},
        log_ratios={r: [math.log(v)] * 6 for r, v in ratios.items()},
    )


def _workload(units: tuple[Unit, ...] = (GEMM, SMALL)) -> Workload:
    return Workload(4e8, 1e7, 2e6, "training", 8, units=units)


def test_a_host_twice_as_fast_per_unit_prices_the_forward_units_at_half() -> None:
    factor, how = calibration_factor(_calibration({ORT: 0.5}), _Units(ORT), _workload(), TORCH, 2)
    assert factor == pytest.approx(0.5)
    assert how == "its forward units on 1 calibrated engines"  # PyTorch is not calibrated: the engines that are


def test_an_uncalibrated_framework_takes_the_geometric_mean_of_the_calibrated_engines() -> None:
    calibration = _calibration({ORT: 0.5, OPENVINO: 2.0})
    factor, _ = calibration_factor(calibration, _Units(ORT, OPENVINO), _workload(), TORCH, 2)
    assert factor == pytest.approx(1.0)
    own = Route("openvino", "none", (), "fp32", "NCHW", 0.5)
    factor, how = calibration_factor(calibration, _Units(ORT, OPENVINO), _workload(), own, 2)
    assert factor == pytest.approx(2.0) and how == "openvino's forward units"


def test_no_factor_where_the_source_timed_none_of_the_calibrated_routes() -> None:
    assert calibration_factor(_calibration({ORT: 0.5}), _Units(OPENVINO), _workload(), TORCH, 2) is None


def _host(peak: float, bandwidth: float, threads: int = 2) -> CalibratedHost:
    source = local_target_key()
    calibration = Calibration(host="here-2c", source=source, units=12)
    return CalibratedHost(calibration, _Units(), peak, bandwidth, threads)  # type: ignore[arg-type]


def _predict(model, workload: Workload, route: Route, host: CalibratedHost | None):
    prior = RooflinePrior()
    device = Device("unseen-host", "cpu", {"fp32": host.peak_gflops * 1e9 if host else 95e9}, 14e9)
    return training_prediction(
        model.training(), workload, route, device, prior.predict(workload, route, device),
        lambda _target: 2, lambda measured: prior.predict(workload, route, measured), lambda: host,
    )  # fmt: skip


def test_a_host_twice_as_fast_gets_steps_about_half_as_long(tmp_path: Path) -> None:
    """The FLOP model's coefficients at a host's probes: twice the GEMM peak and bandwidth of the host that measured
    at 2 threads (95 GFLOP/s, 14 GB/s) halve a compute- and traffic-bound step (all but its per-node term)."""
    model = fit_model(read_results(_training_db(tmp_path / "t.csv")), source="t.csv")
    workload = Workload(4e9, 1e8, 2.5e7, "training", 64, ops_by_class={"gemm": 160})
    same = _predict(model, workload, TORCH, _host(95.0, 14.0))
    fast = _predict(model, workload, TORCH, _host(190.0, 28.0))
    assert same.basis.startswith(f"transferred-training:{local_target_key()} via calibration (torch fp32 flops model")
    assert same.step_seconds == pytest.approx(model.predict(workload, TORCH, Device(
        local_target_key(), "cpu", {"fp32": 95e9}, 14e9)).step_seconds, rel=1e-6)  # fmt: skip
    assert fast.step_seconds / same.step_seconds == pytest.approx(0.5, rel=0.02)
    assert fast.detail["calibration_factor"] == pytest.approx(fast.step_seconds / fast.detail["source_step_s"])


def test_without_a_calibration_the_roofline_transfer_carries_it(tmp_path: Path) -> None:
    model = fit_model(read_results(_training_db(tmp_path / "t.csv")), source="t.csv")
    workload = Workload(4e9, 1e8, 2.5e7, "training", 64, ops_by_class={"gemm": 160})
    moved = _predict(model, workload, TORCH, None)
    assert moved.basis.startswith(f"transferred-training:{local_target_key()} -> unseen-host")
    assert "transfer_factor" in moved.detail


def test_a_calibration_of_another_source_host_is_not_used(tmp_path: Path) -> None:
    """The fit was measured on this host; a calibration against another source cannot carry it (the roofline
    transfer does)."""
    model = fit_model(read_results(_training_db(tmp_path / "t.csv")), source="t.csv")
    workload = Workload(4e9, 1e8, 2.5e7, "training", 64, ops_by_class={"gemm": 160})
    host = _host(190.0, 28.0)
    other = CalibratedHost(Calibration("here-2c", "elsewhere-8c", 12), host.units, 190.0, 28.0, 2)
    assert " -> unseen-host" in _predict(model, workload, TORCH, other).basis


def test_a_calibrated_local_host_carries_the_fit_by_its_stores_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's wiring: on a ``local`` host the database never measured, with a calibration store, the training
    step comes from ``TrainingFit.calibrated`` at the GEMM peak and bandwidth the store's rows recorded."""
    import perfmodels.fitted as fitted
    from perfmodels.results_db import to_frame
    from tests.analysis.test_units import sweep_row

    monkeypatch.setattr(fitted, "usable_cores", lambda: 2)
    frame = read_results(_training_db(tmp_path / "t.csv"))
    frame["target"] = "elsewhere-2c"  # measured on another host
    store = tmp_path / "store.csv"
    write_rows(store, [{**sweep_row(GEMM, 1e-4, "onnxruntime"), "threads": 2, "peak_gflops": 190.0,
                        "bandwidth_gbs": 28.0}])  # fmt: skip
    model = fit_model(to_frame(frame.to_dict("records")), source="t.csv", store=store)
    monkeypatch.setattr(model, "calibration", lambda source=None: Calibration("here-2c", "elsewhere-2c", 12))
    monkeypatch.setattr(model, "units", lambda: _Units())
    workload = Workload(4e9, 1e8, 2.5e7, "training", 64, ops_by_class={"gemm": 160})
    local = Device("local", "cpu", {"fp32": 1e12}, 5e10)
    carried = model.predict(workload, TORCH, local)
    assert carried.basis.startswith("transferred-training:elsewhere-2c via calibration (torch fp32 flops model")
    there = model.predict(workload, TORCH, Device("elsewhere-2c", "cpu", {"fp32": 95e9}, 14e9))
    assert carried.step_seconds / there.step_seconds == pytest.approx(0.5, rel=0.02)  # twice the peak and bandwidth


def test_the_stores_probes_are_their_best_readings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe read while the machine was interfered with (a vCPU stolen: half the two-thread GEMM peak) on most of a
    store's rows does not set the host's figures: its best readings do."""
    import perfmodels.fitted as fitted
    from tests.analysis.test_units import sweep_row

    monkeypatch.setattr(fitted, "usable_cores", lambda: 2)
    store = tmp_path / "store.csv"
    units = [Unit("gemm", {"m": 1, "k": 64 * (i + 1), "n": 64, "act": 0, "init_w": 1}) for i in range(6)]
    probes = [(95.0, 21.0)] * 5 + [(190.0, 28.0)]  # the calibration's probe on five rows, an anchor's on one
    write_rows(store, [{**sweep_row(u, 1e-4, "onnxruntime"), "threads": 2, "peak_gflops": peak, "bandwidth_gbs": gbs}
                       for u, (peak, gbs) in zip(units, probes, strict=True)])  # fmt: skip
    assert fitted._store_probes(store) == (190.0, 28.0, 2)


def test_a_local_host_of_the_measured_key_calibrated_against_its_rows_is_carried_by_its_probes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One CPU model name (one key) can run at other speeds from one machine to the next: a local host of the
    measured key with a calibration against that key's rows is carried by its store's probes, not fitted as if it
    were the machine that recorded them; without a calibration, or with the quick probe's only, it is fitted."""
    import perfmodels.fitted as fitted
    from tests.analysis.test_units import sweep_row

    monkeypatch.setattr(fitted, "usable_cores", lambda: 2)
    store = tmp_path / "store.csv"
    write_rows(store, [{**sweep_row(GEMM, 1e-4, "onnxruntime"), "threads": 2, "peak_gflops": 190.0,
                        "bandwidth_gbs": 28.0}])  # fmt: skip
    frame = read_results(_training_db(tmp_path / "t.csv"))
    workload = Workload(4e9, 1e8, 2.5e7, "training", 64, ops_by_class={"gemm": 160})
    local = Device("local", "cpu", {"fp32": 1e12}, 5e10)
    plain = fit_model(frame, source="t.csv").predict(workload, TORCH, local)
    assert plain.basis.startswith(f"fitted-training:{local_target_key()} (torch fp32")
    model = fit_model(frame, source="t.csv", store=store)
    monkeypatch.setattr(model, "calibration", lambda source=None: Calibration("here-2c", local_target_key(), 12))
    monkeypatch.setattr(model, "units", lambda: _Units())
    carried = model.predict(workload, TORCH, local)
    assert carried.basis.startswith(f"transferred-training:{local_target_key()} via calibration (torch fp32")
    assert carried.step_seconds / plain.step_seconds == pytest.approx(0.5, rel=0.02)  # twice the peak and bandwidth
    quick = Calibration("here-2c", local_target_key(), 12, via="quick probe")
    monkeypatch.setattr(model, "calibration", lambda source=None: quick)
    assert model.predict(workload, TORCH, local).step_seconds == plain.step_seconds


def test_a_framework_calibrated_itself_carries_its_training_products_at_the_gemm_peaks_ratio() -> None:
    """``own_units_factor``: a framework whose products run on NumPy's BLAS (our runtime) takes its gemm units at
    one core's GEMM peak there over here, every other kind at its calibrated ratio; a framework the calibration did
    not measure gets none (the caller keeps its GEMM peak carry)."""
    from perfmodels.training_fit import own_units_factor

    ours = ("appopt-runtime", "none", "NCHW", "fp32")
    route = Route("appopt-runtime", "none", ("numpy",), "fp32", "NCHW", 0.5)
    conv = Unit("conv", {"n": 1, "cin": 16, "cout": 16, "h": 8, "w": 8, "kh": 3, "kw": 3, "stride": 1, "group": 1,
                         "oh": 8, "ow": 8, "act": 0, "residual": 0, "init_w": 1})  # fmt: skip
    calibration = _calibration({ours: 0.5})
    factor, how = own_units_factor(calibration, _Units(ours), _workload((GEMM, conv)), route, 2, 2.0)
    # the call (10 us at 0.5), the product (1 ms at 2.0), the convolution (1 ms at 0.5), weighted by their times
    assert factor == pytest.approx((1e-5 * 0.5 + 1e-3 * 2.0 + 1e-3 * 0.5) / (1e-5 + 2e-3))
    assert how == "appopt-runtime's forward units"
    ort = Route("onnxruntime", "none", ("mlas",), "fp32", "NCHW", 0.5)
    assert own_units_factor(_calibration({ORT: 0.5}), _Units(ORT), _workload(), ort, 2, 2.0)[0] == pytest.approx(0.5)
    assert own_units_factor(_calibration({ORT: 0.5}), _Units(ORT), _workload(), TORCH, 2, 2.0) is None


def test_a_step_on_its_own_threading_is_carried_by_units_at_the_sources_thread_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """TensorFlow's eager steps thread as their own rows say: across thread counts one core's GEMM peak and their
    own exponent carry them; at the source's thread count the calibrated units do, as for any framework (on an AMD
    EPYC host one core's GEMM peak, 1.27x the Xeon's time, carried them at 163.5% RMSPE; their steps ran
    0.35-0.7x)."""
    from types import SimpleNamespace

    from perfmodels.prediction import Prediction
    from perfmodels.training_fit import TrainingFit

    tf = Route("tensorflow", "none", ("eigen",), "fp32", "NCHW", 0.5)
    group = SimpleNamespace(
        targets={SOURCE}, features="units", thread_exponent=0.1, backend="keras", precision="fp32", rows=40,
        train_rmspe=0.1, compiler="none", layout="", under_load=False,
    )  # fmt: skip
    fit = TrainingFit(peaks={(SOURCE, 2): (100.0, 20.0)})
    monkeypatch.setattr(fit, "group_for", lambda route: group)
    monkeypatch.setattr(fit, "_unit_priced_group", lambda *a: group)
    workload = _workload()
    there = Prediction.for_step(workload, 0.1, "compute", "fitted-training:src-2c", {"threads": 2.0})
    monkeypatch.setattr(fit, "predict", lambda *a: there)
    calibration = _calibration({ORT: 0.5})
    same = fit.calibrated(workload, tf, CalibratedHost(calibration, _Units(ORT), 80.0, 20.0, 2))  # type: ignore[arg-type]
    assert same is not None and same.step_seconds == pytest.approx(0.05)  # the engines' units: 0.5x
    assert "its forward units on 1 calibrated engines" in same.basis
    other = fit.calibrated(workload, tf, CalibratedHost(calibration, _Units(ORT), 40.0, 20.0, 1))  # type: ignore[arg-type]
    assert other is not None and "one core's GEMM peak there over here and its own threading" in other.basis
