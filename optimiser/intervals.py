"""Where the p10-p90 intervals of ranked routes overlap: the model cannot say which is faster.

Each prediction's interval (``Prediction.detail``'s ``p10_step_s`` and ``p90_step_s``) comes from the held-out
residuals of its basis (``perfmodels.fitted.HeldOutFigures``, ``perfmodels.calibration.Calibration.interval``).
How such routes were ordered is ``optimiser.ties``' to explain; this module only says which ones overlap.

Example::

    >>> overlapping_intervals(plan)        # doctest: +SKIP
    ['#1-#2: p10-p90 of 90 µs-160 µs and 120 µs-210 µs overlap: within the model's error (…); …']
"""

from __future__ import annotations

from optimiser.planner import Plan
from optimiser.ties import why_ordered
from perfmodels.prediction import Prediction


def interval(p: Prediction) -> tuple[float, float] | None:
    """(p10, p90) of a prediction's step, seconds (None when its basis has no held-out residuals)."""
    low, high = p.detail.get("p10_step_s"), p.detail.get("p90_step_s")
    return None if low is None or high is None else (float(low), float(high))


def overlapping_intervals(plan: Plan, top: int | None = None) -> list[str]:
    """One line per pair of neighbouring shown candidates whose intervals overlap."""
    from optimiser.report import format_seconds

    shown = plan.candidates[: min(top or plan.spec.optimisation.top, len(plan.candidates))]
    lines = []
    for k in range(len(shown) - 1):
        a, b = interval(shown[k].prediction), interval(shown[k + 1].prediction)
        if a is None or b is None or a[1] < b[0] or b[1] < a[0]:
            continue
        lines.append(
            f"#{k + 1}-#{k + 2}: p10-p90 of {format_seconds(a[0])}-{format_seconds(a[1])} and "
            f"{format_seconds(b[0])}-{format_seconds(b[1])} overlap: within the model's error (held-out residuals of "
            f"{shown[k].prediction.basis}), so their order is not certain; ordered {why_ordered(plan, k)}; "
            "measure both (appopt bench run) to be sure"
        )
    return lines
