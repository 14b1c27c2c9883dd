"""One-off seconds a compiled route pays before its job runs, as measured: the model's compile.

Benchmark rows of compiling backends keep each session's compile time in their settings (``compile_ms``: OpenVINO's
compile_model, TVM's and IREE's compile, torch.compile's first call). Compile time grows with the graph, so each
measured (target, framework, compiler) keeps the median over its models of seconds per graph node; a workload's
compile time is that rate times its node count. Time-to-solution and throughput plans add it (with a tuning search,
when the route has one) to the whole job (``Prediction.with_setup``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from perfmodels.features import Workload

if TYPE_CHECKING:
    import pandas as pd

#: (target, framework, compiler)
SetupKey = tuple[str, str, str]


@dataclass(frozen=True)
class CompileRates:
    """Measured compile seconds per graph node, per (target, framework, compiler), with the models behind each."""

    per_node: dict[SetupKey, float] = field(default_factory=dict)
    models: dict[SetupKey, int] = field(default_factory=dict)

    def seconds(self, target: str, framework: str, compiler: str, workload: Workload) -> float | None:
        """The workload's compile seconds on the route, or None where it was never measured (or has no graph)."""
        rate = self.per_node.get((target, framework, compiler))
        nodes = sum(workload.ops_by_class.values())
        return None if rate is None or nodes <= 0 else rate * nodes


def _compile_ms(settings: object) -> float | None:
    try:
        value = json.loads(str(settings)).get("compile_ms")
    except (ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _nodes(ops_by_class: object) -> int:
    try:
        counts = json.loads(str(ops_by_class))
    except ValueError:
        return 0
    return int(sum(v for v in counts.values() if isinstance(v, (int, float)))) if isinstance(counts, dict) else 0


def compile_rates(frame: pd.DataFrame | None) -> CompileRates:
    """The compile-time rates of the measured inference rows of ``frame`` that kept a compile time."""
    if frame is None or "settings" not in frame or "ops_by_class" not in frame:
        return CompileRates()
    rows = frame[(frame["mode"] == "inference") & frame["settings"].astype(str).str.contains("compile_ms")]
    per_model: dict[SetupKey, dict[str, list[float]]] = {}
    for target, framework, compiler, model, settings, ops in zip(
        rows["target"], rows["framework"], rows["compiler"], rows["model"], rows["settings"], rows["ops_by_class"],
        strict=True,
    ):
        compile_ms, nodes = _compile_ms(settings), _nodes(ops)
        if compile_ms is None or nodes <= 0:
            continue
        key = (str(target), str(framework), str(compiler) or "none")
        per_model.setdefault(key, {}).setdefault(str(model), []).append(compile_ms / 1e3 / nodes)
    per_node = {
        key: statistics.median(statistics.median(values) for values in models.values())
        for key, models in per_model.items()
    }
    return CompileRates(per_node, {key: len(models) for key, models in per_model.items()})
