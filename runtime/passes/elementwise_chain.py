"""Fuse straight lines and trees of float32 elementwise ops into one ElementwiseChain, evaluated in one pass over
memory.

    # Relu(Add(Mul(x, s), b)) -> ElementwiseChain(x; Mul s, Add b, Relu)
    # op(ElementwiseChain(x; ...)) -> ElementwiseChain(x; ..., op)        extends an existing chain
    # Mul(Mul(x, 0.5), Add(Tanh(...(Pow(x, 3))...), 1))                  a tanh GELU: one chain reading x twice

A step is a unary op (Relu, Neg, Abs, Exp, Erf, Sigmoid, Tanh, Sqrt, Reciprocal, Clip with constant bounds,
LeakyRelu, Softplus, Mish) or a binary one (Add, Sub, Mul, Div, Max, Min) whose other operand is a scalar constant,
a vector along the last axis, or any tensor broadcasting to the chain's shape; Pow takes a scalar constant exponent.
Where that other operand is itself computed by elementwise ops of the chain's shape that only it reads, the chain
computes it too (``_emit``), with the pending side in a register (``CHAIN_REGISTERS``). Every link's output is read
only by the next link and is not a graph output; every step keeps the chain's shape (the first input is never
broadcast up). At least two steps, or a lone activation (``LONE_ACTIVATIONS``) reading the output of one of the
passes' fused ops.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from runtime.ir import Graph, Node
from runtime.kernels.fused import (
    CHAIN_BINARY,
    CHAIN_LOAD,
    CHAIN_POW,
    CHAIN_REGISTERS,
    CHAIN_SAVE,
    CHAIN_UNARY,
    KIND_FULL,
    KIND_INNER,
    KIND_NONE,
    KIND_REG,
    KIND_SCALAR,
    KIND_SELF,
)
from runtime.passes.pipeline import Pass
from runtime.passes.util import (
    GraphIndex,
    activation_of,
    is_float32,
    live_matches,
    make_node,
    shape_of,
    substitute,
)

if TYPE_CHECKING:
    from runtime.passes.pipeline import PassContext

_MIN_OPSET = {"Add": 7, "Sub": 7, "Mul": 7, "Div": 7, "Max": 8, "Min": 8}
#: Nodes one chain may replace: bounds the recursion of ``_emit`` through a tree of operands.
MAX_NODES = 32


@dataclass
class _Chain:
    x: str
    shape: tuple[object, ...]
    steps: list[int] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)
    scalars: list[float] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    out: str = ""

    def mark(self) -> tuple[int, int, int, int]:
        """Where the chain stands, for ``rollback``."""
        return len(self.steps), len(self.operands), len(self.scalars), len(self.nodes)

    def rollback(self, mark: tuple[int, int, int, int]) -> None:
        """Forget every step, operand, scalar and node added since ``mark``."""
        del self.steps[mark[0] :], self.operands[mark[1] :], self.scalars[mark[2] :], self.nodes[mark[3] :]

    def add_operand(self, name: str) -> int:
        if name in self.operands:
            return self.operands.index(name)
        self.operands.append(name)
        return len(self.operands) - 1


def _leaf(name: str, chain: _Chain, graph: Graph, index: GraphIndex) -> tuple[int, int] | None:
    """(operand kind, index) of ``name`` read as it is: a scalar constant, a vector constant along the last axis, or
    a tensor broadcasting to the chain's shape; None when it cannot be an operand."""
    if not is_float32(graph, name):
        return None
    const = index.constant(name)
    last = chain.shape[-1] if chain.shape else None
    if const is not None and const.size == 1:
        chain.scalars.append(float(np.float32(const.reshape(-1)[0])))
        return KIND_SCALAR, len(chain.scalars) - 1
    if const is not None and const.size == last and const.ndim >= 1 and const.shape[-1] == last:
        return KIND_INNER, chain.add_operand(name)
    other_shape = shape_of(graph, name)
    if other_shape is None or len(other_shape) > len(chain.shape):
        return None
    return KIND_FULL, chain.add_operand(name)


