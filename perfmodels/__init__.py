"""Performance models: features, the analytic prior, and (fitted from benchmarks) corrections."""

from __future__ import annotations

from perfmodels.features import BYTES_PER_ELEMENT, Device, Route, Workload
from perfmodels.prediction import PerformanceModel, Prediction
from perfmodels.roofline import RooflinePrior

__all__ = ["BYTES_PER_ELEMENT", "Device", "PerformanceModel", "Prediction", "RooflinePrior", "Route", "Workload"]
