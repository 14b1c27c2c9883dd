"""Chains of view ops collapse to one Reshape, Transpose and Gather where that restates them exactly; chains that
merge dims out of source order, or read run-time values, stay."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.runtime.graphs import I64, const, model, vi
from tests.runtime.passes.conftest import compare, ops_of

rng = np.random.default_rng(11)
PASSES = ["view_chain", "dead_node_elimination"]
L, HEADS, D = 6, 2, 4
E = HEADS * D


def _mha_head_split(pick: int) -> onnx.ModelProto:
    """Q/K/V of ``nn.MultiheadAttention`` as torch exports it: ``[L, B, 3E]`` -> ``unflatten(-1, (3, E))
    .unsqueeze(0).transpose(0, -2).squeeze(-2)[pick]``, then ``view(L, B * H, D).transpose(0, 1)`` and
    ``view(B, H, L, D)`` (the batch-dependent elements already constants, as shape_values leaves them)."""
    nodes = [
        helper.make_node("Reshape", ["x", "unflatten"], ["r"]),
        helper.make_node("Unsqueeze", ["r", "zero_axis"], ["u"]),
        helper.make_node("Transpose", ["u"], ["t"], perm=[3, 1, 2, 0, 4]),
        helper.make_node("Squeeze", ["t", "three_axis"], ["s"]),
        helper.make_node("Gather", ["s", "pick"], ["g"], axis=0),
        helper.make_node("Reshape", ["g", "heads"], ["h"]),
        helper.make_node("Transpose", ["h"], ["ht"], perm=[1, 0, 2]),
        helper.make_node("Reshape", ["ht", "split"], ["q"]),
        helper.make_node("Relu", ["q"], ["y"]),  # a reader that is not a view
    ]
    inits = [
        const("unflatten", [L, 0, 3, E], np.int64),
        const("zero_axis", [0], np.int64),
        const("three_axis", [3], np.int64),
        const("pick", pick, np.int64),
        const("heads", [L, -1, D], np.int64),
        const("split", [-1, HEADS, L, D], np.int64),
    ]
    return model(nodes, [vi("x", shape=[L, "batch", 3 * E])], [vi("y", shape=["batch", HEADS, L, D])], inits)


def test_a_multihead_attention_head_split_becomes_reshape_transpose_gather() -> None:
    for pick in (0, 2):
        m = _mha_head_split(pick)
        for batch in (1, 3):
            x = rng.standard_normal((L, batch, 3 * E)).astype(np.float32)
            exe = compare(m, {"x": x}, passes=PASSES, exact=True)
            assert ops_of(exe) == ["Reshape", "Transpose", "Gather", "Relu"]
            expected = x.reshape(L, batch, 3, HEADS, D).transpose(2, 1, 3, 0, 4)[pick]
            np.testing.assert_array_equal(exe.run({"x": x})["y"], np.maximum(expected, 0))


def test_a_channel_shuffle_merging_dims_out_of_source_order_stays() -> None:
    nodes = [
        helper.make_node("Reshape", ["x", "grouped"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
        helper.make_node("Reshape", ["t", "flat"], ["s"]),
        helper.make_node("Relu", ["s"], ["y"]),
    ]
    inits = [const("grouped", [0, 2, 3, 4, 4], np.int64), const("flat", [0, 6, 4, 4], np.int64)]
    m = model(nodes, [vi("x", shape=["batch", 6, 4, 4])], [vi("y", shape=["batch", 6, 4, 4])], inits)
    exe = compare(m, {"x": rng.standard_normal((2, 6, 4, 4)).astype(np.float32)}, passes=PASSES, exact=True)
    assert ops_of(exe) == ["Reshape", "Transpose", "Reshape", "Relu"]


def test_chains_with_run_time_targets_or_indices_stay() -> None:
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
        helper.make_node("Gather", ["t", "i"], ["g"], axis=0),  # the index is a graph input
        helper.make_node("Unsqueeze", ["g", "zero_axis"], ["u"]),
        helper.make_node("Reshape", ["u", "s"], ["y"]),  # so is the target
    ]
    m = model(
        nodes,
        [vi("x", shape=[3, 4, 5]), vi("i", I64, []), vi("s", I64, [2])],
        [vi("y", shape=None)],
        [const("zero_axis", [0], np.int64)],
    )
    feeds = {
        "x": rng.standard_normal((3, 4, 5)).astype(np.float32),
        "i": np.array(1, dtype=np.int64),
        "s": np.array([5, 3], dtype=np.int64),
    }
    exe = compare(m, feeds, passes=PASSES, exact=True)
    assert ops_of(exe) == ["Transpose", "Gather", "Unsqueeze", "Reshape"]


def test_a_chain_that_is_already_short_is_left_as_written() -> None:
    """ViT's patch flattening: Reshape then Transpose is already the shortest form."""
    nodes = [
        helper.make_node("Reshape", ["x", "flat"], ["r"]),
        helper.make_node("Transpose", ["r"], ["y"], perm=[0, 2, 1]),
    ]
    m = model(nodes, [vi("x", shape=["batch", 8, 3, 3])], [vi("y", shape=["batch", 9, 8])], [
        const("flat", [0, 8, 9], np.int64)
    ])  # fmt: skip
    exe = compare(m, {"x": rng.standard_normal((2, 8, 3, 3)).astype(np.float32)}, passes=PASSES, exact=True)
    assert ops_of(exe) == ["Reshape", "Transpose"]
    assert exe.stats["passes"]["view_chain"] == 0


