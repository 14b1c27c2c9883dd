"""Our runtime against onnxruntime and PyTorch eager, side by side in one process.

    python -m benchmarks.vs_peers [--threads 1 2] [--batch 1 8] [--models resnet18,bert] [--rounds 9]

For every thread count and batch, each model of the suite (``benchmarks.models``: ResNet-50/18, MobileNetV2-like,
a BERT-like encoder, an MLP, and the onnx wheel's light model-zoo nets at their fixed batch 1) runs on

* ours: ``runtime.compile_model(model, threads=T)`` (compiled kernels, passes, tuning cache, memory plan);
* onnxruntime: ``ORT_ENABLE_ALL``, ``intra_op_num_threads=T``, sequential execution;
* PyTorch eager, when torch is installed: the same graph and weights run one torch call per node
  (``benchmarks.torch_eager``; the zoo nets' ConstantOfShape weights are folded first, as a PyTorch model would
  hold them as parameters), ``torch.set_num_threads(T)``.

Backends are timed in turns (ours, ORT, torch, ours, ...) so load from other processes hits each alike, with a short
idle gap before each sample so no backend's spinning threads steal from the next; a sample is the mean of enough
back-to-back runs to last ~40 ms (after one untimed run), and the figure is the median of ``--rounds`` samples.
Outputs are checked against onnxruntime (relative max error). The table gives medians, ours/ORT and ours/torch, achieved
GFLOP/s (FLOPs from ``analysis.modelinfo``), and memory: our run's working memory (the planned buffers plus the
peak of NumPy allocations during a run, tracemalloc; weights excluded) and each backend's resident-memory growth
from creating and warming it (weights and arenas included; approximate, freed pages are not always returned). The
last lines give the geometric-mean ratio ours/ORT per configuration and over all, and the CNNs where ours is not
faster than torch. ``--json FILE`` also writes every sample for the benchmark database.
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

#: Families counted as CNNs for the "faster than PyTorch eager on every CNN" line.
NON_CNN_FAMILIES = frozenset({"bert", "mlp"})
#: Pause before each timed sample: thread pools (onnxruntime's, torch's, ours) spin for a while after a run.
IDLE_GAP_S = 0.03
#: Relative max error (max |ours - ort| / max |ort|) above which outputs are reported as disagreeing.
TOLERANCE = 1e-3


@dataclass
class Timing:
    samples: list[float] = field(default_factory=list)

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples)) * 1e3 if self.samples else math.nan


@dataclass
class ModelResult:
    name: str
    family: str
    batch: int
    threads: int
    gflop: float
    times: dict[str, Timing]
    rel_error: dict[str, float]
    rss_mb: dict[str, float]
    ours_peak_mb: float
    skipped: dict[str, str]

    def ms(self, backend: str) -> float:
        t = self.times.get(backend)
        return t.median_ms if t is not None else math.nan

    def ratio(self, other: str) -> float:
        return self.ms("ours") / self.ms(other) if other in self.times else math.nan


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        import os

        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError):
        return math.nan


def _folded_for_torch(proto: onnx.ModelProto) -> onnx.ModelProto:
    """The graph with constant subgraphs (ConstantOfShape weights) evaluated, standard ops only."""
    from runtime import compile_model

    exe = compile_model(proto, passes=["identity_elimination", "constant_folding", "dead_node_elimination"])
    return exe.model.to_onnx()


def _runner_ours(proto: onnx.ModelProto, threads: int) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    from runtime import compile_model

    exe = compile_model(proto, threads=threads)
    names = exe.output_names

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        out = exe.run(feeds)
        return [out[n] for n in names]

    run.executable = exe  # type: ignore[attr-defined]
    return run


def _runner_ort(proto: onnx.ModelProto, threads: int) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    session = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])

    def run(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        return list(session.run(None, feeds))

    return run


def _runner_torch(proto: onnx.ModelProto, threads: int) -> Callable[[dict[str, np.ndarray]], list[np.ndarray]]:
    from benchmarks.torch_eager import compile_torch

    graph = compile_torch(proto, threads)
    return graph.run


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def _sample(fn: Callable[[], Any], target_s: float) -> tuple[float, int]:
    """Mean seconds per call over enough back-to-back calls to last about ``target_s``."""
    t0 = time.perf_counter()
    fn()
    once = time.perf_counter() - t0
    reps = max(1, min(200, int(target_s / max(once, 1e-6))))
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps, reps


def _rel_error(ours: Sequence[np.ndarray], ref: Sequence[np.ndarray]) -> float:
    worst = 0.0
    for a, b in zip(ours, ref, strict=True):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a64.shape != b64.shape:
            return math.inf
        scale = max(float(np.max(np.abs(b64))) if b64.size else 0.0, 1e-12)
        worst = max(worst, float(np.max(np.abs(a64 - b64))) / scale if a64.size else 0.0)
    return worst


def bench_model(
    suite_model: Any, batch: int, threads: int, rounds: int, use_torch: bool, target_s: float = 0.04
) -> ModelResult:
    """Time one model on every backend at one batch size and thread count."""
    from analysis.modelinfo import analyse_onnx

    proto = suite_model.model()
    feeds = suite_model.feeds(batch)
    gflop = analyse_onnx(proto, batch_size=batch).flops / 1e9
    builders: dict[str, Callable[[], Callable[[dict[str, np.ndarray]], list[np.ndarray]]]] = {
        "ours": lambda: _runner_ours(proto, threads),
        "ort": lambda: _runner_ort(proto, threads),
    }
    if use_torch:
        torch_proto = _folded_for_torch(proto) if suite_model.source != "built" else proto
        builders["torch"] = lambda: _runner_torch(torch_proto, threads)
    runners: dict[str, Callable[[dict[str, np.ndarray]], list[np.ndarray]]] = {}
    rss: dict[str, float] = {}
    skipped: dict[str, str] = {}
    outputs: dict[str, list[np.ndarray]] = {}
    for name, build in builders.items():
        gc.collect()
        before = _rss_mb()
        try:
            runner = build()
            outputs[name] = runner(feeds)
            runner(feeds)
        except Exception as exc:  # a peer that cannot run a model is reported, not fatal
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
            continue
        runners[name] = runner
        rss[name] = _rss_mb() - before
    peak = math.nan
    if "ours" in runners:
        tracemalloc.start()
        runners["ours"](feeds)
        transient = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        planned = getattr(runners["ours"], "executable").plan.planned_bytes  # noqa: B009 - set on the function
        peak = (transient + planned) / 1e6
    errors = {n: _rel_error(outputs[n], outputs["ort"]) for n in outputs if n != "ort" and "ort" in outputs}
    times = {n: Timing() for n in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            time.sleep(IDLE_GAP_S)  # let the previous backend's spinning threads go idle
            seconds, _ = _sample(functools.partial(runner, feeds), target_s)
            times[name].samples.append(seconds)
    return ModelResult(suite_model.name, suite_model.family, batch, threads, gflop, times, errors, rss, peak, skipped)


def geomean(values: Sequence[float]) -> float:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else math.nan


def format_table(results: Sequence[ModelResult], with_torch: bool) -> str:
    peers = ("ort", "torch") if with_torch else ("ort",)
    shown = {"ort": "ORT", "torch": "torch"}
    ratios = [f"ours/{shown[peer]}" for peer in peers]  # each column as wide as its title
    head = f"{'model':18s} {'GFLOP':>7s} {'ours ms':>9s}" + "".join(f" {shown[peer] + ' ms':>9s}" for peer in peers)
    head += "".join(f" {title}" for title in ratios)
    head += f" {'ours GF/s':>9s} {'ORT GF/s':>8s} {'rel.err':>8s} {'work MB':>8s} {'RSS+ MB ours/ORT/torch':>23s}"
    lines = [head, "-" * len(head)]
    for r in results:
        line = f"{r.name:18s} {r.gflop:7.3f} {r.ms('ours'):9.2f}" + "".join(f" {r.ms(peer):9.2f}" for peer in peers)
        line += "".join(f" {r.ratio(peer):{len(title)}.2f}" for peer, title in zip(peers, ratios, strict=True))
        gfs = r.gflop / (r.ms("ours") / 1e3) if r.ms("ours") else math.nan
        gfs_ort = r.gflop / (r.ms("ort") / 1e3) if r.ms("ort") else math.nan
        err = r.rel_error.get("ours", math.nan)
        flag = "" if err <= TOLERANCE else " !"
        mem = "/".join(f"{r.rss_mb.get(n, math.nan):.0f}" for n in ("ours", "ort", "torch"))
        line += f" {gfs:9.1f} {gfs_ort:8.1f} {err:8.1e}{flag} {r.ours_peak_mb:8.1f} {mem:>23s}"
        lines.append(line)
        for backend, reason in r.skipped.items():
            lines.append(f"    {backend} skipped: {reason}")
    return "\n".join(lines)


def format_families(results: Sequence[ModelResult]) -> str:
    """One line per family: the geometric-mean ratio ours/ORT over its models, and its worst model."""
    families: dict[str, list[ModelResult]] = {}
    for r in results:
        families.setdefault(r.family, []).append(r)
    lines = ["by family (geomean ours/ORT, worst model):"]
    for family, members in families.items():
        worst = max(members, key=lambda r: r.ratio("ort") if math.isfinite(r.ratio("ort")) else -1.0)
        g = geomean([r.ratio("ort") for r in members])
        lines.append(f"  {family:14s} {g:6.2f}  ({len(members)} results; worst {worst.name} {worst.ratio('ort'):.2f})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.models import suite

    parser = argparse.ArgumentParser(prog="python -m benchmarks.vs_peers", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[2])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument(
        "--models",
        default="all",
        help="suite name (all, core, zoo, tiny, quick, breadth, heldout) or comma-separated models",
    )
    parser.add_argument("--rounds", type=int, default=9, help="timed samples per backend (median reported)")
    parser.add_argument("--no-torch", action="store_true", help="skip PyTorch even when installed")
    parser.add_argument("--json", help="also write every measurement to this JSON file")
    args = parser.parse_args(argv)
    use_torch = torch_available() and not args.no_torch
    models = suite(args.models)
    from runtime import native

    print(f"compiled kernels: {native.status()}")
    if not use_torch:
        print("PyTorch: not installed (or --no-torch); its columns are left out")
    all_ratios: list[float] = []
    summaries = []
    records: list[dict[str, Any]] = []
    every: list[ModelResult] = []
    for threads in args.threads:
        for batch in args.batch:
            results = []
            for m in models:
                if not m.supports_batch(batch):
                    continue
                results.append(bench_model(m, batch, threads, args.rounds, use_torch))
                print(f"  measured {m.name} (threads {threads}, batch {batch})", file=sys.stderr, flush=True)
            if not results:
                continue
            records += [_record(r) for r in results]
            print(f"\n== threads {threads}, batch {batch} ==")
            print(format_table(results, use_torch))
            print(format_families(results))
            every += results
            ratios = [r.ratio("ort") for r in results]
            all_ratios += ratios
            g = geomean(ratios)
            cnns = [r for r in results if r.family not in NON_CNN_FAMILIES]
            slower = [r.name for r in cnns if use_torch and "torch" in r.times and not r.ratio("torch") < 1]
            unmeasured = [r.name for r in cnns if use_torch and "torch" not in r.times]
            line = f"geomean ours/ORT (threads {threads}, batch {batch}): {g:.2f} over {len(results)} models"
            if use_torch:
                cnn = [r.ratio("torch") for r in results if r.family not in NON_CNN_FAMILIES]
                line += f"; ours/torch geomean on CNNs {geomean(cnn):.2f}"
                line += f"; CNNs not faster than torch: {', '.join(slower) or 'none'}"
                if unmeasured:
                    line += f" (torch could not run: {', '.join(unmeasured)})"
            print(line)
            summaries.append(line)
    print()
    for line in summaries:
        print(line)
    if len({r.family for r in every}) > 1:
        print("over all configurations, " + format_families(every))
    print(f"geomean ours/ORT over all configurations: {geomean(all_ratios):.2f}")
    if args.json:
        import json
        import platform

        meta = {"machine": platform.processor() or platform.machine(), "native": native.status()}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": records}, fh, indent=1)
    return 0


def _record(r: ModelResult) -> dict[str, Any]:
    """One measurement as plain JSON values (for the benchmark database)."""
    return {
        "model": r.name,
        "family": r.family,
        "batch": r.batch,
        "threads": r.threads,
        "gflop": r.gflop,
        "median_ms": {name: t.median_ms for name, t in r.times.items()},
        "samples_ms": {name: [v * 1e3 for v in t.samples] for name, t in r.times.items()},
        "ratio_ours_ort": r.ratio("ort"),
        "ratio_ours_torch": r.ratio("torch"),
        "rel_error_vs_ort": r.rel_error,
        "ours_working_mb": r.ours_peak_mb,
        "rss_growth_mb": r.rss_mb,
        "skipped": r.skipped,
    }


if __name__ == "__main__":
    raise SystemExit(main())
