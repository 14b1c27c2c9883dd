"""Our runtime with some passes off and with every pass, against onnxruntime, in one process: what those passes buy.

    python -m benchmarks.pass_ab --models vit_tiny,distilbert_masked --disable attention_fusion,shape_values

Each configuration (``before``: the named passes disabled; ``after``: the default pipeline; ``ort``) runs in
alternating blocks (``benchmarks.vs_peers``' sampling, with its idle gap between engines), so machine load hits all
three alike. Prints the median time per run and the ratios to onnxruntime.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.vs_peers import IDLE_GAP_S, _rel_error, _runner_ort, _sample


def _outputs(exe: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    out = exe.run(feeds)
    return [out[n] for n in exe.output_names]


def compare_passes(
    models: str, disable: Sequence[str], batches: Sequence[int], threads: int, rounds: int
) -> list[dict[str, object]]:
    """One row per model and batch: median milliseconds of before/after/ort, their ratios, errors and node counts."""
    from benchmarks.models import suite
    from runtime import compile_model

    rows: list[dict[str, object]] = []
    for m in suite(models):
        proto = m.model()
        for batch in batches:
            if not m.supports_batch(batch):
                continue
            feeds = m.feeds(batch)
            before = compile_model(proto, threads=threads, disable=list(disable))
            after = compile_model(proto, threads=threads)
            runners: dict[str, Callable[[dict[str, np.ndarray]], list[np.ndarray]]] = {
                "before": functools.partial(_outputs, before),
                "after": functools.partial(_outputs, after),
                "ort": _runner_ort(proto, threads),
            }
            outputs = {name: run(dict(feeds)) for name, run in runners.items()}
            samples: dict[str, list[float]] = {name: [] for name in runners}
            for _ in range(rounds):
                for name, run in runners.items():
                    time.sleep(IDLE_GAP_S)
                    samples[name].append(_sample(functools.partial(run, dict(feeds)), 0.04)[0])
            ms = {name: statistics.median(v) * 1e3 for name, v in samples.items()}
            rows.append(
                {
                    "model": m.name,
                    "batch": batch,
                    **{f"{name}_ms": round(v, 4) for name, v in ms.items()},
                    "before_ratio": ms["before"] / ms["ort"],
                    "after_ratio": ms["after"] / ms["ort"],
                    "error": max(_rel_error(outputs[n], outputs["ort"]) for n in ("before", "after")),
                    "nodes": (len(before.model.graph.nodes), len(after.model.graph.nodes)),
                }
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pass_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="vit_tiny,distilbert_masked", help="suite name or comma-separated models")
    parser.add_argument("--disable", required=True, help="comma-separated pass names turned off for 'before'")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    disable = [d for d in args.disable.split(",") if d]
    for row in compare_passes(args.models, disable, args.batch, args.threads, args.rounds):
        print(
            f"{row['model']:20s} b{row['batch']}: before {row['before_ms']:.3f} ms, after {row['after_ms']:.3f} ms, "
            f"onnxruntime {row['ort_ms']:.3f} ms; ours/ORT {row['before_ratio']:.2f} -> {row['after_ratio']:.2f}; "
            f"max rel. error {row['error']:.1e}; nodes {row['nodes'][0]} -> {row['nodes'][1]}",  # type: ignore[index]
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