def _exponent(node: Node, index: GraphIndex) -> float | None:
    """The scalar constant exponent of a Pow node."""
    if len(node.inputs) != 2:
        return None
    const = index.constant(node.inputs[1])
    if const is None or const.size != 1 or const.dtype.kind not in "fiu":
        return None
    return float(np.float32(const.reshape(-1)[0]))


def _power(chain: _Chain, exponent: float) -> bool:
    """Append ``accumulator ** exponent``."""
    chain.steps += [CHAIN_POW, KIND_SCALAR, len(chain.scalars), 0]
    chain.scalars.append(exponent)
    return True


def _unary(node: Node, chain: _Chain, index: GraphIndex) -> bool:
    """Append the unary op ``node`` applied to the accumulator."""
    op = node.op_type
    if op == "Clip":
        act = activation_of(node, index)
        if act is None:
            return False
        chain.steps += [CHAIN_UNARY[op], KIND_NONE, len(chain.scalars), 0]
        chain.scalars += [act[1], act[2]]
    elif op == "LeakyRelu":
        if len(node.inputs) != 1:
            return False
        chain.steps += [CHAIN_UNARY[op], KIND_NONE, len(chain.scalars), 0]
        chain.scalars.append(float(np.float32(node.attrs.get("alpha", 0.01))))
    else:
        if len(node.inputs) != 1:
            return False
        chain.steps += [CHAIN_UNARY[op], KIND_NONE, 0, 0]
    return True


def _elementwise(node: Node | None, graph: Graph) -> bool:
    """A float32 op a chain step can be (Pow only with a scalar exponent, checked where it is read)."""
    if node is None or node.domain or len(node.outputs) != 1 or not is_float32(graph, node.outputs[0]):
        return False
    op = node.op_type
    if op in CHAIN_BINARY:
        return node.opset >= _MIN_OPSET[op] and len(node.inputs) == 2
    return op in CHAIN_UNARY or (op == "Pow" and node.opset >= 7)


def _absorbable(name: str, chain: _Chain, graph: Graph, index: GraphIndex) -> Node | None:
    """The producer of ``name`` when the chain can compute it in place of reading it: an elementwise op whose output,
    of the chain's shape, only the chain reads. (A smaller value is read as it is: computed at the chain's shape, an
    Exp of a bias would run once per element of the chain.)"""
    node = index.producers.get(name)
    if not _elementwise(node, graph) or index.sole_consumer(name) is None or index.constant(name) is not None:
        return None
    if shape_of(graph, name) != chain.shape:
        return None
    assert node is not None
    return None if any(n is node for n in chain.nodes) else node


def _emit(name: str, chain: _Chain, graph: Graph, index: GraphIndex, register: int) -> bool:
    """Append steps that leave ``name``'s value in the accumulator: the tree of elementwise ops computing it
    (``_absorbable``), down to leaves read as operands. Registers from ``register`` up hold a pending left side."""
    node = _absorbable(name, chain, graph, index)
    if node is None or len(chain.nodes) >= MAX_NODES:
        leaf = _leaf(name, chain, graph, index)
        if leaf is None or (leaf[0] == KIND_FULL and shape_of(graph, name) != chain.shape):
            return False  # a broadcast load would leave the compiled kernel (its full operands match the chain)
        chain.steps += [CHAIN_LOAD, leaf[0], leaf[1], 0]
        return True
    chain.nodes.append(node)
    op = node.op_type
    if op == "Pow":
        exponent = _exponent(node, index)
        return exponent is not None and _emit(node.inputs[0], chain, graph, index, register) and _power(chain, exponent)
    if op in CHAIN_UNARY:
        return _emit(node.inputs[0], chain, graph, index, register) and _unary(node, chain, index)
    a, b = node.inputs
    if a == b:
        if not _emit(a, chain, graph, index, register):
            return False
        chain.steps += [CHAIN_BINARY[op], KIND_SELF, 0, 0]
        return True
    for inner, other, swapped in ((a, b, 0), (b, a, 1)):
        if _absorbable(other, chain, graph, index) is None:
            if not _emit(inner, chain, graph, index, register):
                return False
            leaf = _leaf(other, chain, graph, index)
            if leaf is None:
                return False
            chain.steps += [CHAIN_BINARY[op], leaf[0], leaf[1], swapped]
            return True
    # both sides computed: the left one waits in a register while the right one is computed
    if register >= CHAIN_REGISTERS or not _emit(a, chain, graph, index, register):
        return False
    chain.steps += [CHAIN_SAVE, KIND_NONE, register, 0]
    if not _emit(b, chain, graph, index, register + 1):
        return False
    chain.steps += [CHAIN_BINARY[op], KIND_REG, register, 1]
    return True


