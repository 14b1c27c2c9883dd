"""LoadGen against the home-made harness on one model: the same session, settings and scenarios through both drivers,
alternating (harness, LoadGen, harness, LoadGen, …) so drift in machine load hits both; prints each figure and the
LoadGen/harness ratio of the medians over the rounds.

    python -m benchmarks.loadgen_vs_harness [--model tiny_lenet5] [--backend onnxruntime] [--rounds 3]

Not a test: on a shared machine the figures are noisy (each line also prints other processes' CPU use).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from benchmarks.backends import get_backend
from benchmarks.harness import SCENARIOS, Scenario, ScenarioResult, ScenarioSettings, run_scenario
from benchmarks.loadgen_driver import query_plan, run_loadgen
from benchmarks.models import get_model
from benchmarks.results.provenance import collect, interference
from benchmarks.runner import SAMPLE_SETS, _query_samples, _sut


def compare(model_name: str, backend_name: str, rounds: int, settings: ScenarioSettings) -> Iterator[str]:
    """Lines of figures as they are measured, each scenario ending with its ratio."""
    model = get_model(model_name)
    session = get_backend(backend_name).prepare(model.model(), threads=1)
    yield f"# {model_name} on {backend_name}, 1 thread, batch 1; CPU: {collect().cpu_model}"
    logs = Path(tempfile.mkdtemp(prefix="loadgen-vs-harness-"))
    for scenario in SCENARIOS:
        figures: dict[str, list[float]] = {"harness": [], "loadgen": []}
        metric = ""
        for r in range(rounds):
            for driver in ("harness", "loadgen"):
                result, other = _one(scenario, driver, model, session, settings, logs / f"{scenario}-{r}")
                metric = result.metric
                figures[driver].append(result.value)
                verdict = f" {result.verdict}" if result.verdict else ""
                yield (
                    f"{scenario:12s} round {r} {driver:8s} {result.metric} = {result.value:.4g} {result.unit}"
                    f"{verdict} (other processes: {other})"
                )
        h, g = statistics.median(figures["harness"]), statistics.median(figures["loadgen"])
        ratio = f"{g / h:.3f}" if h else "n/a"
        yield f"{scenario:12s} {metric}: harness {h:.4g}, loadgen {g:.4g}, loadgen/harness = {ratio}"


def _one(
    scenario: Scenario, driver: str, model, session, settings: ScenarioSettings, log_dir: Path
) -> tuple[ScenarioResult, str]:
    with interference() as probe:
        if driver == "loadgen":
            plan = query_plan(model, scenario, 1, settings.multistream_samples_per_query)
            result = run_loadgen(scenario, model, session, plan, settings, log_dir, SAMPLE_SETS)
        else:
            sut = _sut(model, session, _query_samples(scenario, 1, settings), settings.seed)
            result = run_scenario(scenario, sut, settings)
    other = "unknown" if probe.other_cpu is None else f"{probe.other_cpu:.2f} cores"
    return result, other


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny_lenet5")
    parser.add_argument("--backend", default="onnxruntime")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--min-duration", type=float, default=1.0)
    parser.add_argument("--bound-ms", type=float, default=5.0, help="Server: the p99 bound both drivers search under")
    args = parser.parse_args(argv)
    settings = replace(
        ScenarioSettings(),
        min_duration_s=args.min_duration,
        min_queries=64,
        warmup_queries=5,
        server_search_steps=5,
        server_latency_bound_ms=args.bound_ms,
    )
    for line in compare(args.model, args.backend, args.rounds, settings):
        print(line, flush=True)


if __name__ == "__main__":
    main()
