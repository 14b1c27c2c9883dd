"""What a performance model returns, and the interface every model implements."""

from __future__ import annotations

import math
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

    @classmethod
    def for_step(
        cls,
        workload: Workload,
        step: float,
        bound: Literal["compute", "memory"],
        basis: str,
        detail: dict[str, float] | None = None,
    ) -> Prediction:
        """One step of ``workload``'s batch taking ``step`` seconds: the throughput it gives, and the whole job's
        time when the workload says how many samples the job runs."""
        steps = None if workload.total_samples is None else workload.total_samples / workload.batch_size
        return cls(
            step_seconds=step,
            samples_per_second=workload.batch_size / step,
            total_seconds=None if steps is None else steps * step,
            bound=bound,
            basis=basis,
            detail=detail or {},
        )

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

    def scaled(self, factor: float, basis: str, detail: dict[str, float]) -> Prediction:
        """The same prediction with every time ``factor`` times as long, its basis and detail replaced."""
        return replace(
            self,
            step_seconds=self.step_seconds * factor,
            samples_per_second=self.samples_per_second / factor,
            total_seconds=None if self.total_seconds is None else self.total_seconds * factor,
            basis=basis,
            detail=detail,
        )

    @property
    def band(self) -> tuple[float, float] | None:
        """(p10, p90) of the step over the step (None without an interval)."""
        low, high = self.detail.get("p10_step_s"), self.detail.get("p90_step_s")
        return None if low is None or high is None else (low / self.step_seconds, high / self.step_seconds)


def widened(step_s: float, bands: list[tuple[float, float]]) -> tuple[float, float]:
    """(p10, p90) of ``step_s`` from independent errors' (p10, p90) bands over a step: their log distances from 1
    added in quadrature, per side."""
    below = math.sqrt(sum(min(math.log(low), 0.0) ** 2 for low, _ in bands))
    above = math.sqrt(sum(max(math.log(high), 0.0) ** 2 for _, high in bands))
    return step_s * math.exp(-below), step_s * math.exp(above)


class PerformanceModel(Protocol):
    """Anything that predicts a route's cost on a device for a workload."""

    name: str

    def predict(self, workload: Workload, route: Route, device: Device) -> Prediction: ...
