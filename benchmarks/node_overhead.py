"""Per-node overhead: nanoseconds per node on a chain of 100 tiny ops, ours against onnxruntime.

    python -m benchmarks.node_overhead [--threads 1 2] [--nodes 100] [--rounds 9]

Two chains on a (1, 16) float tensor: ``softmax`` (100 Softmax nodes, which no pass of either engine merges, so
every node is dispatched) and ``elementwise`` (Add/Mul/Sub/Div with scalar constants and Neg, which our element-wise
chain pass merges into one node). Each is timed against a one-node graph of the same op; the figure is
``(t(chain) - t(one node)) / (nodes - 1)``, the cost a node adds to a run. Engines are measured in alternating
blocks (see ``benchmarks.vs_peers``); the table gives medians, and how many nodes our compiled plan kept.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper

from benchmarks.vs_peers import IDLE_GAP_S, _runner_ort, _runner_ours, _sample

CHAINS = ("softmax", "elementwise")
WIDTH = 16


def chain_model(kind: str, nodes: int) -> onnx.ModelProto:
    """A graph of ``nodes`` ops in a chain on a ``(1, 16)`` float input."""
    made: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    prev = "x"
    for i in range(nodes):
        out = f"t{i}"
        if kind == "softmax":
            made.append(helper.make_node("Softmax", [prev], [out], axis=-1))
        elif kind == "elementwise":
            op = "Neg" if i % 5 == 0 else ("Add", "Mul", "Sub", "Div")[i % 4]
            if op == "Neg":
                made.append(helper.make_node(op, [prev], [out]))
            else:
                inits.append(helper.make_tensor(f"c{i}", TensorProto.FLOAT, [1], [1.0 + 0.001 * i]))
                made.append(helper.make_node(op, [prev, f"c{i}"], [out]))
        else:
            raise ValueError(f"unknown chain {kind!r}; choose from {', '.join(CHAINS)}")
        prev = out
    graph = helper.make_graph(
        made,
        f"{kind}_chain_{nodes}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, WIDTH])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, WIDTH])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def measure(
    kind: str, nodes: int, threads: int, rounds: int, target_s: float = 0.05
) -> dict[str, tuple[float, float, int]]:
    """Per engine: (median seconds per run of the chain, of one node, nodes kept by the engine's plan or -1)."""
    feeds = {"x": np.random.default_rng(0).standard_normal((1, WIDTH)).astype(np.float32)}
    runners: dict[str, dict[int, Callable[..., list[np.ndarray]]]] = {"ours": {}, "ort": {}}
    kept = {"ours": -1, "ort": -1}
    for n in (nodes, 1):
        proto = chain_model(kind, n)
        runners["ours"][n] = _runner_ours(proto, threads)
        runners["ort"][n] = _runner_ort(proto, threads)
    ours_exe = getattr(runners["ours"][nodes], "executable")  # noqa: B009 - set on the function
    kept["ours"] = len(ours_exe.model.graph.nodes)
    samples: dict[tuple[str, int], list[float]] = {(e, n): [] for e in runners for n in (nodes, 1)}
    for engine in runners:
        for fn in runners[engine].values():
            fn(feeds)
    for _ in range(rounds):
        for (engine, n), out in samples.items():
            time.sleep(IDLE_GAP_S)
            seconds, _ = _sample(functools.partial(runners[engine][n], feeds), target_s)
            out.append(seconds)
    return {e: (float(np.median(samples[(e, nodes)])), float(np.median(samples[(e, 1)])), kept[e]) for e in runners}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.node_overhead", description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--chains", nargs="+", default=list(CHAINS), choices=CHAINS)
    args = parser.parse_args(argv)
    if args.nodes < 2:
        parser.error("--nodes must be at least 2")
    head = f"{'chain':12s} {'thr':>3s} {'ours us/run':>11s} {'ORT us/run':>10s} {'ours ns/node':>12s}"
    head += f" {'ORT ns/node':>11s} {'ours/ORT':>8s} {'our nodes':>9s}"
    print(head)
    print("-" * len(head))
    for kind in args.chains:
        for threads in args.threads:
            res = measure(kind, args.nodes, threads, args.rounds)
            per = {e: (chain - one) / (args.nodes - 1) * 1e9 for e, (chain, one, _) in res.items()}
            print(
                f"{kind:12s} {threads:3d} {res['ours'][0] * 1e6:11.1f} {res['ort'][0] * 1e6:10.1f}"
                f" {per['ours']:12.0f} {per['ort']:11.0f} {res['ours'][0] / res['ort'][0]:8.2f}"
                f" {res['ours'][2]:9d}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