def _step(node: Node, current: str, chain: _Chain, graph: Graph, index: GraphIndex) -> bool:
    """Append ``node`` (reading ``current``) to ``chain``; False (``chain`` unchanged) when it is not a chain link."""
    mark = chain.mark()
    if _link(node, current, chain, graph, index):
        chain.nodes.append(node)
        chain.out = node.outputs[0]
        return True
    chain.rollback(mark)
    return False


def _link(node: Node, current: str, chain: _Chain, graph: Graph, index: GraphIndex) -> bool:
    if not _elementwise(node, graph):
        return False
    op = node.op_type
    # a unary step keeps its input's shape whatever shape inference named the output's dims (a dynamic batch may come
    # out as ``batch`` after ``unk__0``); a binary one must not broadcast the chain up
    if op not in CHAIN_UNARY and shape_of(graph, node.outputs[0]) != chain.shape:
        return False
    if op in CHAIN_UNARY:
        return _unary(node, chain, index)
    if op == "Pow":
        exponent = _exponent(node, index)
        return exponent is not None and node.inputs[0] == current and _power(chain, exponent)
    if node.inputs[0] == node.inputs[1]:
        chain.steps += [CHAIN_BINARY[op], KIND_SELF, 0, 0]
        return True
    swapped = int(node.inputs[1] == current)
    other = node.inputs[1 - swapped]
    if _absorbable(other, chain, graph, index) is not None and len(chain.nodes) < MAX_NODES:
        # ``other`` is computed by elementwise ops only this node reads: compute it here too, with ``current`` kept
        # in register 0 (the link's left operand when it was not swapped); where its tree cannot be, read it
        mark = chain.mark()
        chain.steps += [CHAIN_SAVE, KIND_NONE, 0, 0]
        if _emit(other, chain, graph, index, 1):
            chain.steps += [CHAIN_BINARY[op], KIND_REG, 0, 1 - swapped]
            return True
        chain.rollback(mark)
    leaf = _leaf(other, chain, graph, index)
    if leaf is None:
        return False
    chain.steps += [CHAIN_BINARY[op], leaf[0], leaf[1], swapped]
    return True


def _from_existing(node: Node) -> _Chain | None:
    if node.op_type != "ElementwiseChain" or node.domain != "com.appopt":
        return None
    return _Chain(
        x=node.inputs[0],
        shape=(),
        steps=[int(v) for v in node.attrs.get("steps", [])],
        operands=list(node.inputs[1:]),
        scalars=[float(v) for v in node.attrs.get("scalars", [])],
        nodes=[node],
        out=node.outputs[0],
    )


def _may_equal(shape: tuple[object, ...] | None, out: tuple[object, ...] | None) -> bool:
    """Whether an input of ``shape`` may be the output's shape ``out``: equal dims, or named ones (a model exported
    with a dynamic length names each convolution's output length apart, a WaveNet gate's ``unk__3`` against its
    filter's ``unk__4`` and the product's ``unk__5``). Where they differ at run time the kernel broadcasts its
    accumulator up (``ElementwiseChain.compute_numpy``)."""
    if shape is None or out is None or len(shape) != len(out):
        return False
    return all(a == b or (isinstance(a, str) and isinstance(b, str)) for a, b in zip(shape, out, strict=True))


