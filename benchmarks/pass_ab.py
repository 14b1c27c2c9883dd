"""What named graph passes buy, in one process: ours with every pass, ours without them, and onnxruntime.

    python -m benchmarks.pass_ab --models efficientnet_like,recsys_embbag --disable squeeze_excite,embedding_bag

The three run in turns (with, without, onnxruntime, with, ...) with the idle gap and sampling of
``benchmarks.vs_peers``, so load from other processes hits each alike; each figure is the median of ``--rounds``
samples, and the ratios are to onnxruntime measured in the same turns.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.vs_peers import IDLE_GAP_S, _rel_error, _runner_ort, _sample


def _runner(proto: Any, threads: int, disable: Sequence[str]) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    from runtime import compile_model

    exe = compile_model(proto, threads=threads, disable=disable)

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(exe.run(dict(feeds)).values())

    return run


def compare(suite_model: Any, batch: int, threads: int, disable: Sequence[str], rounds: int) -> dict[str, float]:
    """Median ms of ``with``, ``without`` and ``ort``, and the relative error of ``with`` against onnxruntime."""
    proto, feeds = suite_model.model(), suite_model.feeds(batch)
    runners = {
        "with": _runner(proto, threads, ()),
        "without": _runner(proto, threads, disable),
        "ort": _runner_ort(proto, threads),
    }
    outputs = {name: run(feeds) for name, run in runners.items()}
    samples: dict[str, list[float]] = {name: [] for name in runners}
    for _ in range(rounds):
        for name, run in runners.items():
            time.sleep(IDLE_GAP_S)
            samples[name].append(_sample(functools.partial(run, feeds), 0.04)[0])
    result = {name: float(np.median(s)) * 1e3 for name, s in samples.items()}
    result["error"] = _rel_error(outputs["with"], outputs["ort"])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.models import suite

    parser = argparse.ArgumentParser(prog="python -m benchmarks.pass_ab", description=__doc__.split("\n")[0])
    parser.add_argument("--models", required=True, help="suite name or comma-separated models")
    parser.add_argument("--disable", required=True, help="comma-separated pass names to leave out")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    disable = [name for name in args.disable.split(",") if name]
    from runtime.passes import pass_names

    unknown = [name for name in disable if name not in pass_names()]
    try:
        models = suite(args.models)
    except KeyError as exc:
        unknown_model = str(exc.args[0])
    else:
        unknown_model = ""
    if unknown or unknown_model:
        known = ", ".join(pass_names())
        bad_pass = f"error: --disable: unknown pass {unknown[0]!r}; known: {known}" if unknown else ""
        print(bad_pass or f"error: --models: {unknown_model}", file=sys.stderr)
        return 2
    print(f"ours with all passes vs without {', '.join(disable)}; {args.threads} threads; ratios to onnxruntime")
    for batch in args.batch:
        for m in models:
            if not m.supports_batch(batch):
                continue
            r = compare(m, batch, args.threads, disable, args.rounds)
            print(
                f"{m.name:20s} b{batch}: with {r['with']:.3f} ms, without {r['without']:.3f} ms, onnxruntime "
                f"{r['ort']:.3f} ms; with/ORT {r['with'] / r['ort']:.2f}, without/ORT {r['without'] / r['ort']:.2f}"
                f" (rel. error {r['error']:.1e})",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
