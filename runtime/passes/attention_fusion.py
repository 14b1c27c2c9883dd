"""Fuse scaled dot-product attention into one FusedAttention node (kernel: ``runtime/kernels/fused_attention.py``).

    # MatMul(Softmax(Add(Mul(MatMul(Q, Kt), s), M)), V) -> FusedAttention(Q, Kt, V, M, scale=s)
    #     the Mul (or Div by s, scale=1/s) and the Add are optional; Softmax over the last axis
    # Where(C, f, ...) in place of the Add -> FusedAttention(..., C, mask_select=1, mask_fill=f)   masked_fill
    # MatMul(Mul(Q, a), Mul(Kt, b)) inside it -> scale a*b       torch's scaled_dot_product_attention export
    #     (or Div(Q, a): scale 1/a, Q pre-scaled as Hugging Face's DistilBERT does)
    # FusedAttention(Transpose(X, p), ...) -> FusedAttention(X, ..., q_perm=p)               read in place
    # FusedAttention(Gather(X, i, axis=0), ...) -> FusedAttention(X, ..., q_index=i)         packed QKV slices
    #     (or Squeeze(Split(X, ones, axis=0)[i], [0]): torch's unbind)
    # Transpose(FusedAttention(...), p) -> FusedAttention(..., out_perm=p)                  heads merged on write

Guards: float32 throughout, every intermediate read only by the next node of the chain and not a graph output,
scale factors constant scalars. Any broadcast the unfused ops allow stays allowed: the kernel runs what its
compiled path cannot take (batch ranks above 2, a mask widening the scores) on NumPy, op by op. Reads rerouted
through Transposes and Gathers leave those nodes to dead-node elimination once nothing else reads them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import onnx

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, elem_type_of, is_float32, rebuild, remove_nodes, scalar_of, shape_of

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

_SLOTS = ("q", "k", "v")


def _plain(node: Node | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and not node.domain


def _last_axis_softmax(node: Node, graph: Graph) -> bool:
    shape = shape_of(graph, node.inputs[0])
    if shape is None or not shape:
        return False
    rank = len(shape)
    default = -1 if node.opset >= 13 else 1
    axis = int(node.attrs.get("axis", default))
    return axis % rank == rank - 1


def _factor_of(node: Node, index: GraphIndex) -> tuple[str, float] | None:
    """``(x, c)`` when ``node`` is ``Mul(x, c)``, ``Mul(c, x)`` or ``Div(x, 1/c)`` with ``c`` a constant scalar."""
    if len(node.inputs) != 2 or node.opset < 7 or node.domain:
        return None
    a, b = node.inputs
    if node.op_type == "Mul":
        for x, c in ((a, b), (b, a)):
            value = scalar_of(index.constant(c))
            if value is not None and index.constant(x) is None:
                return x, value
    if node.op_type == "Div":
        value = scalar_of(index.constant(b))
        if value is not None and value != 0.0 and index.constant(a) is None:
            return a, 1.0 / value
    return None


class _Match:
    """What one attention chain fuses: its operands, scale, mask and the nodes it replaces."""

    def __init__(self) -> None:
        self.scale = 1.0
        self.div: float | None = None
        self.mask = ""
        #: For a Where mask: (the condition value that keeps the score, the constant fill elsewhere).
        self.select: tuple[bool, float] | None = None
        self.q = self.kt = ""
        self.dead: list[Node] = []
        #: Nodes besides the chain allowed to read the raw scores (a Shape that only sizes the mask's Expand).
        self.side_readers: list[Node] = []


def _match_product(node: Node, index: GraphIndex, graph: Graph, m: _Match) -> bool:
    """``MatMul(Q, Kt)``, each operand possibly scaled by its own constant (scaled_dot_product_attention)."""
    operands = list(node.inputs)
    if len(operands) != 2 or operands[0] == operands[1] or not all(is_float32(graph, o) for o in operands):
        return False
    scale, dead = m.scale, [node]
    for which, name in enumerate(node.inputs):
        pre = index.producers.get(name)
        if pre is None or pre.op_type not in ("Mul", "Div") or m.div is not None:
            continue
        if index.sole_consumer(name) is not node:
            continue
        factor = _factor_of(pre, index)
        if factor is not None and is_float32(graph, factor[0]):
            operands[which] = factor[0]
            scale *= factor[1]
            dead.append(pre)
    m.q, m.kt = operands
    m.scale = scale
    m.dead += dead
    return True


def _read_only_by(name: str, reader: Node, index: GraphIndex, m: _Match) -> bool:
    """``reader`` reads ``name`` once and nothing else does (but the match's side readers); not a graph output."""
    readers = index.consumers.get(name, [])
    if name in index.outputs or reader.inputs.count(name) != 1 or any(True for _ in reader.subgraphs()):
        return False
    return sum(r is reader for r in readers) == 1 and all(r is reader or r in m.side_readers for r in readers)


def _unexpanded(cond: str, where: Node, scores: str, index: GraphIndex, graph: Graph) -> tuple[str, list[Node]]:
    """``[Cast](Expand(c, Shape(scores)))`` -> ``(c, [Cast, Expand, Shape])``: ``masked_fill`` expands its mask to
    the scores' shape, which the fused op broadcasts anyway; otherwise ``(cond, [])``."""
    dead: list[Node] = []
    name, user = cond, where
    node = index.producers.get(name)
    if _plain(node, "Cast") and node is not None and elem_type_of(graph, node.inputs[0]) == onnx.TensorProto.BOOL:
        if index.sole_consumer(name) is not user:
            return cond, []
        dead.append(node)
        name, user = node.inputs[0], node
        node = index.producers.get(name)
    if not _plain(node, "Expand") or node is None or index.sole_consumer(name) is not user:
        return cond, []
    sizer = index.producers.get(node.inputs[1])
    if not _plain(sizer, "Shape") or sizer is None or sizer.inputs[0] != scores or sizer.attributes:
        return cond, []
    if index.sole_consumer(node.inputs[1]) is not node:
        return cond, []
    return node.inputs[0], [*dead, node, sizer]


def _match_scores(name: str, reader: Node, index: GraphIndex, graph: Graph, m: _Match) -> bool:
    """Walk back from the Softmax input ``name``: [Add mask] <- [Mul/Div scale] <- MatMul(Q, Kt)."""
    node = index.producers.get(name)
    if node is None or node.domain or not _read_only_by(name, reader, index, m):
        return False
    scaled = m.scale != 1.0 or m.div is not None
    # the mask is added after the scale: an Add found behind the scale would be scaled too, which the op cannot say
    if node.op_type == "Add" and not m.mask and not scaled and len(node.inputs) == 2 and node.opset >= 7:
        for chain, mask in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            if chain == mask or not is_float32(graph, mask):
                continue
            m.mask = mask
            if _match_scores(chain, node, index, graph, m):
                m.dead.append(node)
                return True
            m.mask = ""
        return False
    if node.op_type == "Where" and not m.mask and not scaled and len(node.inputs) == 3 and node.opset >= 9:
        cond, yes, no = node.inputs
        if elem_type_of(graph, cond) != onnx.TensorProto.BOOL:
            return False
        for chain, fill, keep in ((no, yes, False), (yes, no, True)):
            value = scalar_of(index.constant(fill))
            if value is None or index.constant(chain) is not None:
                continue
            source, expansion = _unexpanded(cond, node, chain, index, graph)
            m.mask, m.select, m.side_readers = source, (keep, value), [n for n in expansion if n.op_type == "Shape"]
            if _match_scores(chain, node, index, graph, m):
                m.dead += [node, *expansion]
                return True
            m.mask, m.select, m.side_readers = "", None, []
        return False
    if node.op_type in ("Mul", "Div") and not scaled:
        factor = _factor_of(node, index)
        if factor is None:
            return False
        m.scale = factor[1]
        if node.op_type == "Div":
            m.div = 1.0 / factor[1]
        if _match_scores(factor[0], node, index, graph, m):
            m.dead.append(node)
            return True
        m.scale, m.div = 1.0, None
        return False
    if node.op_type == "MatMul":
        return _match_product(node, index, graph, m)
    return False


def _fuse_chain(softmax: Node, graph: Graph, index: GraphIndex) -> bool:
    if not _last_axis_softmax(softmax, graph) or not is_float32(graph, softmax.outputs[0]):
        return False
    probs = softmax.outputs[0]
    final = index.sole_consumer(probs)
    if not _plain(final, "MatMul") or final is None or final.inputs[0] != probs or final.inputs[1] == probs:
        return False
    v = final.inputs[1]
    if not is_float32(graph, v):
        return False
    m = _Match()
    if not _match_scores(softmax.inputs[0], softmax, index, graph, m):
        return False
    attrs: dict[str, Any] = {"scale": m.scale, "div": m.div}
    if m.select is not None:
        attrs.update(mask_select=1, mask_keep=int(m.select[0]), mask_fill=m.select[1])
    rebuild(graph, final, "FusedAttention", [m.q, m.kt, v, m.mask], final.outputs, attributes=attrs)
    remove_nodes(graph, [softmax, *m.dead])
    return True


# -- reading operands in place ---------------------------------------------------------------------------------
def _constant_index(node: Node, index: GraphIndex, graph: Graph) -> int | None:
    """The scalar index of ``Gather(data, i, axis=0)`` as a non-negative int; None when it is not that."""
    if int(node.attrs.get("axis", 0)) != 0 or len(node.inputs) != 2:
        return None
    value = index.constant(node.inputs[1])
    if value is None or value.ndim != 0 or value.dtype.kind not in "iu":
        return None
    i = int(value)
    if i < 0:
        shape = shape_of(graph, node.inputs[0])
        if shape is None or not shape or not isinstance(shape[0], int):
            return None
        i += shape[0]
    return i if i >= 0 else None


def _unbound(squeeze: Node, index: GraphIndex, graph: Graph) -> tuple[str, int] | None:
    """``Squeeze(Split(x, [1, 1, ...], axis=0)[i], axes=[0])`` (torch's ``unbind``) as ``(x, i)``: it is ``x[i]``."""
    axes = squeeze.attrs.get("axes") if squeeze.opset < 13 else None
    if squeeze.opset >= 13:
        const = index.constant(squeeze.inputs[1]) if len(squeeze.inputs) > 1 else None
        axes = None if const is None else [int(a) for a in const.reshape(-1)]
    split = index.producers.get(squeeze.inputs[0])
    if axes is None or split is None or split.op_type != "Split" or split.domain:
        return None
    shape = shape_of(graph, split.inputs[0])
    if shape is None or [int(a) % len(shape) for a in axes] != [0] or int(split.attrs.get("axis", 0)) % len(shape):
        return None
    if index.sole_consumer(squeeze.inputs[0]) is not squeeze:
        return None
    sizes = split.attrs.get("split") if split.opset < 13 else None
    if split.opset >= 13 and len(split.inputs) > 1 and split.inputs[1]:
        const = index.constant(split.inputs[1])
        sizes = None if const is None else [int(v) for v in const.reshape(-1)]
        if sizes is None:
            return None
    if sizes is None:  # an equal split: chunks of one when there are as many outputs as rows
        sizes = [1] * len(split.outputs) if shape[0] == len(split.outputs) else None
    if sizes is None or any(int(n) != 1 for n in sizes):
        return None
    return split.inputs[0], split.outputs.index(squeeze.inputs[0])


def _resolve_view(name: str, index: GraphIndex, graph: Graph) -> tuple[str, list[int] | None, int]:
    """``name`` as ``transpose(src, perm)[i]`` of the furthest source reachable through Transposes and
    Gather(axis=0, constant scalar): returns ``(src, perm, i)`` with ``i = -1`` for no indexing."""
    perm: list[int] | None = None
    idx = -1
    src = name
    while True:
        node = index.producers.get(src)
        if node is None or node.domain or src in index.inputs:
            break
        if node.op_type == "Transpose" and node.attrs.get("perm") is not None:
            p = [int(x) for x in node.attrs["perm"]]
            perm = p if perm is None else [p[j] for j in perm]
        elif node.op_type in ("Gather", "Squeeze") and idx < 0:
            picked = _constant_index(node, index, graph) if node.op_type == "Gather" else _unbound(node, index, graph)
            if picked is None:
                break
            source, i = (node.inputs[0], picked) if isinstance(picked, int) else picked
            shape = shape_of(graph, source)
            if shape is None:
                break
            inner = perm if perm is not None else list(range(len(shape) - 1))
            perm, idx = [0, *(j + 1 for j in inner)], i
            src = source
            continue
        else:
            break
        src = node.inputs[0]
    if perm is not None and perm == sorted(perm):
        perm = None
    return src, perm, idx


def _read_in_place(node: Node, graph: Graph, index: GraphIndex) -> bool:
    """Reroute the Q, K and V reads of a fresh FusedAttention through the views that produce them, and absorb a
    Transpose reading its output."""
    attrs: dict[str, Any] = {a.name: node.attrs[a.name] for a in node.attributes}
    inputs = list(node.inputs)
    outputs = list(node.outputs)
    changed = False
    for slot, name in zip(_SLOTS, inputs[:3], strict=True):
        if f"{slot}_perm" in attrs or f"{slot}_index" in attrs:
            continue
        src, perm, idx = _resolve_view(name, index, graph)
        if src == name:
            continue
        inputs[_SLOTS.index(slot)] = src
        if perm is not None:
            attrs[f"{slot}_perm"] = perm
        if idx >= 0:
            attrs[f"{slot}_index"] = idx
        changed = True
    nxt = index.sole_consumer(outputs[0])
    if "out_perm" not in attrs and _plain(nxt, "Transpose") and nxt is not None and nxt.attrs.get("perm") is not None:
        attrs["out_perm"] = [int(x) for x in nxt.attrs["perm"]]
        outputs = list(nxt.outputs)
        remove_nodes(graph, [nxt])
        changed = True
    if changed:
        rebuild(graph, node, "FusedAttention", inputs, outputs, attributes=attrs)
    return changed


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    fused: list[str] = []
    for node in list(graph.nodes):
        if _plain(node, "Softmax") and _fuse_chain(node, graph, index):
            fused.append(node.name)
            index.refresh()
    rewrites = len(fused)
    for node in list(graph.nodes):
        if node.op_type == "FusedAttention" and node.domain == "com.appopt" and _read_in_place(node, graph, index):
            index.refresh()
            rewrites += 1
    return rewrites


PASS = Pass(
    "attention_fusion",
    run,
    "before matmul_fusion: attention's MatMuls and their scale Mul must still be plain ops to be recognised; after "
    "gelu_fusion: no dependence, kept from the hand-written order",
    after=("gelu_fusion",),
    before=("matmul_fusion",),
)
