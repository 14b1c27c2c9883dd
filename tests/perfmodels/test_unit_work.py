"""A unit's own time: the call and the profiler's boundary conversions taken off, but never below the roofline."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.units import Unit, roofline_seconds
from perfmodels.unitfit import MIN_WORK_SHARE, fit_unit_route, unit_work

PEAK, BANDWIDTH = 300e9, 10e9


def _conv(cin: int, cout: int, hw: int) -> Unit:
    dims = {"n": 1, "cin": cin, "cout": cout, "h": hw, "w": hw, "kh": 1, "kw": 1, "stride": 1, "group": 1}
    return Unit("conv", {**dims, "oh": hw, "ow": hw, "act": 0, "residual": 0, "init_w": 1})


def test_a_boundary_reported_over_the_whole_run_leaves_the_kernel_its_roofline_time():
    # a profiler's reorder node reported at 98% of a 2-thread run (onnxruntime NCHWc): all of it taken off left
    # the convolution at 15% of its time, 6x faster than the machine's GEMM peak allows
    t, prior = np.array([1.0e-3]), np.array([0.5e-3])
    work = unit_work(t, 10e-6, np.array([0.98e-3]), prior)
    assert work[0] == prior[0]
    assert work[0] > MIN_WORK_SHARE * t[0]


def test_a_plausible_boundary_is_still_taken_off_in_full():
    t, prior = np.array([1.0e-3]), np.array([0.2e-3])
    work = unit_work(t, 10e-6, np.array([0.3e-3]), prior)
    assert np.isclose(work[0], 1.0e-3 - 10e-6 - 0.3e-3)


def test_without_a_boundary_a_unit_may_beat_its_roofline():
    # data that stays in the caches outruns the copy bandwidth the roofline assumes: no floor where nothing was
    # taken off but the call
    t, prior = np.array([40e-6]), np.array([100e-6])
    work = unit_work(t, 10e-6, np.array([0.0]), prior)
    assert np.isclose(work[0], 30e-6)


def test_the_floor_never_exceeds_the_time_less_the_call():
    t, prior = np.array([40e-6]), np.array([100e-6])
    work = unit_work(t, 10e-6, np.array([35e-6]), prior)
    assert np.isclose(work[0], 30e-6)


def test_a_route_whose_boundaries_swallow_its_kernels_is_not_predicted_above_its_peak():
    units = [_conv(c, c2, hw) for c in (64, 128, 256) for c2 in (64, 192) for hw in (14, 28)]
    priors = np.array([roofline_seconds(u, 1, PEAK, BANDWIDTH) for u in units])
    rows = pd.DataFrame(
        {
            "target": "t",
            "framework": "onnxruntime",
            "compiler": "none",
            "layout": "NCHWc",
            "precision": "fp32",
            "threads": 2,
            "unit": units,
            # each kernel ran at half the peak, and its profiler reported 95% of the run as reorders
            "t": 2 * priors,
            "boundary": 0.95 * 2 * priors,
            "peak_flops": PEAK,
            "bandwidth": BANDWIDTH,
        }
    )
    route = fit_unit_route(rows)
    predicted = route.unit_seconds(units, 1)
    assert np.all(predicted >= 0.95 * priors)
