"""Collapse a chain of view ops (Reshape, Transpose, Squeeze, Unsqueeze, Gather of one index) into the shortest
equivalent form: at most one Reshape of the source, one Transpose and one Gather.

    # V_n(...V_1(S)) -> Gather(Transpose(Reshape(S, A), P), i, axis=0)     (each part only where needed)

Exporters split heads through long chains: ``nn.MultiheadAttention`` writes each of Q, K and V as Reshape ->
Unsqueeze -> Transpose -> Squeeze -> Gather -> Reshape -> Transpose -> Reshape, where every Reshape of a transposed
tensor is a copy. Collapsed, a head split is a free Reshape of the projection's output, a Transpose and a Gather,
which the attention fusion then reads in place (the form torch writes for a packed-QKV ``permute``).

The chain is followed as *atoms*: the source's dims, split where a Reshape splits them. The collapse applies only
when every output axis is a run of atoms consecutive in the source (then one Reshape names them and one Transpose
orders them) and at most one Gather picks a single atom. A dim only known as a symbol (the batch) is never split;
it may stand alone or be matched by a Reshape's 0 or -1. Anything else — a merge of atoms out of source order, a
Gather of several atoms, an unknown rank — leaves the chain as it is. Rewrites only when the result is shorter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, add_constant, elem_type_of, make_node, set_value, shape_of

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

_VIEWS = ("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Gather")
#: Longest chain followed back from one reader.
_MAX_CHAIN = 16


@dataclass(frozen=True)
class _Atom:
    """A run of source elements: ``key`` orders atoms as the source lays them out (a split atom's parts extend its
    key), ``size`` is an int or the symbol of a dim shape inference names."""

    key: tuple[int, ...]
    size: int | str


class _Unsupported(Exception):
    """The chain is not a pure rearrangement this pass can restate."""


def _int_list(node: Node, index: GraphIndex, position: int, attr: str) -> list[int] | None:
    """A node's integer list given as attribute (older opsets) or as a constant input."""
    if attr in node.attrs and node.attrs[attr] is not None:
        return [int(v) for v in node.attrs[attr]]
    if len(node.inputs) > position and node.inputs[position]:
        value = index.constant(node.inputs[position])
        if value is None or value.dtype.kind not in "iu":
            raise _Unsupported
        return [int(v) for v in value.reshape(-1)]
    return None


def _size(axis: list[_Atom]) -> int | str:
    if len(axis) == 1:
        return axis[0].size
    if any(isinstance(a.size, str) for a in axis):
        raise _Unsupported
    return int(np.prod([int(a.size) for a in axis], dtype=np.int64))


