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
