"""Seeded fuzz of the compiled kernels merged for the breadth models (convnets, program runs, attention, recurrent
layers, upsampling and concat placement): small models at odd sizes (channels 1, 3, 7, 17, 33; images 1..9 pixels
a side; batch 1..3; 1, 2 or 4 threads), compiled with every pass and run through the static plan, against the same
graph on the NumPy path. Each model runs with one batch size twice (the second run is a planned replay), then
another batch size (a new input signature), then the first again.

Run under AddressSanitizer (docs/decisions.md, 2026-11-26) this is how out-of-bounds access in the kernels is looked
for; here it checks the answers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import helper

from runtime import compile_model, native
from tests.runtime.graphs import const, gelu, gelu_constants, model, vi

pytestmark = pytest.mark.skipif(native.lib() is None, reason=f"compiled kernels unavailable: {native.status()}")

CHANNELS = (1, 3, 7, 17, 33)
THREADS = (1, 2, 4)
Built = tuple[onnx.ModelProto, Callable[[int], dict[str, np.ndarray]]]


def _w(rng: np.random.Generator, *shape: int, scale: float = 0.3) -> np.ndarray:
    return rng.standard_normal(shape) * scale


def _image_feeds(rng: np.random.Generator, c: int, h: int, w: int) -> Callable[[int], dict[str, np.ndarray]]:
    def feeds(batch: int) -> dict[str, np.ndarray]:
        return {"x": rng.standard_normal((batch, c, h, w)).astype(np.float32)}

    return feeds


def convnext(rng: np.random.Generator) -> Built:
    """1x1 stem -> depthwise KxK (3, 5 or 7, stride 1 or 2) -> permute -> LayerNorm -> MLP with GELU -> permute
    -> residual: the NHWC depthwise kernel at image edges, the row LayerNorm and the GELU epilogue."""
    c, e = int(rng.choice(CHANNELS)), int(rng.integers(1, 40))
    h, w = (int(v) for v in rng.integers(1, 10, size=2))
    k, stride = int(rng.choice([3, 5, 7])), int(rng.integers(1, 3))
    p = k // 2
    nodes = [
        helper.make_node("Conv", ["x", "ws"], ["s"]),
        helper.make_node("Conv", ["s", "wd", "bd"], ["d"], pads=[p, p, p, p], group=c, strides=[stride, stride]),
        helper.make_node("Transpose", ["d"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("LayerNormalization", ["t", "g", "b"], ["n"], axis=-1),
        helper.make_node("MatMul", ["n", "m1"], ["h0"]),
        helper.make_node("Add", ["h0", "c1"], ["h1"]),
        *gelu("h1", "hg"),
        helper.make_node("MatMul", ["hg", "m2"], ["o0"]),
        helper.make_node("Add", ["o0", "c2"], ["o1"]),
        helper.make_node("Transpose", ["o1"], ["o"], perm=[0, 3, 1, 2]),
        helper.make_node("Add", ["d", "o"], ["y"]),
    ]
    init = [
        const("ws", _w(rng, c, 3, 1, 1)),
        const("wd", _w(rng, c, 1, k, k, scale=0.2)),
        const("bd", _w(rng, c)),
        const("g", rng.random(c) + 0.5),
        const("b", _w(rng, c)),
        const("m1", _w(rng, c, e)),
        const("c1", _w(rng, e)),
        const("m2", _w(rng, e, c)),
        const("c2", _w(rng, c)),
        *gelu_constants(),
    ]
    m = model(nodes, [vi("x", shape=["n", 3, h, w])], [vi("y")], init)
    return m, _image_feeds(rng, 3, h, w)


def squeeze_excite(rng: np.random.Generator) -> Built:
    """3x3 conv + SiLU, squeeze-excite (mean, two 1x1 convs, sigmoid gate), 1x1 projection."""
    c, cr, mo = int(rng.choice(CHANNELS)), int(rng.integers(1, 9)), int(rng.choice(CHANNELS))
    h, w = (int(v) for v in rng.integers(1, 10, size=2))
    nodes = [
        helper.make_node("Conv", ["x", "w0", "b0"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Sigmoid", ["c"], ["cs"]),
        helper.make_node("Mul", ["c", "cs"], ["y0"]),
        helper.make_node("GlobalAveragePool", ["y0"], ["p"]),
        helper.make_node("Conv", ["p", "w1", "b1"], ["h0"]),
        helper.make_node("Relu", ["h0"], ["hr"]),
        helper.make_node("Conv", ["hr", "w2", "b2"], ["g0"]),
        helper.make_node("Sigmoid", ["g0"], ["g"]),
        helper.make_node("Mul", ["y0", "g"], ["o"]),
        helper.make_node("Conv", ["o", "w3"], ["y"]),
    ]
    init = [
        const("w0", _w(rng, c, 3, 3, 3)),
        const("b0", _w(rng, c)),
        const("w1", _w(rng, cr, c, 1, 1, scale=0.5)),
        const("b1", _w(rng, cr)),
        const("w2", _w(rng, c, cr, 1, 1, scale=0.5)),
        const("b2", _w(rng, c)),
        const("w3", _w(rng, mo, c, 1, 1)),
    ]
    m = model(nodes, [vi("x", shape=["n", 3, h, w])], [vi("y")], init)
    return m, _image_feeds(rng, 3, h, w)


def attention(rng: np.random.Generator) -> Built:
    """Single-block self-attention over [n, S, heads*dh]: Q/K/V products, heads split, scaled scores, softmax,
    weighted values, heads merged, output projection."""
    heads, dh, s = int(rng.integers(1, 4)), int(rng.choice(CHANNELS)), int(rng.integers(1, 10))
    d = heads * dh
    nodes = [
        *(helper.make_node("MatMul", ["x", f"w{n}"], [n]) for n in "qkv"),
        *(helper.make_node("Reshape", [n, "split"], [f"{n}s"]) for n in "qkv"),
        helper.make_node("Transpose", ["qs"], ["qh"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["ks"], ["kh"], perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["vs"], ["vh"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qh", "kh"], ["sc0"]),
        helper.make_node("Div", ["sc0", "scale"], ["sc"]),
        helper.make_node("Softmax", ["sc"], ["pr"], axis=-1),
        helper.make_node("MatMul", ["pr", "vh"], ["at"]),
        helper.make_node("Transpose", ["at"], ["am"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["am", "merge"], ["a2"]),
        helper.make_node("MatMul", ["a2", "wo"], ["y"]),
    ]
    init = [
        *(const(f"w{n}", _w(rng, d, d)) for n in "qkv"),
        const("wo", _w(rng, d, d)),
        const("split", [0, 0, heads, dh], np.int64),
        const("merge", [0, 0, d], np.int64),
        const("scale", np.sqrt(dh)),
    ]
    m = model(nodes, [vi("x", shape=["n", s, d])], [vi("y")], init)

    def feeds(batch: int) -> dict[str, np.ndarray]:
        return {"x": rng.standard_normal((batch, s, d)).astype(np.float32)}

    return m, feeds


def recurrent(rng: np.random.Generator) -> Built:
    """An LSTM or GRU (forward or bidirectional) over [S, n, I], then a product of its last hidden state."""
    op = str(rng.choice(["LSTM", "GRU"]))
    gates = 4 if op == "LSTM" else 3
    hidden, inp, s = int(rng.choice(CHANNELS)), int(rng.choice(CHANNELS)), int(rng.integers(1, 7))
    direction = str(rng.choice(["forward", "bidirectional"]))
    dirs = 2 if direction == "bidirectional" else 1
    outs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    attrs = {"hidden_size": hidden, "direction": direction}
    if op == "GRU":
        attrs["linear_before_reset"] = int(rng.integers(0, 2))
    nodes = [helper.make_node(op, ["x", "W", "R", "B"], outs, **attrs)]
    init = [
        const("W", _w(rng, dirs, gates * hidden, inp)),
        const("R", _w(rng, dirs, gates * hidden, hidden)),
        const("B", _w(rng, dirs, 2 * gates * hidden)),
    ]
    m = model(nodes, [vi("x", shape=[s, "n", inp])], [vi(o) for o in outs], init)

    def feeds(batch: int) -> dict[str, np.ndarray]:
        return {"x": rng.standard_normal((s, batch, inp)).astype(np.float32)}

    return m, feeds


def upsample_concat(rng: np.random.Generator) -> Built:
    """conv -> stride-2 conv -> ConvTranspose k2 s2 (concat with the skip) -> conv -> Resize x2 -> concat -> conv:
    the NHWC col2im and resize kernels writing their slice of a concat's output."""
    c1, c2, ct, c3 = (int(rng.choice(CHANNELS)) for _ in range(4))
    h, w = (2 * int(v) for v in rng.integers(1, 5, size=2))
    mode = str(rng.choice(["nearest", "linear"]))
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["a"], ["ar"]),
        helper.make_node("Conv", ["ar", "w2"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("ConvTranspose", ["c", "wt", "bt"], ["up"], strides=[2, 2], kernel_shape=[2, 2]),
        helper.make_node("Concat", ["up", "ar"], ["cat1"], axis=1),
        helper.make_node("Conv", ["cat1", "w3"], ["d"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Resize", ["d", "", "scales"], ["r"], mode=mode),
        helper.make_node("Concat", ["r", "ar"], ["cat2"], axis=1),
        helper.make_node("Sigmoid", ["cat2"], ["sg"]),
        helper.make_node("Conv", ["sg", "w4"], ["y"]),
    ]
    init = [
        const("w1", _w(rng, c1, 3, 3, 3)),
        const("b1", _w(rng, c1)),
        const("w2", _w(rng, c2, c1, 3, 3, scale=0.2)),
        const("wt", _w(rng, c2, ct, 2, 2)),
        const("bt", _w(rng, ct)),
        const("w3", _w(rng, c3, ct + c1, 3, 3, scale=0.2)),
        const("scales", [1, 1, 2, 2]),
        const("w4", _w(rng, 2, c3 + c1, 1, 1)),
    ]
    m = model(nodes, [vi("x", shape=["n", 3, h, w])], [vi("y")], init)
    return m, _image_feeds(rng, 3, h, w)


FAMILIES: dict[str, Callable[[np.random.Generator], Built]] = {
    "convnext": convnext,
    "squeeze_excite": squeeze_excite,
    "attention": attention,
    "recurrent": recurrent,
    "upsample_concat": upsample_concat,
}
SEEDS = range(6)


@pytest.fixture
def numpy_path() -> Iterator[Callable[[onnx.ModelProto, list[dict[str, np.ndarray]]], list[dict[str, np.ndarray]]]]:
    """Runs a model unoptimised on the NumPy path (the yardstick)."""

    def run(m: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        native.set_enabled(False)
        try:
            exe = compile_model(m, passes=[], tune=False)
            return [exe.run(dict(f)) for f in feeds]
        finally:
            native.set_enabled(None)

    yield run


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_compiled_kernels_match_numpy_at_odd_sizes(family: str, seed: int, numpy_path: Callable[..., Any]) -> None:
    rng = np.random.default_rng([seed, sorted(FAMILIES).index(family)])
    m, make_feeds = FAMILIES[family](rng)
    first, second = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    one, other = make_feeds(first), make_feeds(second)
    feeds = [one, one, other, one]
    want = numpy_path(m, feeds)
    threads = THREADS[seed % len(THREADS)]
    exe = compile_model(m, threads=threads, tune=False)
    for i, (f, expected) in enumerate(zip(feeds, want, strict=True)):
        got = exe.run(dict(f))
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            scale = max(float(np.abs(value).max()), 1.0) if value.size else 1.0
            np.testing.assert_allclose(
                got[name], value, rtol=2e-4, atol=2e-4 * scale, err_msg=f"{family} seed {seed}: run {i + 1}, {name}"
            )
