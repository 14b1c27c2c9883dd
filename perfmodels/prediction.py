"""What a performance model returns, and the interface every model implements."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from perfmodels.features import Device, Route, Workload


@dataclass(frozen=True)
class Prediction:
    """Predicted cost of one step (one batch) and of the whole job."""

    step_seconds: float
    samples_per_second: float
    #: Whole-job time (None without a data size in the spec).
    total_seconds: float | None
    bound: Literal["compute", "memory"]
    #: Which model produced it: "roofline-prior" or "fitted:<name>".
    basis: str
    detail: dict[str, float] = field(default_factory=dict)

    def with_setup(self, seconds: float, samples: float | None = None) -> Prediction:
        """The same prediction with a one-off setup (a model's compile, a compiler's tuning search) added to the
        whole-job time. Over a job of ``samples`` samples the throughput is amortised too (samples over the whole-job
        seconds), so a throughput plan pays the setup as a time-to-solution plan does; the steady-state rate stays in
        ``detail["steady_samples_per_second"]``."""
        if seconds <= 0:
            return self
        detail = {**self.detail, "setup_s": seconds}
        total = None if self.total_seconds is None else self.total_seconds + seconds
        rate = self.samples_per_second
        if samples and total:
            detail["steady_samples_per_second"] = rate
            rate = samples / total
        return replace(self, total_seconds=total, samples_per_second=rate, detail=detail)


class PerformanceModel(Protocol):
    """Anything that predicts a route's cost on a device for a workload."""

    name: str

    def predict(self, workload: Workload, route: Route, device: Device) -> Prediction: ...