class _State:
    """The tensor along the chain: its axes, each a list of atoms, and the atom a Gather picked (if any)."""

    def __init__(self, dims: tuple[Any, ...]) -> None:
        if any(not (isinstance(d, str) or (isinstance(d, int) and d >= 0)) for d in dims):
            raise _Unsupported
        self.axes: list[list[_Atom]] = [[] if d == 1 else [_Atom((i,), d)] for i, d in enumerate(dims)]
        self.picked: tuple[_Atom, int] | None = None

    def apply(self, node: Node, index: GraphIndex) -> None:
        rank = len(self.axes)
        op = node.op_type
        if op == "Transpose":
            perm = node.attrs.get("perm")
            perm = list(range(rank))[::-1] if perm is None else [int(p) for p in perm]
            if sorted(perm) != list(range(rank)):
                raise _Unsupported
            self.axes = [self.axes[p] for p in perm]
        elif op == "Unsqueeze":
            axes = _int_list(node, index, 1, "axes")
            if axes is None:
                raise _Unsupported
            out_rank = rank + len(axes)
            for a in sorted(x % out_rank for x in axes):
                self.axes.insert(a, [])
        elif op == "Squeeze":
            axes = _int_list(node, index, 1, "axes")
            chosen = {a % rank for a in axes} if axes is not None else {i for i, ax in enumerate(self.axes) if not ax}
            if any(self.axes[a] for a in chosen):
                raise _Unsupported  # squeezing an axis whose size is not known to be 1
            self.axes = [ax for i, ax in enumerate(self.axes) if i not in chosen]
        elif op == "Gather":
            self._gather(node, index, rank)
        else:
            self._reshape(node, index)

    def _gather(self, node: Node, index: GraphIndex, rank: int) -> None:
        picks = index.constant(node.inputs[1]) if len(node.inputs) == 2 else None
        axis = int(node.attrs.get("axis", 0)) % rank if rank else 0
        if picks is None or picks.ndim != 0 or picks.dtype.kind not in "iu" or self.picked is not None or not rank:
            raise _Unsupported
        atoms = self.axes[axis]
        if len(atoms) != 1 or not isinstance(atoms[0].size, int):
            raise _Unsupported
        i = int(picks)
        i = i + atoms[0].size if i < 0 else i
        if not 0 <= i < atoms[0].size:
            raise _Unsupported
        self.picked = (atoms[0], i)
        del self.axes[axis]

    def _reshape(self, node: Node, index: GraphIndex) -> None:
        target = index.constant(node.inputs[1]) if len(node.inputs) == 2 else None
        if target is None or target.ndim != 1 or target.dtype.kind not in "iu" or int(node.attrs.get("allowzero", 0)):
            raise _Unsupported
        dims: list[Any] = [int(v) for v in target]
        for i, d in enumerate(dims):
            if d == 0:  # copies the input's dim: the same atoms when it is the whole prefix so far
                if i >= len(self.axes):
                    raise _Unsupported
                dims[i] = ("copy", i)
        if sum(d == -1 for d in dims) > 1 or any(isinstance(d, int) and d < -1 for d in dims):
            raise _Unsupported
        atoms = [a for ax in self.axes for a in ax]
        split = dims.index(-1) if -1 in dims else len(dims)
        head, tail = dims[:split], dims[split + 1 :]
        front: list[list[_Atom]] = []
        for d in head:
            front.append(self._take(atoms, d, from_end=False))
        back: list[list[_Atom]] = []
        for d in reversed(tail):
            back.insert(0, self._take(atoms, d, from_end=True))
        if split == len(dims):
            if atoms:
                raise _Unsupported
            self.axes = front
        else:
            self.axes = [*front, atoms, *back]

    def _take(self, atoms: list[_Atom], d: Any, from_end: bool) -> list[_Atom]:
        """Remove from ``atoms`` (the front or the end) the atoms making one dim of size ``d``, splitting an int
        atom where the dim ends inside it."""
        if isinstance(d, tuple):  # Reshape's 0: the input axis at that place, which must come next
            axis = self.axes[d[1]]
            n = len(axis)
            got = atoms[-n:] if from_end else atoms[:n]
            if got != axis or (n == 0 and from_end):
                raise _Unsupported
            if from_end:
                del atoms[len(atoms) - n :]
            else:
                del atoms[:n]
            return got
        taken: list[_Atom] = []
        have = 1
        while have != d:
            if not atoms or d == 0:
                raise _Unsupported
            atom = atoms.pop() if from_end else atoms.pop(0)
            if not isinstance(atom.size, int) or d % have:
                raise _Unsupported
            need = d // have
            if atom.size <= need:
                if need % atom.size:
                    raise _Unsupported
                taken.append(atom)
                have *= atom.size
                continue
            if atom.size % need:
                raise _Unsupported
            rest = atom.size // need
            if from_end:  # the dim takes the atom's inner (fastest-varying) part
                taken.append(_Atom((*atom.key, 1), need))
                atoms.append(_Atom((*atom.key, 0), rest))
            else:
                taken.append(_Atom((*atom.key, 0), need))
                atoms.insert(0, _Atom((*atom.key, 1), rest))
            have = d
        return taken[::-1] if from_end else taken


def _chain(end: Node, index: GraphIndex) -> list[Node]:
    """The view ops ending at ``end``, from the first (nearest the source) to ``end``."""
    chain = [end]
    while len(chain) < _MAX_CHAIN:
        producer = index.producers.get(chain[0].inputs[0]) if chain[0].inputs else None
        if producer is None or producer.domain or producer.op_type not in _VIEWS or len(producer.outputs) != 1:
            break
        chain.insert(0, producer)
    return chain


def _collapse(chain: list[Node], graph: Graph, index: GraphIndex) -> tuple[list[int | str], list[int], int] | None:
    """``(A, P, i)``: the chain equals ``transpose(reshape(S, A), P)[i]`` (``i = -1``: no Gather), or None."""
    source = chain[0].inputs[0]
    dims = shape_of(graph, source)
    out_dims = shape_of(graph, chain[-1].outputs[0])
    if dims is None:
        return None
    try:
        return _restated(chain, tuple(dims), out_dims, index)
    except _Unsupported:
        return None


