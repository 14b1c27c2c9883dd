"""Ours against onnxruntime run by run, for loaded machines.

    python -m benchmarks.per_run --models bilstm_classifier,seq2seq_gru --batch 1 8 --threads 2 --blocks 15

``benchmarks.vs_peers`` reports the median of ~40 ms samples, and on a machine shared with other work most such
samples contain a preemption: its ratios then say more about the neighbours than about the engines. Here both
engines run in alternating blocks of ten runs (a short pause before each block), every run is timed on its own,
and the table gives each engine's 10th percentile and median per run and their ratios: the 10th percentile is the
run that met the least interference. Outputs are compared first (relative max error against onnxruntime).
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from benchmarks.vs_peers import _rel_error, _runner_ort, _runner_ours

#: Runs per block, and the pause before each block (other engines' spinning threads go idle).
RUNS_PER_BLOCK = 10
PAUSE_S = 0.01


def measure(runners: Mapping[str, Callable[[], Any]], blocks: int) -> dict[str, list[float]]:
    """Seconds of every run, per engine, taken in alternating blocks."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for run in runners.values():  # warm: plans recorded, pools started
        for _ in range(3):
            run()
    for _ in range(blocks):
        for name, run in runners.items():
            time.sleep(PAUSE_S)
            for _ in range(RUNS_PER_BLOCK):
                started = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - started)
    return times


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.models import suite

    parser = argparse.ArgumentParser(prog="python -m benchmarks.per_run", description=__doc__.split("\n")[0])
    parser.add_argument("--models", required=True, help="suite name or comma-separated models")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=15, help="blocks of ten runs per engine")
    args = parser.parse_args(argv)
    print(
        f"{'model':18s} {'batch':>5s} {'ours p10':>9s} {'ORT p10':>8s} {'ratio':>6s} {'ours med':>9s} "
        f"{'ORT med':>8s} {'ratio':>6s} {'rel.err':>8s}  (ms per run)"
    )
    for model in suite(args.models):
        proto = model.model()
        for batch in args.batch:
            if not model.supports_batch(batch):
                continue
            feeds = model.feeds(batch)
            ours, ort = _runner_ours(proto, args.threads), _runner_ort(proto, args.threads)
            error = _rel_error(ours(feeds), ort(feeds))
            runners = {"ours": functools.partial(ours, feeds), "ort": functools.partial(ort, feeds)}
            times = measure(runners, args.blocks)
            p10 = {name: float(np.percentile(t, 10)) * 1e3 for name, t in times.items()}
            med = {name: float(np.median(t)) * 1e3 for name, t in times.items()}
            print(
                f"{model.name:18s} {batch:5d} {p10['ours']:9.3f} {p10['ort']:8.3f} {p10['ours'] / p10['ort']:6.2f} "
                f"{med['ours']:9.3f} {med['ort']:8.3f} {med['ours'] / med['ort']:6.2f} {error:8.1e}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
