"""ONNX mutation fuzzing: small valid models, mutated, compiled and run in a watched worker process.

Each example takes one seed model, applies one to three mutations (attributes set to extreme values, input shapes,
dtypes, opsets, initializers, external-data fields, op types, wiring, a compiled artifact's manifest, byte flips
and truncation) and runs it the way ``appopt run-model F --random`` does, twice (the second run replays the static
plan). The outcome is one of:

``ok``          compiled and ran
``refused``     the runtime's own error (``RuntimeModelError``), one line
``bad-message`` the runtime's own error, but over several lines or very long
``traceback``   any other exception: a foreign traceback
``crash``       the worker died from a signal (segfault, abort)
``hang``        no answer within the per-example timeout (the worker is killed)

Only ``ok`` and ``refused`` are acceptable. The worker is one long-lived process (restarted after a crash or hang),
so thousands of examples take minutes. Larger runs: ``python -m tests.fuzz onnx --examples 5000``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import select
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUTCOMES = ("ok", "refused", "bad-message", "traceback", "crash", "hang")
ACCEPTABLE = frozenset({"ok", "refused"})
#: Seconds one example may take before it counts as a hang.
EXAMPLE_TIMEOUT = 10.0
#: Address-space cap of the worker: an example that needs more fails with MemoryError (a traceback) instead of
#: taking the machine.
WORKER_MEMORY_BYTES = 6 << 30

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
EXTREME_INTS = [0, 1, -1, 2, 3, -2, 7, 255, 2**31 - 1, 2**31, -(2**31), 2**32 + 1, 2**62, 2**63 - 1, -(2**63), 10**9]
EXTREME_FLOATS = [0.0, -0.0, 1e-45, 1e38, 3.4e38, -3.4e38, float("inf"), float("-inf"), float("nan"), 1e300]
ATTR_NAMES = [
    "axis", "axes", "keepdims", "perm", "pads", "strides", "kernel_shape", "dilations", "group", "allowzero",
    "ceil_mode", "to", "mode", "largest", "sorted", "transA", "transB", "alpha", "beta", "epsilon", "auto_pad",
    "count_include_pad", "storage_order", "select_last_index", "noop_with_empty_axes", "split", "k", "value",
]  # fmt: skip
OP_TYPES = [
    "MaxPool", "AveragePool", "Conv", "ConvTranspose", "Reshape", "Squeeze", "Unsqueeze", "Expand", "Tile", "Slice",
    "ConstantOfShape", "Range", "TopK", "ReduceSum", "ReduceMax", "ArgMax", "Gemm", "MatMul", "Softmax", "Gather",
    "Concat", "Split", "Pad", "Resize", "Transpose", "Cast", "Relu", "Add", "If", "Loop", "LpPool", "OneHot",
    "NonZero", "Einsum", "LSTM", "Flatten", "DepthToSpace", "SpaceToDepth", "GlobalMaxPool", "Col2Im", "Trilu",
    "Mul", "Where", "CumSum", "ScatterND", "GatherND", "Compress", "Unique", "NotAnOp", "",
]  # fmt: skip


# -- seed models -------------------------------------------------------------------------------------------------
def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[str],
    inits: list[onnx.TensorProto] = (),  # type: ignore[assignment]
    opset: int = 17,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "seed", inputs, [helper.make_empty_tensor_value_info(o) for o in outputs], list(inits)
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _vi(name: str, elem: int, shape: list[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _c(name: str, value: Any, dtype: Any = np.float32) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def seed_models() -> dict[str, onnx.ModelProto]:
    """Small valid models covering the op families the probes hit (pools, Conv, shape-from-input ops...)."""
    x4 = _vi("x", F, [1, 2, 6, 6])
    n = helper.make_node
    seeds = {
        "maxpool": _model([n("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])],
                          [x4], ["y"]),
        "avgpool": _model([n("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=1, count_include_pad=1)],
                          [x4], ["y"]),
        "lppool": _model([n("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=2)], [x4], ["y"]),
        "conv": _model([n("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
                        n("Relu", ["c"], ["y"])],
                       [x4], ["y"], [_c("w", np.ones((4, 2, 3, 3)) / 9), _c("b", np.zeros(4))]),
        "convtranspose": _model([n("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])], [x4], ["y"],
                                [_c("w", np.ones((2, 3, 2, 2)))]),
        "reshape_input": _model([n("Reshape", ["x", "s"], ["r"]), n("Relu", ["r"], ["y"])],
                                [_vi("x", F, [2, 8]), _vi("s", I64, [2])], ["y"]),
        "squeeze_axes": _model([n("Unsqueeze", ["x", "a"], ["u"]), n("Squeeze", ["u", "a"], ["y"])],
                               [_vi("x", F, [3, 4]), _vi("a", I64, [1])], ["y"]),
        "reduce": _model([n("ReduceSum", ["x", "axes"], ["s"], keepdims=1), n("ArgMax", ["s"], ["y"], axis=1)],
                         [_vi("x", F, [2, 3, 4])], ["y"], [_c("axes", [2], np.int64)]),
        "gemm": _model([n("Gemm", ["a", "w", "c"], ["y"], transB=1, alpha=1.0)], [_vi("a", F, [2, 3])], ["y"],
                       [_c("w", np.ones((4, 3))), _c("c", np.zeros(4))]),
        "slice": _model([n("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], [_vi("x", F, [6, 8])], ["y"],
                        [_c("st", [1], np.int64), _c("en", [5], np.int64), _c("ax", [1], np.int64),
                         _c("sp", [2], np.int64)]),
        "topk": _model([n("TopK", ["x", "k"], ["v", "i"], axis=-1)], [_vi("x", F, [3, 10])], ["v", "i"],
                       [_c("k", [4], np.int64)]),
        "softmax_matmul": _model([n("MatMul", ["x", "w"], ["m"]), n("Softmax", ["m"], ["y"], axis=-1)],
                                 [_vi("x", F, [2, 4])], ["y"], [_c("w", np.ones((4, 5)))]),
        "expand_tile": _model([n("Expand", ["x", "s"], ["e"]), n("Tile", ["e", "r"], ["y"])],
                              [_vi("x", F, [1, 3])], ["y"], [_c("s", [2, 3], np.int64), _c("r", [2, 1], np.int64)]),
        "concat_gather_split": _model(
            [n("Concat", ["x", "x"], ["c"], axis=0), n("Gather", ["c", "i"], ["g"], axis=1),
             n("Split", ["g"], ["y", "z"], axis=0, num_outputs=2)],
            [_vi("x", F, [2, 5])], ["y", "z"], [_c("i", [0, 4, 2], np.int64)], opset=18),
        "resize": _model([n("Resize", ["x", "", "sc"], ["y"], mode="linear")], [x4], ["y"],
                         [_c("sc", [1, 1, 2, 1.5])]),
        "pad_cast": _model([n("Pad", ["x", "p"], ["q"], mode="reflect"), n("Cast", ["q"], ["y"], to=TensorProto.INT32)],
                           [_vi("x", F, [3, 4])], ["y"], [_c("p", [1, 1, 1, 1], np.int64)]),
        "const_of_shape": _model(
            [n("ConstantOfShape", ["s"], ["y"], value=helper.make_tensor("v", F, [1], [2.0]))],
            [_vi("s", I64, [2])], ["y"]),
        "range_onehot": _model([n("Range", ["a", "b", "d"], ["r"]), n("OneHot", ["r", "depth", "vals"], ["y"])],
                               [_vi("a", I64, []), _vi("b", I64, [])], ["y"],
                               [_c("d", 1, np.int64), _c("depth", 5, np.int64), _c("vals", [0, 1])]),
        "if": _model(
            [n("If", ["c"], ["y"],
               then_branch=helper.make_graph([n("Relu", ["x"], ["t"])], "then", [], [_vi("t", F, [2, 3])]),
               else_branch=helper.make_graph([n("Neg", ["x"], ["e"])], "else", [], [_vi("e", F, [2, 3])]))],
            [_vi("c", B, []), _vi("x", F, [2, 3])], ["y"]),
        "layernorm_where": _model(
            [n("LayerNormalization", ["x", "g", "b"], ["l"], axis=-1, epsilon=1e-5),
             n("Greater", ["l", "z"], ["m"]), n("Where", ["m", "l", "z"], ["y"])],
            [_vi("x", F, [2, 4])], ["y"], [_c("g", np.ones(4)), _c("b", np.zeros(4)), _c("z", 0.0)]),
        "lstm": _model([n("LSTM", ["x", "w", "r"], ["y"], hidden_size=2)], [_vi("x", F, [3, 1, 2])], ["y"],
                       [_c("w", np.full((1, 8, 2), 0.1)), _c("r", np.full((1, 8, 2), 0.1))]),
        "depth_to_space": _model([n("DepthToSpace", ["x"], ["y"], blocksize=2)], [_vi("x", F, [1, 4, 2, 3])], ["y"]),
        "loop": _model(
            [n("Loop", ["m", "", "x"], ["y"],
               body=helper.make_graph([n("Identity", ["c"], ["c_out"]), n("Add", ["s", "one"], ["s_out"])], "body",
                                      [_vi("i", I64, []), _vi("c", B, []), _vi("s", F, [2])],
                                      [_vi("c_out", B, []), _vi("s_out", F, [2])],
                                      [_c("one", [1.0, 1.0])]))],
            [_vi("x", F, [2])], ["y"], [_c("m", 3, np.int64)]),
        "maxunpool": _model([n("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
                             n("MaxUnpool", ["p", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
                            [x4], ["y"]),
        "cumsum_scatter": _model([n("CumSum", ["x", "ax"], ["c"]), n("ScatterND", ["c", "idx", "upd"], ["y"])],
                                 [_vi("x", F, [4, 3])], ["y"],
                                 [_c("ax", 1, np.int64), _c("idx", [[1], [3]], np.int64), _c("upd", np.ones((2, 3)))]),
        "nonzero_unique": _model([n("NonZero", ["x"], ["nz"]), n("Unique", ["nz"], ["y"], sorted=1)],
                                 [_vi("x", F, [3, 4])], ["y"], opset=17),
        "einsum_trilu": _model([n("Einsum", ["x", "x"], ["e"], equation="ij,kj->ik"), n("Trilu", ["e", "k"], ["y"])],
                               [_vi("x", F, [3, 4])], ["y"], [_c("k", 0, np.int64)]),
    }  # fmt: skip
    return seeds


#: Seeds whose first initializer is stored as external data (the mutations then reach the external-data fields).
EXTERNAL_SEEDS = ("conv", "gemm", "softmax_matmul")


# -- mutations ---------------------------------------------------------------------------------------------------
def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    nodes = list(graph.node)
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                nodes.extend(_all_nodes(attr.g))
    return nodes


def _int(rng: random.Random) -> int:
    return rng.choice(EXTREME_INTS) if rng.random() < 0.7 else rng.randint(-10, 10)


def _ints(rng: random.Random) -> list[int]:
    return [_int(rng) for _ in range(rng.choice([0, 1, 2, 3, 4, 8]))]


def _set_attr_value(attr: onnx.AttributeProto, rng: random.Random) -> None:
    A = onnx.AttributeProto
    if attr.type == A.INT:
        attr.i = _int(rng)
    elif attr.type == A.INTS:
        del attr.ints[:]
        attr.ints.extend(_ints(rng))
    elif attr.type == A.FLOAT:
        attr.f = rng.choice(EXTREME_FLOATS)
    elif attr.type == A.FLOATS:
        del attr.floats[:]
        attr.floats.extend(rng.choice(EXTREME_FLOATS) for _ in range(rng.randint(0, 4)))
    elif attr.type == A.STRING:
        attr.s = rng.choice([b"", b"SAME_UPPER", b"nearest", b"\xff\xfe", b"x" * 5000, b"NOTSET\x00", b"cubic"])
    elif attr.type == A.TENSOR:
        attr.t.dims[:] = _ints(rng)[:3]
    else:
        attr.type = rng.choice([A.INT, A.FLOAT, A.STRING, A.INTS])


def mutate_attribute(model: onnx.ModelProto, rng: random.Random) -> None:
    nodes = [node for node in _all_nodes(model.graph) if node.attribute]
    if not nodes:
        return mutate_add_attribute(model, rng)
    attr = rng.choice(list(rng.choice(nodes).attribute))
    _set_attr_value(attr, rng)


def mutate_add_attribute(model: onnx.ModelProto, rng: random.Random) -> None:
    node = rng.choice(_all_nodes(model.graph))
    name = rng.choice(ATTR_NAMES)
    if any(a.name == name for a in node.attribute):
        return
    kind = rng.random()
    if kind < 0.4:
        value: Any = _int(rng)
    elif kind < 0.8:
        value = _ints(rng) or [0]
    elif kind < 0.9:
        value = rng.choice(EXTREME_FLOATS)
    else:
        value = rng.choice(["SAME_LOWER", "VALID", "bogus", ""])
    node.attribute.append(helper.make_attribute(name, value))


def mutate_remove_attribute(model: onnx.ModelProto, rng: random.Random) -> None:
    nodes = [node for node in _all_nodes(model.graph) if node.attribute]
    if nodes:
        node = rng.choice(nodes)
        del node.attribute[rng.randrange(len(node.attribute))]


def _dims_of(vi: onnx.ValueInfoProto) -> Any:
    return vi.type.tensor_type.shape.dim


def mutate_input_shape(model: onnx.ModelProto, rng: random.Random) -> None:
    values = list(model.graph.input) + list(model.graph.output)
    vi = rng.choice(values)
    dims = _dims_of(vi)
    choice = rng.random()
    if choice < 0.5 and len(dims):
        dim = dims[rng.randrange(len(dims))]
        if rng.random() < 0.2:
            dim.dim_param = rng.choice(["n", "", "batch size", "x" * 300])
        else:
            dim.dim_value = rng.choice([0, 1, 2, 5, 2**31, 2**31 - 1, 2**40, 2**62, 2**63 - 1, -1, -(2**63)])
    elif choice < 0.75:
        dims.add().dim_value = rng.choice([1, 2, 0, 2**31])
    elif choice < 0.9 and len(dims):
        del dims[rng.randrange(len(dims))]
    else:
        vi.type.tensor_type.ClearField("shape")


def mutate_dtype(model: onnx.ModelProto, rng: random.Random) -> None:
    new = rng.choice([0, 1, 2, 3, 6, 7, 9, 10, 11, 16, 17, 19, 21, 23, 25, 26, 99, -1])
    targets: list[Any] = list(model.graph.input) + list(model.graph.output) + list(model.graph.initializer)
    target = rng.choice(targets)
    if isinstance(target, onnx.TensorProto):
        target.data_type = new
    else:
        target.type.tensor_type.elem_type = new


def mutate_initializer(model: onnx.ModelProto, rng: random.Random) -> None:
    if not model.graph.initializer:
        return mutate_dtype(model, rng)
    t = rng.choice(list(model.graph.initializer))
    choice = rng.random()
    if choice < 0.35:
        t.dims[:] = [rng.choice([0, 1, 2, 3, 4, 2**31, 2**40, -1, -5]) for _ in range(rng.randint(0, 4))]
    elif choice < 0.6 and t.raw_data:
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)]
    elif choice < 0.8:
        t.raw_data = b""
        t.float_data.extend([1.0] * rng.randint(0, 3))
    else:
        t.raw_data = os.urandom(rng.randint(0, 64))


def mutate_initializer_values(model: onnx.ModelProto, rng: random.Random) -> None:
    """Set an integer initializer (a shape, axes, k, pads, a trip count...) to extreme values of its own shape."""
    ints = [t for t in model.graph.initializer if t.data_type in (TensorProto.INT64, TensorProto.INT32)]
    if not ints:
        return mutate_initializer(model, rng)
    t = rng.choice(ints)
    shape = [int(d) for d in t.dims]
    if any(d < 0 for d in shape) or math.prod(shape) > 64:
        return mutate_initializer(model, rng)  # an earlier mutation made it unreadable: damage it another way
    dtype = np.int64 if t.data_type == TensorProto.INT64 else np.int32
    info = np.iinfo(dtype)
    values = [min(max(_int(rng), info.min), info.max) for _ in range(math.prod(shape))]
    t.CopyFrom(numpy_helper.from_array(np.array(values, dtype=dtype).reshape(shape), t.name))


def mutate_opset(model: onnx.ModelProto, rng: random.Random) -> None:
    choice = rng.random()
    if choice < 0.6:
        model.opset_import[0].version = rng.choice([0, 1, 5, 6, 7, 11, 13, 18, 21, 22, 23, 24, 25, 30, 99, 2**31, -1])
    elif choice < 0.8:
        model.opset_import.add(domain=rng.choice(["", "ai.onnx", "com.microsoft", "x" * 100]), version=_int(rng))
    else:
        model.ir_version = rng.choice([0, 1, 3, 7, 10, 11, 12, 99, -1, 2**62])


def mutate_op_type(model: onnx.ModelProto, rng: random.Random) -> None:
    node = rng.choice(_all_nodes(model.graph))
    if rng.random() < 0.7:
        node.op_type = rng.choice(OP_TYPES)
    elif node.op_type:
        i = rng.randrange(len(node.op_type))
        node.op_type = node.op_type[:i] + chr(rng.randint(32, 126)) + node.op_type[i + 1 :]
    if rng.random() < 0.1:
        node.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "bogus", "com.appopt"])


def mutate_wiring(model: onnx.ModelProto, rng: random.Random) -> None:
    node = rng.choice(list(model.graph.node))
    names = [i.name for i in model.graph.input] + [t.name for t in model.graph.initializer]
    names += [o for nd in model.graph.node for o in nd.output] + ["", "missing", "\x00"]
    choice = rng.random()
    if choice < 0.4 and node.input:
        node.input[rng.randrange(len(node.input))] = rng.choice(names)
    elif choice < 0.6:
        node.input.append(rng.choice(names))
    elif choice < 0.8 and node.output:
        node.output[rng.randrange(len(node.output))] = rng.choice(names)
    elif node.input:
        del node.input[-1]


def mutate_external(model: onnx.ModelProto, rng: random.Random) -> None:
    """Set or corrupt the external-data fields of an initializer (location, offset, length, checksum)."""
    tensors = list(model.graph.initializer)
    if not tensors:
        return
    t = rng.choice(tensors)
    t.data_location = TensorProto.EXTERNAL
    entries = {e.key: e for e in t.external_data}
    key = rng.choice(["location", "offset", "length", "checksum", "basepath"])
    value = rng.choice(
        ["abc", "", "-1", "0", "1e9", "99999999999999999999", " 4", "0x10", "weights.bin", "../weights.bin",
         "a\x00b", "/etc/passwd", "sub/../weights.bin", "x" * 5000, "ø", "C:\\w", "-0", "4 ", "nan"]
    )  # fmt: skip
    if key in entries:
        entries[key].value = value
    else:
        t.external_data.add(key=key, value=value)


def mutate_graph_io(model: onnx.ModelProto, rng: random.Random) -> None:
    choice = rng.random()
    if choice < 0.3 and model.graph.output:
        del model.graph.output[rng.randrange(len(model.graph.output))]
    elif choice < 0.6 and model.graph.input:
        model.graph.input.append(model.graph.input[rng.randrange(len(model.graph.input))])
    elif model.graph.node:
        i, j = rng.randrange(len(model.graph.node)), rng.randrange(len(model.graph.node))
        a, b = onnx.NodeProto(), onnx.NodeProto()
        a.CopyFrom(model.graph.node[i])
        b.CopyFrom(model.graph.node[j])
        model.graph.node[i].CopyFrom(b)
        model.graph.node[j].CopyFrom(a)


PROTO_MUTATIONS: list[Callable[[onnx.ModelProto, random.Random], None]] = [
    mutate_attribute,
    mutate_attribute,
    mutate_attribute,
    mutate_add_attribute,
    mutate_remove_attribute,
    mutate_input_shape,
    mutate_input_shape,
    mutate_dtype,
    mutate_initializer,
    mutate_initializer_values,
    mutate_initializer_values,
    mutate_opset,
    mutate_op_type,
    mutate_wiring,
    mutate_external,
    mutate_graph_io,
]


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """Flip, insert or drop a few bytes, or truncate."""
    buf = bytearray(data)
    choice = rng.random()
    if choice < 0.2 and buf:
        return bytes(buf[: rng.randrange(len(buf))])
    for _ in range(rng.randint(1, 4)):
        if not buf:
            break
        i = rng.randrange(len(buf))
        kind = rng.random()
        if kind < 0.6:
            buf[i] ^= 1 << rng.randrange(8)
        elif kind < 0.8:
            buf[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80])
        else:
            buf.insert(i, rng.randrange(256))
    return bytes(buf)


def mutate_manifest(manifest: dict[str, Any], rng: random.Random) -> Any:
    """A compiled artifact's manifest with one field given a wrong type or value (or replaced whole)."""
    if rng.random() < 0.1:
        return rng.choice([[], "x", 3, None, {"format": "appopt-compiled-model"}])
    key = rng.choice([*manifest, "node_opsets", "model_sha256", "format_version", "runtime_version"])
    manifest[key] = rng.choice(
        [None, "abc", -1, 2**70, 1.5, [], {}, [1, "a"], {"n": "x"}, {"Conv_0": 99}, float("nan"), True, "0.0.0"]
    )
    return manifest


