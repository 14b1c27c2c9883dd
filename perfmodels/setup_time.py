"""One-off seconds a compiled route pays before its job runs, as measured: the model's compile, and a tuned
compiler's search.

Benchmark rows of compiling backends keep each session's compile time in their settings (``compile_ms``: OpenVINO's
compile_model, TVM's and IREE's compile, torch.compile's first call); a tuned compiler's rows (``tvm-tuned``) also
keep the search's seconds (``tune_s``, with its ``tuning_trials``), which is that route's setup too: a row's setup is
its compile plus its search. Both grow with the graph (a search has a task per fused function), so each measured
(target, framework, compiler) keeps the median over its models of setup seconds per graph node; a workload's setup
is that rate times its node count. A tuned compiler also keeps the search's share of that rate and its median trial
budget, so a plan that searches with another budget (``optimisation.tuning_trials``) scales the search
(``CompileRates.search``; its length grows with the trials, each one a candidate built and timed).
Time-to-solution and throughput plans add it to the whole job (``Prediction.with_setup``), where it replaces the
catalog's prior search (``optimiser.planner.with_setup``).
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
    #: Of a tuned compiler: the search's seconds per graph node (within ``per_node``) and its median trial budget.
    search_per_node: dict[SetupKey, float] = field(default_factory=dict)
    trials: dict[SetupKey, float] = field(default_factory=dict)

    def seconds(self, target: str, framework: str, compiler: str, workload: Workload) -> float | None:
        """The workload's setup seconds on the route (compile, plus the search of a tuned compiler), or None where
        it was never measured (or has no graph)."""
        rate = self.per_node.get((target, framework, compiler))
        nodes = sum(workload.ops_by_class.values())
        return None if rate is None or nodes <= 0 else rate * nodes

    def search(self, target: str, framework: str, compiler: str, workload: Workload) -> tuple[float, float] | None:
        """(seconds, trials) of the workload's search on a tuned route as measured (part of ``seconds``), or None
        where no search was measured."""
        rate, trials = self.search_per_node.get((target, framework, compiler)), self.trials.get((target, framework,
                                                                                                  compiler))
        nodes = sum(workload.ops_by_class.values())
        return None if rate is None or trials is None or nodes <= 0 else (rate * nodes, trials)


def _positive(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def _setup_parts(settings: object) -> tuple[float, float, float | None] | None:
    """A row's (setup seconds, search seconds, search trials): its ``compile_ms`` plus its search's ``tune_s``
    (None without a compile time; search 0 and trials None for a route that does not search)."""
    try:
        figures = json.loads(str(settings))
        compile_ms, tune_s, trials = figures.get("compile_ms"), figures.get("tune_s"), figures.get("tuning_trials")
    except (ValueError, AttributeError):
        return None
    compile_s = _positive(compile_ms)
    if compile_s is None:
        return None
    search = _positive(tune_s) or 0.0
    return compile_s / 1e3 + search, search, _positive(trials) if search else None


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
    search_per_model: dict[SetupKey, dict[str, list[float]]] = {}
    trials: dict[SetupKey, list[float]] = {}
    for target, framework, compiler, model, settings, ops in zip(
        rows["target"], rows["framework"], rows["compiler"], rows["model"], rows["settings"], rows["ops_by_class"],
        strict=True,
    ):
        parts, nodes = _setup_parts(settings), _nodes(ops)
        if parts is None or nodes <= 0:
            continue
        key = (str(target), str(framework), str(compiler) or "none")
        per_model.setdefault(key, {}).setdefault(str(model), []).append(parts[0] / nodes)
        if parts[2] is not None:
            search_per_model.setdefault(key, {}).setdefault(str(model), []).append(parts[1] / nodes)
            trials.setdefault(key, []).append(parts[2])
    return CompileRates(
        _median_of_models(per_model),
        {key: len(models) for key, models in per_model.items()},
        _median_of_models(search_per_model),
        {key: statistics.median(values) for key, values in trials.items()},
    )


def _median_of_models(per_model: dict[SetupKey, dict[str, list[float]]]) -> dict[SetupKey, float]:
    """Per key, the median over its models of each model's median."""
    return {
        key: statistics.median(statistics.median(values) for values in models.values())
        for key, models in per_model.items()
    }
