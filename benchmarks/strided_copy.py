"""The runtime's strided copy (``ap_strided_copy``) against NumPy's, and a product reading a transposed buffer
against the same product reading a contiguous one, measured side by side in alternating blocks.

    python -m benchmarks.strided_copy [--blocks 5] [--calls 2000]

The static plan binds a kernel that cannot read a strided input on a compiled copy of it (``runtime.static_plan``'s
``_bound_on_copies``): an MLP-Mixer's token mixing, a transformer's head merge. Prints per view the median
microseconds per copy of ours and of ``np.copyto`` and their ratio, then per product shape the planned run's median
with the transposed input and with a contiguous one and their ratio. Needs the compiled kernels.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper

from perfmodels.targets import cpu_model_and_flags

#: (source shape, permutation): transposes of the sizes a planned graph copies, small to large.
VIEWS: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((64, 96), (1, 0)),  # an MLP-Mixer's token mixing at 64 tokens
    ((49, 8, 32), (1, 0, 2)),  # a window's heads merged
    ((3136, 96), (1, 0)),
    ((96, 3136), (1, 0)),
    ((512, 512), (1, 0)),
)
#: (tokens, channels, hidden): ``Transpose(0, 2, 1)`` of [1, tokens, channels] into a product with [tokens, hidden].
PRODUCTS: tuple[tuple[int, int, int], ...] = ((64, 96, 128), (196, 384, 256))


def block_medians(runs: Sequence[Callable[[], object]], blocks: int, calls: int) -> list[float]:
    """Each run's median over ``blocks`` of the mean microseconds per call of ``calls`` calls, the runs taking turns
    block by block (a peer's threads then slow each side alike)."""
    times: list[list[float]] = [[] for _ in runs]
    for run in runs:
        run()
    for _ in range(blocks):
        for i, run in enumerate(runs):
            start = time.perf_counter()
            for _ in range(calls):
                run()
            times[i].append((time.perf_counter() - start) / calls * 1e6)
    return [statistics.median(t) for t in times]


def product_model(tokens: int, channels: int, hidden: int, transposed: bool) -> onnx.ModelProto:
    """``x @ W + b`` with ``x`` [1, channels, tokens]: the graph input transposed, or given in that shape."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((tokens, hidden)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(hidden).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["xt" if transposed else "x", "w"], ["m"]),
        helper.make_node("Add", ["m", "b"], ["y"]),
    ]
    if transposed:
        nodes.insert(0, helper.make_node("Abs", ["x"], ["a"]))  # a planned buffer, as inside a model
        nodes.insert(1, helper.make_node("Transpose", ["a"], ["xt"], perm=[0, 2, 1]))
    shape = [1, tokens, channels] if transposed else [1, channels, tokens]
    graph = helper.make_graph(
        nodes,
        "product",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, channels, hidden])],
        [weight, bias],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.strided_copy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)
    from runtime import compile_model, native
    from runtime.native.convnets import strided_copy_call

    lib = native.lib()
    if lib is None:
        raise SystemExit(f"compiled kernels unavailable: {native.status()}")
    lines = [f"# CPU {cpu_model_and_flags()[0]}; median of {args.blocks} alternating blocks of {args.calls} calls"]
    for shape, perm in VIEWS:
        view = np.random.default_rng(0).standard_normal(shape).astype(np.float32).transpose(perm)
        out = np.empty(view.shape, np.float32)
        ours = strided_copy_call(lib, view, out)
        assert ours is not None
        mine, numpy = block_medians([ours, functools.partial(np.copyto, out, view)], args.blocks, args.calls)
        lines.append(f"copy {'x'.join(map(str, view.shape)):>12}: ours {mine:8.2f} us, numpy {numpy:8.2f} us, "
                     f"ratio {mine / numpy:.2f}")  # fmt: skip
    for tokens, channels, hidden in PRODUCTS:
        feeds = {"x": np.random.default_rng(1).standard_normal((1, tokens, channels)).astype(np.float32)}
        flat = {"x": np.ascontiguousarray(feeds["x"].transpose(0, 2, 1))}
        strided = compile_model(product_model(tokens, channels, hidden, True))
        plain = compile_model(product_model(tokens, channels, hidden, False))
        calls = max(1, args.calls // 10)
        runs = [functools.partial(strided.run, feeds), functools.partial(plain.run, flat)]
        t, p = block_medians(runs, args.blocks, calls)
        lines.append(f"product {tokens}x{channels}->{hidden}: transposed input {t:8.2f} us, contiguous {p:8.2f} us, "
                     f"ratio {t / p:.2f}")  # fmt: skip
    for line in lines:
        print(line)
    return lines


if __name__ == "__main__":
    main()