@dataclass
class Example:
    """One mutated model: where it came from and what to run (a model file, or an artifact directory)."""

    seed: str
    mutations: list[str]
    model_bytes: bytes
    external: bool = False
    artifact: bool = False
    manifest_mutation: int | None = None


def _to_external(t: onnx.TensorProto) -> None:
    """Point ``t`` at ``weights.bin`` (the float32 ramp ``write_example`` writes) instead of inline data."""
    nbytes = len(numpy_helper.to_array(t).tobytes())
    t.ClearField("raw_data")
    t.ClearField("float_data")
    t.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(min(nbytes, 256)))):
        t.external_data.add(key=key, value=value)


def make_example(rng: random.Random, seeds: dict[str, onnx.ModelProto] | None = None) -> Example:
    """Draw one example: a seed, one to three mutations, maybe byte-level damage."""
    seeds = seeds or seed_models()
    name = rng.choice(sorted(seeds))
    model = onnx.ModelProto()
    model.CopyFrom(seeds[name])
    external = name in EXTERNAL_SEEDS and rng.random() < 0.3
    if external:
        _to_external(model.graph.initializer[0])
    applied = []
    for _ in range(rng.choices([1, 2, 3], weights=[6, 3, 1])[0]):
        mutation = rng.choice(PROTO_MUTATIONS)
        mutation(model, rng)
        applied.append(mutation.__name__)
    data = model.SerializeToString()
    if rng.random() < 0.15:
        data = mutate_bytes(data, rng)
        applied.append("mutate_bytes")
    artifact = rng.random() < 0.15
    manifest_mutation = rng.randrange(2**31) if artifact and rng.random() < 0.5 else None
    return Example(name, applied, data, external, artifact, manifest_mutation)