def _random_chain(rng: np.random.Generator) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """A random chain of 2-5 view ops on a small static tensor, and what NumPy says it computes."""
    shape = [int(d) for d in rng.choice([1, 2, 3, 4, 6], size=int(rng.integers(2, 4)))]
    x = rng.standard_normal(shape).astype(np.float32)
    nodes, inits, cur, ref = [], [], "x", x
    for k in range(int(rng.integers(2, 6))):
        op, out = str(rng.choice(["Transpose", "Reshape", "Unsqueeze", "Squeeze", "Gather"])), f"v{k}"
        if op == "Transpose" and ref.ndim:
            perm = [int(p) for p in rng.permutation(ref.ndim)]
            nodes.append(helper.make_node("Transpose", [cur], [out], perm=perm))
            ref = ref.transpose(perm)
        elif op in ("Reshape", "Transpose"):
            size, groups = ref.size, []
            for f in (2, 3):
                while size % f == 0:
                    size //= f
                    if groups and rng.random() < 0.5:
                        groups[-1] *= f
                    else:
                        groups.append(f)
            groups = [int(g) for g in rng.permutation(groups)] or [1]
            if rng.random() < 0.3:
                groups.insert(int(rng.integers(0, len(groups) + 1)), 1)
            if rng.random() < 0.4:
                groups[int(rng.integers(0, len(groups)))] = -1
            inits.append(const(f"s{k}", groups, np.int64))
            nodes.append(helper.make_node("Reshape", [cur, f"s{k}"], [out]))
            ref = ref.reshape(groups)
        elif op == "Unsqueeze":
            axis = int(rng.integers(0, ref.ndim + 1))
            inits.append(const(f"a{k}", [axis], np.int64))
            nodes.append(helper.make_node("Unsqueeze", [cur, f"a{k}"], [out]))
            ref = np.expand_dims(ref, axis)
        elif op == "Squeeze" and 1 in ref.shape:
            axis = ref.shape.index(1)
            inits.append(const(f"a{k}", [axis], np.int64))
            nodes.append(helper.make_node("Squeeze", [cur, f"a{k}"], [out]))
            ref = np.squeeze(ref, axis)
        elif op == "Gather" and ref.ndim:
            axis = int(rng.integers(0, ref.ndim))
            i = int(rng.integers(-ref.shape[axis], ref.shape[axis]))
            inits.append(const(f"i{k}", i, np.int64))
            nodes.append(helper.make_node("Gather", [cur, f"i{k}"], [out], axis=axis))
            ref = np.take(ref, i, axis=axis)
        else:
            continue
        cur = out
    nodes.append(helper.make_node("Relu", [cur], ["y"]))
    return model(nodes, [vi("x", shape=shape)], [vi("y", shape=None)], inits), x, np.maximum(ref, 0)


def test_random_view_chains_keep_their_values() -> None:
    """Seeded random chains: whatever the pass restates gives NumPy's result bit for bit (about 40% are)."""
    from runtime import compile_model

    chain_rng = np.random.default_rng(0)
    rewritten = 0
    for _ in range(60):
        m, x, expected = _random_chain(chain_rng)
        exe = compile_model(m, passes=PASSES)
        rewritten += exe.stats["passes"]["view_chain"] > 0
        np.testing.assert_array_equal(exe.run({"x": x})["y"], expected)
    assert rewritten >= 10