def _grow(start: Node, graph: Graph, index: GraphIndex) -> _Chain | None:
    existing = _from_existing(start)
    if existing is not None:
        shape = shape_of(graph, start.outputs[0])
        if shape is None:
            return None
        existing.shape = shape
        chain = existing
    else:
        if start.domain or not start.inputs or not start.outputs:
            return None
        unary = start.op_type in CHAIN_UNARY
        out_shape = shape_of(graph, start.inputs[0] if unary else start.outputs[0])
        mains = [
            i for i in start.inputs[:2] if i and index.constant(i) is None and _may_equal(shape_of(graph, i), out_shape)
        ]
        # dims known, or named (a dynamic batch): the kernel checks operand shapes again at run time
        if not mains or out_shape is None or not all(isinstance(d, int) or d for d in out_shape):
            return None
        x, shape = mains[0], out_shape
        chain = _Chain(x=x, shape=shape)
        if not _step(start, x, chain, graph, index):
            return None
    while True:
        nxt = index.sole_consumer(chain.out)
        if nxt is None or not _step(nxt, chain.out, chain, graph, index):
            break
    fresh_steps = len(chain.nodes) - (1 if existing is not None else 0)
    if existing is not None and fresh_steps == 0:
        return None
    if existing is None and len(chain.nodes) < 2 and not _lone_activation(chain, index):
        return None
    return chain


#: Activations that form a chain of their own right after one of the passes' fused ops (``_lone_activation``).
LONE_ACTIVATIONS = ("Relu", "Clip", "Sigmoid", "Tanh", "LeakyRelu", "Softplus", "Mish")
#: Binary ops that do too when one of their tensor operands is such an op's output: a residual added after the
#: activation (a TCN's ``relu(conv(x)) + x``), which the convolution's epilogue cannot take.
LONE_SUMS = ("Add", "Sub", "Mul")


def _lone_activation(chain: _Chain, index: GraphIndex) -> bool:
    """A single activation (``LONE_ACTIVATIONS``) or sum (``LONE_SUMS``) right after one of the passes' fused ops is
    worth a chain too: the compiled kernel writes into a planned buffer, so the ops around it can run prebound, and
    NumPy's own Tanh and LeakyRelu (a comparison, a select and a product) took 14-20 us on the 8k-32k elements after
    a VAE decoder's NHWC transposed convolutions, 3-6x the compiled chain's time, a TCN's residual sums 10-24 us.
    (Elsewhere the op keeps its own kernel.)"""
    if len(chain.nodes) != 1 or len(chain.shape) < 2:
        return False
    node = chain.nodes[0]
    if node.op_type in LONE_ACTIVATIONS:
        reads = [chain.x]
    elif node.op_type in LONE_SUMS:
        reads = [name for name in node.inputs if index.constant(name) is None]
    else:
        return False
    producers = [index.producers.get(name) for name in reads]
    return any(p is not None and p.domain == "com.appopt" for p in producers)


def run(graph: Graph, ctx: PassContext) -> int:
    index = GraphIndex(graph)
    fused = 0
    for start, chain in live_matches(graph, index, _grow):
        scalars = chain.scalars or [0.0]
        node = make_node(
            graph,
            "ElementwiseChain",
            [chain.x, *chain.operands],
            [chain.out],
            f"{start.name}_chain",
            attributes={"steps": chain.steps, "scalars": scalars},
        )
        substitute(graph, index, chain.nodes[0], [node], chain.nodes[1:])
        fused += max(1, len(chain.nodes) - 1)
    return fused


PASS = Pass(
    "elementwise_chain",
    run,
    "after layout: what is left elementwise (e.g. BatchNormalization turned affine, then Relu) joins one chain",
    after=("layout",),
)
