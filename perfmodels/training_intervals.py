"""p10-p90 intervals of CPU training predictions, from the held-out residuals of their basis.

``appopt models evaluate --save`` computes them once and stores them in the evaluation summary next to the database
(``perfmodels.fitted.write_evaluation_summary``); plans read them back and never refit:

* a step fitted on the measuring host (``fitted-training:``) takes the ratios measured / predicted of the
  leave-one-family-out evaluation (``training_fit.leave_one_family_out``) of its route (backend|precision) where that
  route has ``MIN_PREDICTIONS`` held-out predictions, else of its framework, else of every route;
* a step carried to another host takes the ratios of the training transfer proxy
  (``optimiser.training_transfer_proxy``, both directions pooled) of the same carrying: ``roofline``
  (``TrainingFit.transfer``) or ``calibration`` (``TrainingFit.calibrated``). Without them it has no interval: the
  held-out residuals on the measuring host say nothing of the transfer's own error.

Example::

    >>> residuals = TrainingResiduals.from_json(stored)          # doctest: +SKIP
    >>> with_interval(prediction, residuals.fitted("torch", "fp32", "pytorch"))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from perfmodels.prediction import Prediction

if TYPE_CHECKING:
    import pandas as pd

#: Held-out predictions a route (or framework) needs before its residuals stand apart from the wider group's.
MIN_PREDICTIONS = 10
#: How a transferred training step was carried: ``TrainingFit.transfer`` / ``TrainingFit.calibrated``.
TRANSFERS = ("roofline", "calibration")


@dataclass(frozen=True)
class Band:
    """The 10th and 90th percentiles of measured / predicted over ``predictions`` held-out steps, whose they are
    (``of``: "its route", "its framework", "every route", "the transfer proxy"), and their RMSPE (the planner's
    error band, ``optimiser.planner.model_error``)."""

    p10_ratio: float
    p90_ratio: float
    predictions: int
    of: str
    rmspe: float = float("nan")

    @classmethod
    def of_ratios(cls, ratios: Iterable[float], of: str) -> Band | None:
        values = np.array([r for r in ratios if np.isfinite(r) and r > 0], dtype=float)
        if not len(values):
            return None
        p10, p90 = (float(q) for q in np.quantile(values, [0.1, 0.9]))
        rmspe = float(np.sqrt(np.mean((1.0 / values - 1.0) ** 2)))  # (predicted - measured) / measured
        return cls(p10, p90, len(values), of, rmspe)


@dataclass(frozen=True)
class TrainingResiduals:
    """Held-out bands of training steps: ``by_route`` (``backend|precision``), ``by_framework``, ``overall``, and
    ``transfer`` (``TRANSFERS`` → the transfer proxy's band)."""

    by_route: dict[str, Band] = field(default_factory=dict)
    by_framework: dict[str, Band] = field(default_factory=dict)
    overall: Band | None = None
    transfer: dict[str, Band] = field(default_factory=dict)

    @classmethod
    def from_predictions(
        cls, predictions: pd.DataFrame, transfers: Mapping[str, Iterable[tuple[float, float]]] | None = None
    ) -> TrainingResiduals:
        """From a ``TrainingEvaluation.predictions`` frame (backend, framework, precision, measured, predicted
        seconds) and the transfer proxy's (predicted, measured) seconds per ``TRANSFERS`` kind."""
        ratio = (predictions["measured"].astype(float) / predictions["predicted"].astype(float)).to_numpy()
        route = (predictions["backend"].astype(str) + "|" + predictions["precision"].astype(str)).to_numpy()
        framework = predictions["framework"].astype(str).to_numpy()

        def grouped(keys: np.ndarray, of: str) -> dict[str, Band]:
            bands = {str(k): Band.of_ratios(ratio[keys == k], of) for k in sorted(set(keys))}
            return {k: b for k, b in bands.items() if b is not None and b.predictions >= MIN_PREDICTIONS}

        moved = {
            kind: Band.of_ratios((m / p for p, m in pairs if p > 0), f"the transfer proxy ({kind}, both directions)")
            for kind, pairs in (transfers or {}).items()
        }
        return cls(
            grouped(route, "its route"),
            grouped(framework, "its framework"),
            Band.of_ratios(ratio, "every route"),
            {k: b for k, b in moved.items() if b is not None},
        )

    def fitted(self, backend: str, precision: str, framework: str) -> Band | None:
        """The band of a step fitted on the measuring host: its route's, else its framework's, else the overall."""
        return self.by_route.get(f"{backend}|{precision}") or self.by_framework.get(framework) or self.overall

    def as_json(self) -> dict[str, Any]:
        return {
            "by_route": {k: asdict(b) for k, b in self.by_route.items()},
            "by_framework": {k: asdict(b) for k, b in self.by_framework.items()},
            "overall": None if self.overall is None else asdict(self.overall),
            "transfer": {k: asdict(b) for k, b in self.transfer.items()},
        }

    @classmethod
    def from_json(cls, payload: Mapping[str, Any]) -> TrainingResiduals:
        """Read back ``as_json`` (TypeError, KeyError or ValueError for a damaged block)."""
        overall = payload.get("overall")
        return cls(
            {str(k): Band(**b) for k, b in payload["by_route"].items()},
            {str(k): Band(**b) for k, b in payload["by_framework"].items()},
            None if overall is None else Band(**overall),
            {str(k): Band(**b) for k, b in payload.get("transfer", {}).items()},
        )


def with_interval(prediction: Prediction, band: Band | None) -> Prediction:
    """``prediction`` with its step's p10-p90 from ``band`` in its detail, and its basis saying whose residuals
    they are (unchanged without a band)."""
    if band is None:
        return prediction
    step = prediction.step_seconds
    return replace(
        prediction,
        basis=f"{prediction.basis}; p10-p90 from {band.predictions} held-out steps of {band.of}",
        detail={
            **prediction.detail,
            "p10_step_s": step * band.p10_ratio,
            "p90_step_s": step * band.p90_ratio,
            "heldout_p10_ratio": band.p10_ratio,
            "heldout_p90_ratio": band.p90_ratio,
            "heldout_predictions": float(band.predictions),
            **({"heldout_rmspe": band.rmspe} if np.isfinite(band.rmspe) else {}),
        },
    )
