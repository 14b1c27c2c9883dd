"""Result-database rows for tests: one valid measured row, changed only where a test cares."""

from __future__ import annotations

from typing import Any

from perfmodels.results_db import make_row


def measured_row(**fields: Any) -> dict[str, Any]:
    """A valid measured row (the MLP's SingleStream p90 latency on onnxruntime, target ``t-2c``) with ``fields``
    replacing or adding columns."""
    defaults: dict[str, Any] = {
        "source": "measured",
        "target": "t-2c",
        "backend": "onnxruntime",
        "model": "mlp",
        "scenario": "SingleStream",
        "metric": "p90_latency_ms",
        "value": 1.0,
    }
    return make_row(**{**defaults, **fields})


def fit_row(model: str, **fields: Any) -> dict[str, Any]:
    """A measured row a fit can use: ``model`` of family ``f`` on route ``fast`` (backend ``b``), 1 GFLOP of
    convolution a sample, 10 ms on a 100 GFLOP/s, 10 GB/s host of 2 cores; ``fields`` replace or add columns."""
    defaults: dict[str, Any] = {
        "target": "cpu-test-2c",
        "backend": "b",
        "framework": "fast",
        "precision": "fp32",
        "threads": 1,
        "cores": 2,
        "mode": "inference",
        "family": "f",
        "batch": 1,
        "flops_per_sample": 1e9,
        "flops_by_class": {"conv": 1e9},
        "activation_bytes_per_sample": 1e6,
        "params": 1e6,
        "value": 10.0,
        "median_ms": 10.0,
        "peak_gflops": 100.0,
        "bandwidth_gbs": 10.0,
    }
    return measured_row(**{**defaults, "model": model, **fields})