def _restated(
    chain: list[Node], dims: tuple[Any, ...], out_dims: tuple[Any, ...] | None, index: GraphIndex
) -> tuple[list[int | str], list[int], int] | None:
    state = _State(dims)
    for node in chain:
        state.apply(node, index)
    # each output axis a run of atoms consecutive in the source: one group of the new Reshape each
    order = sorted((a.key for ax in state.axes for a in ax), key=lambda k: k)
    if state.picked is not None:
        order = sorted([*order, state.picked[0].key])
    rank_of = {key: i for i, key in enumerate(order)}
    groups: list[tuple[int, int | str, int]] = []  # (first atom's place in the source, size, output axis)
    for axis_no, axis in enumerate(state.axes):
        if not axis:
            continue
        places = [rank_of[a.key] for a in axis]
        if places != list(range(places[0], places[0] + len(places))):
            return None
        groups.append((places[0], _size(axis), axis_no))
    if state.picked is not None:
        groups.append((rank_of[state.picked[0].key], state.picked[0].size, -1))
    groups.sort()
    symbolic = [g for g in groups if isinstance(g[1], str)]
    if len(symbolic) > 1 or (out_dims is not None and len(out_dims) != len(state.axes)):
        return None
    a_dims: list[int | str] = [g[1] for g in groups]
    # size-1 output axes (no atoms) become 1s at the end of A, placed by the Transpose
    ones = [i for i, ax in enumerate(state.axes) if not ax]
    a_dims += [1] * len(ones)
    position = {g[2]: k for k, g in enumerate(groups)}
    for j, axis_no in enumerate(ones):
        position[axis_no] = len(groups) + j
    perm = ([position[-1]] if state.picked is not None else []) + [position[k] for k in range(len(state.axes))]
    return a_dims, perm, -1 if state.picked is None else state.picked[1]


def _rewrite(chain: list[Node], graph: Graph, index: GraphIndex, made: dict[tuple[Any, ...], str]) -> bool:
    found = _collapse(chain, graph, index)
    if found is None:
        return False
    a_dims, perm, pick = found
    source, end = chain[0].inputs[0], chain[-1]
    src_dims = shape_of(graph, source) or ()
    reshape = list(a_dims) != list(src_dims)
    transpose = perm != sorted(perm)
    if reshape + transpose + (pick >= 0) >= len(chain):
        return False
    opset = max(n.opset for n in chain)
    elem = elem_type_of(graph, source)
    nodes: list[Node] = []
    current = source
    if reshape:
        key = (source, tuple(a_dims))
        if key in made and (transpose or pick >= 0):
            current = made[key]
        else:
            target = [d if isinstance(d, int) else -1 for d in a_dims]
            out = graph.unique_name(f"{end.name}_split")
            set_value(graph, out, elem, a_dims)
            const = add_constant(graph, f"{end.name}_split_shape", np.asarray(target, dtype=np.int64))
            nodes.append(make_node(graph, "Reshape", [source, const], [out], f"{end.name}_split", "", opset))
            current = out
            if transpose or pick >= 0:
                made[key] = out
    if transpose:
        out = end.outputs[0] if pick < 0 else graph.unique_name(f"{end.name}_perm")
        if pick >= 0:
            set_value(graph, out, elem, [a_dims[p] for p in perm])
        attrs = {"perm": perm}
        nodes.append(make_node(graph, "Transpose", [current], [out], f"{end.name}_perm", "", opset, attrs))
        current = out
    if pick >= 0:
        at = add_constant(graph, f"{end.name}_pick", np.asarray(pick, dtype=np.int64))
        nodes.append(make_node(graph, "Gather", [current, at], [end.outputs[0]], f"{end.name}_pick", "", opset))
    elif not transpose and nodes:  # a reshape alone: it writes the chain's output
        nodes[-1].outputs = [end.outputs[0]]
    if not nodes:
        return False
    graph.nodes = [n for n in graph.nodes if n is not end]
    graph.nodes.extend(nodes)
    return True


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    made: dict[tuple[Any, ...], str] = {}
    rewrites = 0
    for node in list(graph.nodes):
        if node.domain or node.op_type not in _VIEWS or len(node.outputs) != 1:
            continue
        readers = index.consumers.get(node.outputs[0], [])
        # the end of a chain: read by something other than a view op (or a graph output)
        mid_chain = readers and all(not r.domain and r.op_type in _VIEWS for r in readers)
        if mid_chain and node.outputs[0] not in index.outputs:
            continue
        chain = _chain(node, index)
        if len(chain) >= 2 and _rewrite(chain, graph, index, made):
            rewrites += 1
            index.refresh()
    return rewrites


PASS = Pass(
    "view_chain",
    run,
    "after shape_values (Reshape targets are constants by then), before the fusions: head splits become one Reshape, "
    "Transpose and Gather, the form attention_fusion reads in place",
    after=("shape_values",),
    before=("pad_fusion", "embedding_bag", "gelu_fusion", "attention_fusion"),
)