def write_example(example: Example, directory: Path) -> Path:
    """Write the example's files under ``directory``; returns the model path the worker should load."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "model.onnx"
    path.write_bytes(example.model_bytes)
    (directory / "weights.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    return path


# -- the worker ------------------------------------------------------------------------------------------------------
def _classify(exc: BaseException) -> tuple[str, str]:
    from runtime.errors import RuntimeModelError

    message = str(exc)
    if isinstance(exc, RuntimeModelError):
        if "\n" in message or len(message) > 1000:
            return "bad-message", message[:300]
        if message.startswith("internal error"):  # the runtime's safety net caught what no check foresaw
            cause = exc.__cause__
            where = ""
            if cause is not None and cause.__traceback__ is not None:
                import traceback

                frame = traceback.extract_tb(cause.__traceback__)[-1]
                where = f" at {frame.filename}:{frame.lineno}"
            return "traceback", message[:300] + where
        return "refused", message[:300]
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return "traceback", f"{type(exc).__name__}: {message[:200]} at {where}"


def run_one(path: str, artifact: bool, manifest_mutation: int | None) -> tuple[str, str]:
    """What ``appopt run-model --random`` (twice) does with ``path``, classified."""
    from runtime.tools import compile_to_dir, run_model

    try:
        target = path
        if artifact:
            out = str(Path(path).parent / "compiled")
            compile_to_dir(path, out)
            if manifest_mutation is not None:
                manifest_path = Path(out) / "manifest.json"
                manifest = json.loads(manifest_path.read_text())
                mutated = mutate_manifest(manifest, random.Random(manifest_mutation))
                manifest_path.write_text(json.dumps(mutated))
            target = out
        run_model(target, random=True, repeat=2, threads=1)
    except Exception as exc:
        return _classify(exc)
    return "ok", ""


def worker_main() -> None:
    """Read ``{"path", "artifact", "manifest"}`` lines on stdin, answer ``{"outcome", "detail"}`` lines."""
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    import warnings

    warnings.simplefilter("ignore")
    import runtime.tools  # noqa: F401  (import once, before the first timed example)

    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        outcome, detail = run_one(request["path"], request["artifact"], request["manifest"])
        print(json.dumps({"outcome": outcome, "detail": detail}), flush=True)


WORKER_CODE = "from tests.fuzz.onnx_models import worker_main; worker_main()"


class Worker:
    """A long-lived worker process; restarted after a crash or a hang."""

    def __init__(
        self, timeout: float = EXAMPLE_TIMEOUT, code: str = WORKER_CODE, env: dict[str, str] | None = None
    ) -> None:
        self.timeout = timeout
        self.code = code
        self.extra_env = dict(env or {})
        self.proc: subprocess.Popen[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        root = Path(__file__).resolve().parents[2]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        env.setdefault("OMP_NUM_THREADS", "1")
        env.update(self.extra_env)
        proc = subprocess.Popen(
            [sys.executable, "-c", self.code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file(),
            text=True,
            cwd=root,
            env=env,
        )
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        if not ready or "ready" not in proc.stdout.readline():
            proc.kill()
            raise RuntimeError("the fuzz worker did not start")
        return proc

    def _stderr_file(self) -> Any:
        """The worker's stderr goes to a scratch file: a crash's last words (a glibc or C++ abort message)."""
        if getattr(self, "stderr", None) is not None:
            self.stderr.close()
        self.stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115  (open for the worker's lifetime)
        return self.stderr

    def _last_words(self) -> str:
        stream = getattr(self, "stderr", None)
        if stream is None:
            return ""
        stream.seek(0)
        lines = [line.strip() for line in stream.read().splitlines() if line.strip()]
        return f": {lines[-1][:200]}" if lines else ""

    def run(self, path: Path, artifact: bool, manifest: int | None) -> tuple[str, str]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps({"path": str(path), "artifact": artifact, "manifest": manifest}) + "\n")
            proc.stdin.flush()
        except BrokenPipeError:
            return self._died()
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
        if not ready:
            self.close()
            return "hang", f"no answer in {self.timeout:.0f} s"
        line = proc.stdout.readline()
        if not line:
            return self._died()
        answer = json.loads(line)
        return answer["outcome"], answer["detail"]

    def _died(self) -> tuple[str, str]:
        assert self.proc is not None
        code = self.proc.wait()
        self.proc = None
        return "crash", f"worker exited with {code}" + (f" (signal {-code})" if code < 0 else "") + self._last_words()

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@dataclass
class Report:
    counts: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[str, Example, str]] = field(default_factory=list)


@contextlib.contextmanager
def worker() -> Iterator[Worker]:
    w = Worker()
    try:
        yield w
    finally:
        w.close()


def check_example(w: Worker, example: Example, scratch: Path) -> tuple[str, str]:
    path = write_example(example, scratch)
    return w.run(path, example.artifact, example.manifest_mutation)


def fuzz(examples: int, seed: int = 0, keep: Path | None = None, progress: bool = True) -> Report:
    """Run ``examples`` mutated models; failing ones are saved under ``keep`` (model plus a JSON description)."""
    report = Report()
    seeds = seed_models()
    started = time.monotonic()
    with worker() as w, tempfile.TemporaryDirectory(prefix="appopt-fuzz-") as tmp:
        for i in range(examples):
            example = make_example(random.Random(seed * 1_000_003 + i), seeds)
            scratch = Path(tmp) / f"e{i % 4}"
            outcome, detail = check_example(w, example, scratch)
            report.counts[outcome] += 1
            if outcome not in ACCEPTABLE:
                w.close()  # a fresh worker for the next example: no failure carries its state into the next
                report.failures.append((outcome, example, detail))
                if keep is not None:
                    where = keep / f"{i:06d}-{outcome}"
                    write_example(example, where)
                    info = {
                        "index": i,
                        "seed": seed,
                        "example_seed": example.seed,
                        "mutations": example.mutations,
                        "artifact": example.artifact,
                        "manifest": example.manifest_mutation,
                        "detail": detail,
                    }
                    (where / "example.json").write_text(json.dumps(info, indent=2) + "\n")
            if progress and (i + 1) % 250 == 0:
                rate = (i + 1) / (time.monotonic() - started)
                print(f"  {i + 1}/{examples} ({rate:.1f}/s) {dict(report.counts)}", file=sys.stderr, flush=True)
    return report


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tests.fuzz onnx", description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, default=None, help="save failing examples here")
    args = parser.parse_args(argv)
    report = fuzz(args.examples, args.seed, args.keep)
    total = sum(report.counts.values())
    print(f"onnx fuzz: {total} examples, seed {args.seed}")
    for outcome in OUTCOMES:
        print(f"  {outcome:12s} {report.counts.get(outcome, 0)}")
    for outcome, example, detail in report.failures[:30]:
        print(f"  {outcome}: seed model {example.seed!r} after {', '.join(example.mutations)}: {detail}")
    return 0 if not report.failures else 1
