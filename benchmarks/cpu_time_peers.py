"""Ours against onnxruntime at one thread, timed by the calling thread's CPU time: a comparison that a loaded
machine bends much less than wall time (time spent descheduled is not counted).

Both engines run in this process with one intra-op thread, in alternating blocks of about 0.08 s; each reports the
fastest block's per-run CPU time. It is not a substitute for ``benchmarks.vs_peers`` (wall time, several threads),
but where eight jobs share two cores it tells the per-run work of the two engines apart.

    python -m benchmarks.cpu_time_peers --models heldout --batch 1 8
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Alternating blocks per engine; the fastest counts.
BLOCKS = 5
#: Target CPU seconds of one block.
BLOCK_S = 0.08


def _fastest(runs: dict[str, Callable[[], Any]]) -> dict[str, float]:
    """Per-run thread CPU seconds of each callable: the fastest of ``BLOCKS`` alternating blocks."""
    for fn in runs.values():
        for _ in range(3):
            fn()
    started = time.thread_time()
    for fn in runs.values():
        fn()
    count = max(1, int(BLOCK_S / max(time.thread_time() - started, 1e-6)))
    best = dict.fromkeys(runs, math.inf)
    for _ in range(BLOCKS):
        for name, fn in runs.items():
            started = time.thread_time()
            for _ in range(count):
                fn()
            best[name] = min(best[name], (time.thread_time() - started) / count)
    return best


def _ours(exe: Any, feeds: dict[str, Any]) -> Any:
    return exe.run(dict(feeds))


def _ort(session: Any, feeds: dict[str, Any]) -> Any:
    return session.run(None, feeds)


def main(argv: Sequence[str] | None = None) -> int:
    import numpy as np
    import onnxruntime as ort

    from benchmarks.models import suite
    from runtime import compile_model

    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_time_peers", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="heldout", help="suite name or comma-separated models")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args(argv)
    ratios: dict[int, list[float]] = {b: [] for b in args.batch}
    for model in suite(args.models):
        proto = model.model()
        exe = compile_model(proto, threads=1)
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        cells = []
        for batch in args.batch:
            if not model.supports_batch(batch):
                continue
            feeds = model.feeds(batch=batch, seed=1)
            best = _fastest(
                {"ours": functools.partial(_ours, exe, feeds), "ort": functools.partial(_ort, session, feeds)}
            )
            ratio = best["ours"] / best["ort"]
            ratios[batch].append(ratio)
            cells.append(f"b{batch} {best['ours'] * 1e3:8.3f} {best['ort'] * 1e3:8.3f} {ratio:5.2f}")
        print(f"{model.name:22s} " + " | ".join(cells), flush=True)
    for batch, values in ratios.items():
        if values:
            print(f"geomean ours/ORT (1 thread, CPU time, batch {batch}): {float(np.exp(np.mean(np.log(values)))):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
