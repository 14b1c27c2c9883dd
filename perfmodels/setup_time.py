"""One-off seconds a compiled route pays before its job runs, as measured: the model's compile, and a tuned
compiler's search.

Benchmark rows of compiling backends keep each session's compile time in their settings (``compile_ms``: OpenVINO's
compile_model, TVM's and IREE's compile, torch.compile's first call); a tuned compiler's rows (``tvm-tuned``) also
keep the search's seconds (``tune_s``, with its ``tuning_trials``), which is that route's setup too: a row's setup is
its compile plus its search. Both grow with the graph (a search has a task per fused function), so each measured
(target, framework, compiler) keeps the median over its models of setup seconds per graph node; a workload's setup
is that rate times its node count. Time-to-solution and throughput plans add it to the whole job
(``Prediction.with_setup``), where it replaces the catalog's prior search (``optimiser.planner.with_setup``).
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
    """Measured setup seconds (compile plus any search) per graph node, per (target, framework, compiler), with the
    models behind each."""

    per_node: dict[SetupKey, float] = field(default_factory=dict)
    models: dict[SetupKey, int] = field(default_factory=dict)

    def seconds(self, target: str, framework: str, compiler: str, workload: Workload) -> float | None:
        """The workload's setup seconds on the route (compile, plus the search of a tuned compiler), or None where
        it was never measured (or has no graph)."""
        rate = self.per_node.get((target, framework, compiler))
        nodes = sum(workload.ops_by_class.values())
        return None if rate is None or nodes <= 0 else rate * nodes


def _setup_s(settings: object) -> float | None:
    """A row's setup seconds: its ``compile_ms`` plus its search's ``tune_s`` (None without a compile time)."""
    try:
        figures = json.loads(str(settings))
        compile_ms, tune_s = figures.get("compile_ms"), figures.get("tune_s", 0.0)
    except (ValueError, AttributeError):
        return None
    if not isinstance(compile_ms, (int, float)) or compile_ms <= 0:
        return None
    return compile_ms / 1e3 + (float(tune_s) if isinstance(tune_s, (int, float)) and tune_s > 0 else 0.0)


def _nodes(ops_by_class: object) -> int:
    try:
        counts = json.loads(str(ops_by_class))
    except ValueError:
        return 0
    return int(sum(v for v in counts.values() if isinstance(v, (int, float)))) if isinstance(counts, dict) else 0


def compile_rates(frame: pd.DataFrame | None) -> CompileRates:
    """The setup-time rates of the measured inference rows of ``frame`` that kept a compile time."""
    if frame is None or "settings" not in frame or "ops_by_class" not in frame:
        return CompileRates()
    rows = frame[(frame["mode"] == "inference") & frame["settings"].astype(str).str.contains("compile_ms")]
    per_model: dict[SetupKey, dict[str, list[float]]] = {}
    for target, framework, compiler, model, settings, ops in zip(
        rows["target"], rows["framework"], rows["compiler"], rows["model"], rows["settings"], rows["ops_by_class"],
        strict=True,
    ):
        setup_s, nodes = _setup_s(settings), _nodes(ops)
        if setup_s is None or nodes <= 0:
            continue
        key = (str(target), str(framework), str(compiler) or "none")
        per_model.setdefault(key, {}).setdefault(str(model), []).append(setup_s / nodes)
    per_node = {
        key: statistics.median(statistics.median(values) for values in models.values())
        for key, models in per_model.items()
    }
    return CompileRates(per_node, {key: len(models) for key, models in per_model.items()})
