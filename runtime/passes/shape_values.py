"""Give shape arithmetic the values shape inference already knows, so that it folds away.

    # Shape(x) -> constant                       every dim of x it reports is static
    # Gather(Shape(x), i) -> constant            the dims it picks are static (i a constant); Slice likewise
    # Reshape(x, s) -> Reshape(x, [d|0, ...])   s computed from shapes at run time: each element a known int d,
    #     or a dim symbol that x has at the same place (0 copies it)
    # Reshape(x, s) -> Reshape(x, [..., -1, ...])  as above, but one element computed from shapes at run time
    #     and unknown here (b * heads, a moved dim symbol): the Reshape itself infers it
    # Reshape(x, s) -> y with y's shape read off s where inference left it unknown (later Shapes of y then fold)

Exporters write ``x.reshape(b, n, heads, d)`` as Shape -> Gather -> Unsqueeze -> Concat -> Reshape with a dynamic
batch: a dozen nodes per attention layer that run every time, and a Reshape the memory plan cannot fix as a view
because a run-time value shapes it. After this pass the Reshape has a constant target, constant folding takes
what reads the new constants, and dead-node elimination removes the shape arithmetic nobody reads any more.

The pass folds what it made constant itself (with ``constant_folding.run``, even where that pass is disabled by
name), sweeping to a fixed point, so that later passes of the same round see the shape arithmetic settled.

The rewrite trusts the inferred shapes (a dim symbol stands for one value throughout the graph), as every pass
reading ``shape_of`` does; a target fed from anything but shapes and constants is left alone. The -1 form needs
every other element known and non-zero (``nn.MultiheadAttention`` writes ``view(n, b * heads, d)``), so the size
it infers is the one the run-time target names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.ir import Graph, Node, value_of_array
from runtime.passes import constant_folding
from runtime.passes.pipeline import Pass
from runtime.passes.util import GraphIndex, add_constant, elem_type_of, set_value, shape_of

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext


def _static(dims: Any) -> list[int] | None:
    if dims is None or not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return [int(d) for d in dims]


def _shape_dims(node: Node, graph: Graph) -> tuple[Any, ...] | None:
    """The dims ``Shape(x)`` reports (its start/end slice from opset 15), static or symbolic."""
    shape = shape_of(graph, node.inputs[0])
    if shape is None:
        return None
    rank = len(shape)
    start = int(node.attrs.get("start", 0)) if node.opset >= 15 else 0
    end = node.attrs.get("end") if node.opset >= 15 else None
    start = min(max(start + rank if start < 0 else start, 0), rank)
    stop = rank if end is None else int(end)
    stop = min(max(stop + rank if stop < 0 else stop, 0), rank)
    return tuple(shape[start:stop])


def _plain_producer(name: str, op_type: str, index: GraphIndex) -> bool:
    node = index.producers.get(name)
    return node is not None and node.op_type == op_type and not node.domain


def _constant_value(node: Node, graph: Graph, index: GraphIndex) -> np.ndarray | None:
    """The value of a Shape, or of a Gather from a Shape, when every dim it reads is static."""
    if node.op_type == "Shape" and len(node.inputs) == 1:
        dims = _static(_shape_dims(node, graph))
        return None if dims is None else np.asarray(dims, dtype=np.int64)
    if node.op_type == "Slice" and _plain_producer(node.inputs[0], "Shape", index):
        sliced = _elements(node.outputs[0], graph, index)
        if sliced is None or not all(isinstance(d, int) for d in sliced):
            return None
        return np.asarray(sliced, dtype=np.int64)
    if node.op_type != "Gather" or len(node.inputs) != 2 or int(node.attrs.get("axis", 0)) != 0:
        return None
    source = index.producers.get(node.inputs[0])
    picks = index.constant(node.inputs[1])
    if source is None or source.domain or source.op_type != "Shape" or picks is None or picks.dtype.kind not in "iu":
        return None
    reported = _shape_dims(source, graph)
    if reported is None or picks.ndim > 1 or any(not -len(reported) <= int(i) < len(reported) for i in picks.flat):
        return None
    chosen = _static([reported[int(i)] for i in picks.reshape(-1)])
    return None if chosen is None else np.asarray(chosen, dtype=np.int64).reshape(picks.shape)


#: Ops a shape vector passes through unchanged, element for element (Cast only between integer types).
_PASS_THROUGH = ("Unsqueeze", "Squeeze", "Identity", "Cast")
#: Integer arithmetic on shape elements: known when both operands are, else an element computed from shapes.
_ARITHMETIC = {
    "Mul": lambda a, b: a * b,
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Div": lambda a, b: a // b if b and a * b >= 0 else None,
}
#: How deep the walk back from a Reshape target goes.
_MAX_DEPTH = 12


def _elements(name: str, graph: Graph, index: GraphIndex, depth: int = 0) -> list[int | str | None] | None:
    """A 1-D integer shape vector element by element: a known int, the symbol of a dim shape inference names, or
    None for a value computed from those by integer Mul/Add/Sub/Div (read through Shape, Gather, Concat,
    Unsqueeze, Squeeze, integer Cast); None for the whole vector when any element is none of these."""
    const = index.constant(name)
    if const is not None:
        return [int(v) for v in const.reshape(-1)] if const.dtype.kind in "iu" and const.ndim <= 1 else None
    node = index.producers.get(name)
    if node is None or node.domain or depth > _MAX_DEPTH or not node.inputs:
        return None
    if node.op_type == "Shape":
        dims = _shape_dims(node, graph)
        if dims is None or not all(isinstance(d, int | str) for d in dims):
            return None
        return list(dims)
    if node.op_type == "Gather" and int(node.attrs.get("axis", 0)) == 0 and len(node.inputs) == 2:
        base = _elements(node.inputs[0], graph, index, depth + 1)
        picks = index.constant(node.inputs[1])
        if base is None or picks is None or picks.dtype.kind not in "iu" or picks.ndim > 1:
            return None
        if any(not -len(base) <= int(i) < len(base) for i in picks.reshape(-1)):
            return None
        return [base[int(i)] for i in picks.reshape(-1)]
    if node.op_type == "Slice" and node.opset >= 10 and 3 <= len(node.inputs) <= 5:
        return _sliced(node, graph, index, depth)
    if node.op_type == "Concat" and int(node.attrs.get("axis", 0)) in (0, -1):
        parts = [_elements(i, graph, index, depth + 1) for i in node.inputs]
        return None if any(p is None for p in parts) else [e for p in parts if p is not None for e in p]
    if node.op_type in _PASS_THROUGH:
        if node.op_type == "Cast" and not (_is_integer(graph, node.inputs[0]) and _is_integer(graph, name)):
            return None
        return _elements(node.inputs[0], graph, index, depth + 1)
    if node.op_type in _ARITHMETIC and len(node.inputs) == 2 and _is_integer(graph, name):
        return _combined(node, graph, index, depth)
    return None


def _combined(node: Node, graph: Graph, index: GraphIndex, depth: int) -> list[int | str | None] | None:
    """Elementwise integer arithmetic of two shape vectors (one may be a single element, broadcast)."""
    a, b = (_elements(i, graph, index, depth + 1) for i in node.inputs)
    if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
        return None
    n = max(len(a), len(b))
    a, b = (v * n if len(v) == 1 else v for v in (a, b))
    out: list[int | str | None] = []
    for x, y in zip(a, b, strict=True):
        if isinstance(x, int) and isinstance(y, int):
            out.append(_ARITHMETIC[node.op_type](x, y))
        elif node.op_type == "Mul" and 1 in (x, y):
            out.append(y if x == 1 else x)
        else:
            out.append(None)
    return out


def _sliced(node: Node, graph: Graph, index: GraphIndex, depth: int) -> list[int | str | None] | None:
    """``Slice(v, starts, ends[, axes[, steps]])`` of a shape vector, with constant bounds."""
    base = _elements(node.inputs[0], graph, index, depth + 1)
    bounds = [index.constant(i) if i else None for i in node.inputs[1:]]
    given = [bool(i) for i in node.inputs[1:]]
    pairs = zip(given, bounds, strict=True)
    unusable = [g and (b is None or b.size != 1 or b.dtype.kind not in "iu") for g, b in pairs]
    if base is None or any(unusable):
        return None
    if not all(given[:2]):
        return None
    if len(bounds) > 2 and bounds[2] is not None and int(bounds[2].reshape(-1)[0]) not in (0, -1):
        return None
    step = int(bounds[3].reshape(-1)[0]) if len(bounds) > 3 and bounds[3] is not None else 1
    start, end = (int(b.reshape(-1)[0]) for b in bounds[:2] if b is not None)
    return base[slice(start, end, step)] if step != 0 else None


def _is_integer(graph: Graph, name: str) -> bool:
    dtype = graph.values[name].dtype if name in graph.values else None
    return dtype is not None and dtype.kind in "iu"


def _reshape_target(node: Node, graph: Graph, index: GraphIndex) -> np.ndarray | None:
    """A constant target equal, element for element, to a Reshape's run-time one: its known ints, 0 (the input's
    dim at that place) for a dim symbol the input has at the same place, and -1 for at most one other element
    computed from shapes when no element is -1 or 0 already (then the -1 infers exactly that element)."""
    if len(node.inputs) != 2 or int(node.attrs.get("allowzero", 0)) or index.constant(node.inputs[1]) is not None:
        return None
    src = shape_of(graph, node.inputs[0]) or ()
    elements = _elements(node.inputs[1], graph, index)
    if elements is None:
        return None
    target = []
    inferred = 0
    for i, element in enumerate(elements):
        if isinstance(element, int):
            target.append(element)
        elif element is not None and i < len(src) and src[i] == element:
            target.append(0)
        else:
            target.append(-1)
            inferred += 1
    if inferred > 1 or (inferred == 1 and any(isinstance(e, int) and e <= 0 for e in elements)):
        return None
    return np.asarray(target, dtype=np.int64)


def _refine_reshape_output(node: Node, graph: Graph, index: GraphIndex) -> int:
    """Write the Reshape output's shape from its target's elements where inference left dims unknown: the target
    says each dim exactly (a 0 copies the input's dim; a -1 stays unknown). Later Shapes of it then fold."""
    if len(node.inputs) != 2 or int(node.attrs.get("allowzero", 0)):
        return 0
    elements = _elements(node.inputs[1], graph, index)
    src, old = shape_of(graph, node.inputs[0]), shape_of(graph, node.outputs[0])
    if elements is None or src is None:
        return 0
    dims: list[Any] = []
    for i, element in enumerate(elements):
        dim: Any = element
        if element == 0:
            dim = src[i] if i < len(src) else None
        dims.append(None if isinstance(dim, int) and dim < 0 else dim)
    if old is not None and len(old) != len(dims):
        return 0
    refined = tuple(d if d is not None else (old[i] if old is not None else None) for i, d in enumerate(dims))
    if old is not None and any(isinstance(o, int) and o != r for o, r in zip(old, refined, strict=True)):
        return 0  # inference knows better (it should never disagree)
    if refined == old:
        return 0
    elem_type = elem_type_of(graph, node.outputs[0]) or elem_type_of(graph, node.inputs[0])
    set_value(graph, node.outputs[0], elem_type, refined)
    return 1


#: Sweeps per run: a folded dim can make the next Reshape's target known, whose output shape feeds the next Shape.
_MAX_SWEEPS = 6


def run(graph: Graph, ctx: PassContext) -> int:
    """Sweep (and fold what the sweep made constant) until nothing changes, so the whole shape arithmetic is
    settled within one pipeline round, before later passes fuse parts of it into ops folding cannot evaluate."""
    total = 0
    for _ in range(_MAX_SWEEPS):
        changed = _sweep(graph, ctx)
        total += changed
        if not changed:
            break
    return total


def _sweep(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    rewrites = 0
    keep: list[Node] = []
    for node in graph.nodes:
        if node.domain:
            keep.append(node)
            continue
        value = _constant_value(node, graph, index)
        if value is not None and node.outputs[0] not in index.outputs:
            name = node.outputs[0]
            graph.initializers[name] = value
            graph.values[name] = value_of_array(name, value)
            rewrites += 1
            continue
        if node.op_type == "Reshape":
            rewrites += _refine_reshape_output(node, graph, index)
            target = _reshape_target(node, graph, index)
            if target is not None:
                node.inputs[1] = add_constant(graph, f"{node.name}_target", target)
                rewrites += 1
        keep.append(node)
    graph.nodes = keep
    if rewrites:
        # fold what reads the new constants now, before later passes of this round fuse it into ops that constant
        # folding does not evaluate (an ElementwiseChain over a scale computed from a shape)
        rewrites += constant_folding.run(graph, ctx)
    return rewrites


PASS = Pass(
    "shape_values",
    run,
    "after constant folding, which then (next round) folds the shape arithmetic reading the static dims it writes; "
    "Reshapes get constant targets before the fusions look at them",
    after=("constant_folding",),
)
