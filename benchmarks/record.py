"""Regenerate the shipped result database (``benchmarks/results/default.csv``) from scratch on this machine.

What it measures (see ``default_requests``): the whole model suite on our runtime, PyTorch eager and onnxruntime
(level ALL = NCHWc, and level EXTENDED = NCHW) at 1 and 2 threads, batch 1 and 8 where the model allows,
SingleStream; onnxruntime int8 (dynamic quantisation); accuracy against onnxruntime; MultiStream/Server/Offline on
the core models; the kernel suite.
Then it adds the seeds' literature rows and replaces the database atomically.

Run it through the CLI (which supplies the model analyser and the catalog's literature figures)::

    appopt bench record-default                 # or: python -m optimiser.commands.bench_cmds bench record-default
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.harness import ScenarioSettings
from benchmarks.kernels import kernel_suite, run_kernel_suite
from benchmarks.models import suite
from benchmarks.runner import Analyser, BenchRequest, Outcome, run_benchmarks
from perfmodels.results_db import DEFAULT_DB, frame_rows, read_results, write_rows

#: Timing settings for the shipped database (raise them on a quiet machine for tighter figures).
RECORD_SETTINGS = ScenarioSettings(min_duration_s=1.0, min_queries=7, warmup_queries=2)
MEASURED_BACKENDS = ("appopt-runtime", "onnxruntime", "onnxruntime-extended", "torch")


def default_requests(
    settings: ScenarioSettings = RECORD_SETTINGS, threads: Sequence[int] = (1, 2)
) -> list[BenchRequest]:
    core, zoo = suite("core"), suite("zoo")
    quick_scenarios = replace(settings, min_duration_s=min(settings.min_duration_s, 0.5), min_queries=5)
    return [
        BenchRequest(core, MEASURED_BACKENDS, ("SingleStream",), threads, (1, 8), ("fp32",), settings),
        BenchRequest(zoo, MEASURED_BACKENDS, ("SingleStream",), threads, (1,), ("fp32",), settings),
        BenchRequest(core + zoo, ("onnxruntime",), ("SingleStream",), threads, (1,), ("int8",), settings),
        BenchRequest(
            core + zoo,
            ("appopt-runtime", "onnxruntime-extended", "torch"),
            ("accuracy",),
            (1,),
            (1,),
            ("fp32",),
            settings,
            reference="onnxruntime",
        ),
        BenchRequest(
            core,
            ("appopt-runtime", "onnxruntime"),
            ("MultiStream", "Offline", "Server"),
            (max(threads),),
            (1,),
            ("fp32",),
            quick_scenarios,
        ),
    ]


def record_default(
    analyser: Analyser,
    literature: Iterable[dict[str, Any]],
    out: Path = DEFAULT_DB,
    settings: ScenarioSettings = RECORD_SETTINGS,
    threads: Sequence[int] = (1, 2),
    kernels: bool = True,
    progress: Callable[[str], None] = print,
) -> Path:
    """Measure everything ``default_requests`` lists into a side shard, then replace ``out`` with shard + literature.

    The shard (``out`` with ``.partial.csv``) is appended row by row, so an interrupted run keeps what it measured;
    ``out`` itself is only replaced once everything is done.
    """
    shard = out.with_suffix(".partial.csv")
    shard.unlink(missing_ok=True)
    for request in default_requests(settings, threads):
        for outcome in run_benchmarks(request, analyser, shard):
            progress(_line(outcome))
    if kernels:
        for kernel_outcome in run_kernel_suite(
            kernel_suite("all"), ["onnxruntime", "appopt-runtime"], list(threads), settings, str(shard)
        ):
            progress(kernel_outcome.describe())
    measured = frame_rows(read_results(shard)) if shard.exists() else []
    rows = [*literature, *measured]
    write_rows(out, rows)
    shard.unlink(missing_ok=True)
    progress(f"wrote {len(rows)} rows to {out}")
    return out


def _line(outcome: Outcome) -> str:
    return outcome.describe()
