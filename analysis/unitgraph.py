"""Cut an ONNX graph into kernel units (``analysis.units``): what inference frameworks run as one kernel each.

The cut follows the fusions every CPU framework we measure makes: a convolution or matrix product absorbs the bias,
batch norm, scale, activation and one residual add that follow it alone; element-wise nodes computed from one tensor
form one unit; constant subgraphs fold away. Nodes that move no data but are still dispatched (views such as Reshape and
Unsqueeze, shape arithmetic on small integer tensors, a Loop body's nodes once per iteration) are counted into one
``noop`` unit of their number, priced per route at its cost of a node (a runtime that folds them pays nothing); Identity
and Dropout cost nothing. A transpose that keeps the last axes in place is a ``permute`` (rows of contiguous elements
move), any other data movement a ``move``. A depthwise convolution read only by a 1x1 convolution is one ``dwpw`` unit
with it (one kernel in runtimes that fuse them, two in others: the sweep measures the pair on each); so is a residual
add read only by a layer normalisation, a ``skipnorm`` unit (onnxruntime's SkipLayerNormalization), whose add the matrix
product before it therefore does not absorb. A transposed convolution is its column product and their scatter (col2im),
a 1-D convolution of one group its product (``_lowered_conv``): no sweep measured either as a convolution. A recurrent
layer (LSTM, GRU, RNN) is one ``recurrent`` unit, the one kernel runtimes loop over its steps in
(``_recurrent_units``). Everything else is one unit per node. Dimensions are those of one sample (the model is
analysed at batch 1).

Example::

    >>> units = graph_units("resnet50.onnx")                          # doctest: +SKIP
    >>> sum(u.count for u in units if u.kind == "conv")               # doctest: +SKIP
    53
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import onnx

from analysis.modelinfo import (
    RECURRENT_GATES,
    _attr,
    _constant_tensors,
    _load,
    _shape_inference_model,
    inferred_shapes,
    recurrent_shape,
)
from analysis.shapeprop import _constant_value
from analysis.units import Unit

Shape = tuple[int, ...]

#: Nodes that only relabel memory: no unit.
FREE = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Dropout", "Identity", "Shape", "Constant", "Size"}
#: Of those, the ones a runtime still dispatches as nodes (Identity and Dropout are removed, Constants folded).
VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Shape", "Size"}
#: Integer tensors up to this size are shape arithmetic (shape vectors, axes, a few indices).
SHAPE_VECTOR_ELEMENTS = 64
_INTEGER_TYPES = {onnx.TensorProto.INT64, onnx.TensorProto.INT32}
HEADS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
#: Single-input element-wise ops a convolution or matrix product fuses as its activation.
ACTIVATIONS = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Gelu"}
#: Binary ops a head fuses when the other operand is constant (bias, scale); Add/Sum also as a residual.
AFFINE = {"Add", "Sum", "Mul", "Sub", "Div"}
HEAVY = {"Erf", "Exp", "Tanh", "Sigmoid", "Log", "Pow", "Sqrt", "Gelu", "Softplus", "Elu", "Reciprocal"}
ELEMENTWISE = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Sum",
    "Max",
    "Min",
    "Mean",
    "Relu",
    "Clip",
    "LeakyRelu",
    "PRelu",
    "Sigmoid",
    "HardSigmoid",
    "HardSwish",
    "Tanh",
    "Erf",
    "Exp",
    "Log",
    "Sqrt",
    "Pow",
    "Neg",
    "Abs",
    "Reciprocal",
    "Gelu",
    "Softplus",
    "Elu",
    "BatchNormalization",
    "InstanceNormalization",
    "Where",
    "Equal",
    "Less",
    "Greater",
    "Not",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "ReduceMean",
    "ReduceSum",
    "ReduceMax",
    "ReduceMin",
    "ReduceL2",
}
POOLS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}
#: Widest depthwise layer a separable (``dwpw``) unit takes: the fused kernels keep a strip of its output on the
#: stack (``runtime.passes.depthwise_fusion.MAX_CHANNELS``).
MAX_SEPARABLE_CHANNELS = 2048


def graph_units(path_or_model: str | Path | onnx.ModelProto, dims: dict[str, int] | None = None) -> list[Unit]:
    """The kernel units of one sample through the model, in graph order (identical units are not merged).

    Nodes whose shapes shape inference cannot resolve are left out. Raises ``SpecError`` for unreadable models.
    """
    model, source = _load(path_or_model)
    small, _, _ = _shape_inference_model(model, 1, dims or {}, [])
    shapes, types = inferred_shapes(small, source)
    return _Cutter(model.graph, shapes, types).units()


@dataclass
class _Island:
    """Element-wise nodes fused into one kernel."""

    inputs: int
    elements: int = 1
    heavy: bool = False

    def unit(self) -> Unit:
        return Unit("eltwise", {"elements": self.elements, "inputs": self.inputs, "heavy": int(self.heavy)})


class _Cutter:
    def __init__(self, graph: onnx.GraphProto, shapes: dict[str, Shape], types: dict[str, int]) -> None:
        self.graph = graph
        self.shapes = shapes
        self.types = types
        #: Nodes run for their dispatch alone (``noop`` unit): shape arithmetic, views, a Loop body's nodes.
        self.dispatched = 0
        self.constant = _constant_tensors(graph)
        self.initializers = {t.name for t in graph.initializer}
        self.consumers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
        for node in graph.node:
            for name in node.input:
                if name:
                    self.consumers[name].append(node)
        self.outputs = {o.name for o in graph.output}
        #: Tensor -> the tensor its element-wise island reads.
        self._root: dict[str, str] = {}
        #: Outputs of residual adds that a layer normalisation alone reads: the norm's ``skipnorm`` unit takes them.
        self.skip_adds = {n.output[0] for n in graph.node if self._is_skip_add(n)}

    def units(self) -> list[Unit]:
        absorbed: set[int] = set()
        out: list[Unit | _Island] = []
        islands: dict[str, _Island] = {}
        for node in self.graph.node:
            if node.output and all(o in self.constant for o in node.output if o):
                continue  # folded before the model runs
            if node.op_type in VIEWS or self._shape_arithmetic(node):
                self.dispatched += 1
                continue
            if id(node) in absorbed or node.op_type in FREE or (node.output and node.output[0] in self.skip_adds):
                continue
            if node.op_type in HEADS:
                tail = self._fused_tail(node)
                absorbed.update(id(n) for n in tail)
                lowered = self._lowered_conv(node, tail)
                if lowered is not None:
                    out.extend(lowered)
                    continue
                unit = self._head_unit(node, tail)
                if unit is not None and unit.kind == "dwconv":
                    unit = self._separable(unit, tail[-1] if tail else node, absorbed)
                if unit is not None:
                    out.append(unit)
            elif node.op_type in RECURRENT_GATES:
                out.extend(self._recurrent_units(node))
            elif node.op_type == "Loop":
                out.extend(self._loop_units(node))
            elif node.op_type in ELEMENTWISE and node.output and node.output[0] in self.shapes:
                self._add_to_island(node, islands, out)
            elif (unit := self._single_unit(node)) is not None:
                out.append(unit)
        units = [item.unit() if isinstance(item, _Island) else item for item in out]
        if self.dispatched:
            units.append(Unit("noop", {"nodes": self.dispatched}))
        return units

    def _shape_arithmetic(self, node: onnx.NodeProto) -> bool:
        """Whether ``node`` computes only small integer tensors (shape vectors, indices): its cost is its dispatch."""
        outputs = [name for name in node.output if name]
        return bool(outputs) and all(
            self.types.get(name) in _INTEGER_TYPES
            and name in self.shapes
            and math.prod(self.shapes[name]) <= SHAPE_VECTOR_ELEMENTS
            for name in outputs
        )

    def _add_to_island(self, node: onnx.NodeProto, islands: dict[str, _Island], out: list[Unit | _Island]) -> None:
        """Element-wise nodes computed from one tensor (and constants) run as one fused kernel (# x -> f(g(x))):
        each joins the island of the tensor it reads; a node reading two tensors starts a new island."""
        roots = {self._root.get(i, i) for i in node.input if i and i not in self.constant}
        if len(roots) == 1:
            root = next(iter(roots))
            if root not in islands:
                islands[root] = _Island(inputs=1)
                out.append(islands[root])
        else:
            root = node.output[0]
            islands[root] = _Island(inputs=max(len(roots), 1))
            out.append(islands[root])
        island = islands[root]
        island.elements = max(island.elements, math.prod(self.shapes[node.output[0]]))
        island.heavy = island.heavy or node.op_type in HEAVY
        for name in node.output:
            self._root[name] = root

    # --- heads and what they absorb ---------------------------------------------------------------------------

    def _fused_tail(self, head: onnx.NodeProto) -> list[onnx.NodeProto]:
        """The nodes after ``head`` that a framework fuses into it: each the only consumer of the one before."""
        tail: list[onnx.NodeProto] = []
        current, residual = head, False
        while current.output and current.output[0] not in self.outputs:
            users = self.consumers.get(current.output[0], [])
            if len(users) != 1:
                break
            nxt = users[0]
            others = [i for i in nxt.input if i and i != current.output[0]]
            activation = nxt.op_type in ACTIVATIONS or (nxt.op_type == "BatchNormalization" and not tail)
            affine = nxt.op_type in AFFINE and all(i in self.constant for i in others)
            adds_branch = nxt.op_type in ("Add", "Sum") and len(others) == 1 and not affine and self._same_shape(nxt)
            if adds_branch and nxt.output[0] in self.skip_adds:
                break  # the layer normalisation after it takes the add
            if adds_branch and not residual:
                residual = True
            elif not (activation or affine):
                break
            tail.append(nxt)
            current = nxt
        return tail

    def _separable(self, dw: Unit, last: onnx.NodeProto, absorbed: set[int]) -> Unit:
        """A depthwise unit and the 1x1 convolution that alone reads it, as one ``dwpw`` unit (# dw -> pw)."""
        users = self.consumers.get(last.output[0], []) if last.output else []
        if dw["mult"] != 1 or dw["residual"] or dw["c"] > MAX_SEPARABLE_CHANNELS or len(users) != 1:
            return dw
        pw = users[0]
        weight = self.shapes.get(pw.input[1]) if pw.op_type == "Conv" and len(pw.input) > 1 else None
        strides: list[int] = list(_attr(pw, "strides", None) or [1])  # type: ignore[call-overload]
        pads: list[int] = list(_attr(pw, "pads", None) or [0])  # type: ignore[call-overload]
        pointwise = (
            weight is not None
            and tuple(weight[2:]) == (1, 1)
            and int(_attr(pw, "group", 1) or 1) == 1  # type: ignore[call-overload]
            and all(int(s) == 1 for s in strides)
            and not any(int(p) for p in pads)
            and pw.input[1] in self.constant
            and pw.input[0] == last.output[0]
        )
        if not pointwise:
            return dw
        tail = self._fused_tail(pw)
        second = self._head_unit(pw, tail)
        if second is None:
            return dw
        absorbed.update(id(n) for n in (pw, *tail))
        dims = {k: dw[k] for k in ("n", "c", "h", "w", "kh", "kw", "stride", "oh", "ow")}
        dims.update(
            cout=second["cout"],
            dw_act=dw["act"],
            act=second["act"],
            residual=second["residual"],
            init_w=min(dw["init_w"], second["init_w"]),
        )
        return Unit("dwpw", dims)

    def _is_skip_add(self, node: onnx.NodeProto) -> bool:
        """# Add(x, f(x)) -> LayerNormalization: a two-tensor add of one shape whose only reader is the norm."""
        if node.op_type not in ("Add", "Sum") or len(node.output) != 1 or node.output[0] in self.outputs:
            return False
        users = self.consumers.get(node.output[0], [])
        tensors = [i for i in node.input if i and i not in self.constant]
        return (
            len(users) == 1
            and users[0].op_type == "LayerNormalization"
            and users[0].input[0] == node.output[0]
            and len(tensors) == 2
            and self._same_shape(node)
        )

    def _constant_operand(self, node: onnx.NodeProto) -> bool:
        """Whether a binary node's second operand is known before the model runs (a bias, a scale)."""
        return sum(1 for i in node.input if i and i not in self.constant) <= 1

    def _same_shape(self, node: onnx.NodeProto) -> bool:
        shapes = [self.shapes.get(i) for i in node.input if i]
        return all(s is not None and s == shapes[0] for s in shapes)

    def _fused(self, tail: list[onnx.NodeProto]) -> tuple[int, int]:
        """(activation, residual add): whether the head's fused ``tail`` holds each (1) or not (0)."""
        act = int(any(n.op_type in ACTIVATIONS for n in tail))
        residual = int(any(n.op_type in ("Add", "Sum") and not self._constant_operand(n) for n in tail))
        return act, residual

    def _head_unit(self, head: onnx.NodeProto, tail: list[onnx.NodeProto]) -> Unit | None:
        act, residual = self._fused(tail)
        if head.op_type in ("Conv", "ConvTranspose"):
            return self._conv_unit(head, act, residual)
        return self._matmul_unit(head, act)

    def _lowered_conv(self, node: onnx.NodeProto, tail: list[onnx.NodeProto]) -> list[Unit] | None:
        """A transposed convolution, or a 1-D convolution of one group, as CPU runtimes run it: a matrix product,
        and for a transposed one the scatter of its columns (None: any other node, or shapes unknown).

        * ConvTranspose: the input by the weights to every tap's column, then col2im adds the columns into the
          output (onnxruntime and appopt-runtime alike).
        * A 1-D convolution: its product, the windows unrolled into the contraction (onnxruntime's NCHWc layout
          leaves 1-D convolutions in NCHW, and no unit sweep measured a convolution of one spatial dimension). The
          unrolling itself is not a unit of its own: the kernel does it in cache (priced as a data move, it
          over-predicted onnxruntime NCHW by 20-60%, docs/decisions.md 2026-11-27).

        A fused residual add that the product cannot take is an element-wise unit after it."""
        transposed = node.op_type == "ConvTranspose"
        if node.op_type not in ("Conv", "ConvTranspose") or len(node.input) < 2:
            return None
        x, w, y = (self.shapes.get(n) for n in (node.input[0], node.input[1], node.output[0]))
        group = int(_attr(node, "group", 1) or 1)  # type: ignore[call-overload]
        if x is None or w is None or y is None or not 3 <= len(x) <= 4 or len(w) != len(x) or len(y) != len(x):
            return None
        if not transposed and (len(x) != 3 or group != 1):
            return None
        if group < 1 or min((*x[1:], *w, *y[1:])) < 1 or int(x[1]) % group or int(y[1]) % group:
            return None  # an inconsistent graph: the unit cut leaves the node out, as it does unknown shapes
        act, residual = self._fused(tail)
        init_w = int(node.input[1] in self.initializers)
        taps = math.prod(w[2:])
        cin, cout = int(x[1]), int(y[1])
        # pixels of every sample the graph holds (1 at the analysis batch; a fixed batch keeps its own, as ``n``)
        pixels_in, pixels_out = int(x[0]) * math.prod(x[2:]), int(x[0]) * math.prod(y[2:])
        units: list[Unit] = []
        if transposed:  # columns (pixels_in x cout/g * taps) per group, then col2im
            product = {"m": pixels_in, "k": cin // group, "n": cout // group * taps, "act": 0, "init_w": init_w}
            units += [Unit("gemm", product, group), Unit("move", {"elements": cout * taps * pixels_in})]
            if act:
                heavy = int(any(n.op_type in HEAVY for n in tail))
                units.append(Unit("eltwise", {"elements": cout * pixels_out, "inputs": 1, "heavy": heavy}))
        else:
            units.append(Unit("gemm", {"m": pixels_out, "k": cin * taps, "n": cout, "act": act, "init_w": init_w}))
        if residual:
            units.append(Unit("eltwise", {"elements": cout * pixels_out, "inputs": 2, "heavy": 0}))
        return units

    def _conv_unit(self, node: onnx.NodeProto, act: int, residual: int) -> Unit | None:
        x, w, y = (self.shapes.get(n) for n in (node.input[0], node.input[1], node.output[0]))
        if x is None or w is None or y is None or len(x) < 3 or len(x) > 4:
            return None
        h, wd = (x[2], x[3]) if len(x) == 4 else (x[2], 1)
        oh, ow = (y[2], y[3]) if len(y) == 4 else (y[2], 1)
        kh, kw = (w[2], w[3]) if len(w) == 4 else (w[2], 1)
        strides = _attr(node, "strides", None) or [1]
        group = int(_attr(node, "group", 1) or 1)  # type: ignore[call-overload]
        stride = int(strides[0])  # type: ignore[index]
        cin, cout = int(x[1]), int(y[1])
        init_w = int(node.input[1] in self.initializers)
        if node.op_type == "ConvTranspose":  # cost as the convolution that computes its gradient
            cin, cout, h, wd, oh, ow = cout, cin, oh, ow, h, wd
        if group > 1 and group == cin and cout % cin == 0:
            return Unit(
                "dwconv",
                {
                    "n": x[0],
                    "c": cin,
                    "mult": cout // cin,
                    "h": h,
                    "w": wd,
                    "kh": kh,
                    "kw": kw,
                    "stride": stride,
                    "oh": oh,
                    "ow": ow,
                    "act": act,
                    "residual": residual,
                    "init_w": init_w,
                },
            )
        return Unit(
            "conv",
            {
                "n": x[0],
                "cin": cin,
                "cout": cout,
                "h": h,
                "w": wd,
                "kh": kh,
                "kw": kw,
                "stride": stride,
                "group": group,
                "oh": oh,
                "ow": ow,
                "act": act,
                "residual": residual,
                "init_w": init_w,
            },
        )

    def _matmul_unit(self, node: onnx.NodeProto, act: int) -> Unit | None:
        a, b, y = (self.shapes.get(n) for n in (node.input[0], node.input[1], node.output[0]))
        if a is None or b is None or y is None or not y:
            return None
        k = (b[1] if _attr(node, "transB", 0) else b[0]) if node.op_type == "Gemm" else a[-1]
        n = y[-1]
        if node.input[1] in self.constant or len(b) == 2:  # one matrix for every row: a product by weights
            rows = math.prod(y[:-1]) if len(y) > 1 else 1
            init_w = int(node.input[1] in self.initializers)
            return Unit("gemm", {"m": rows, "k": k, "n": n, "act": act, "init_w": init_w})
        m = y[-2] if len(y) > 1 else 1
        return Unit("bmm", {"b": math.prod(y[:-2]) if len(y) > 2 else 1, "m": m, "k": k, "n": n})

    def _recurrent_units(self, node: onnx.NodeProto) -> list[Unit]:
        """An LSTM, GRU or RNN: one ``recurrent`` unit, as every runtime runs it (none where the shapes are unknown).
        A route that has not measured the kind prices its ``unfused`` parts: the input projection of every step at
        once, each step's product by the recurrent weights, and the gates' math over every step as one pass, per
        direction (priced per step, our runtime's LSTMs were predicted at 2-4x: docs/decisions.md, 2026-11-27)."""
        r = recurrent_shape(node, self.shapes)
        if r is None:
            return []
        dims = {"batch": r.batch, "steps": r.steps, "inputs": r.inputs, "hidden": r.hidden, "gates": r.gates}
        return [Unit("recurrent", {**dims, "directions": r.directions})]

    # --- everything else ------------------------------------------------------------------------------------------

    def _single_unit(self, node: onnx.NodeProto) -> Unit | None:
        op = node.op_type
        y = self.shapes.get(node.output[0]) if node.output else None
        if y is None:
            return None
        elements = max(math.prod(y), 1)
        if op in POOLS:
            x = self.shapes.get(node.input[0])
            if x is None or len(x) != 4:
                return None
            is_global = op.startswith("Global")
            kernel = [x[2], x[3]] if is_global else list(_attr(node, "kernel_shape", [1, 1]))  # type: ignore[call-overload]
            strides = [1] if is_global else list(_attr(node, "strides", None) or [1])  # type: ignore[call-overload]
            return Unit(
                "pool",
                {
                    "n": x[0],
                    "c": x[1],
                    "h": x[2],
                    "w": x[3],
                    "kh": int(kernel[0]),
                    "kw": int(kernel[-1]),
                    "stride": int(strides[0]),
                    "oh": y[2],
                    "ow": y[3],
                    "avg": int("Average" in op),
                },
            )
        if op == "LayerNormalization":
            kind = "skipnorm" if node.input[0] in self.skip_adds else "layernorm"
            return Unit(kind, {"rows": elements // y[-1], "cols": y[-1]})
        if op in ("Softmax", "LogSoftmax"):
            return Unit("softmax", {"rows": elements // y[-1], "cols": y[-1]})
        if op == "LRN":
            return Unit("lrn", {"n": y[0], "c": y[1], "hw": math.prod(y[2:]), "size": int(_attr(node, "size", 5))})  # type: ignore[call-overload]
        if op == "Transpose":
            block = self._kept_block(node)
            if block > 1:
                return Unit("permute", {"elements": elements, "block": block})
        return Unit("move", {"elements": elements})

    # --- control flow -----------------------------------------------------------------------------------------

    def _loop_units(self, node: onnx.NodeProto) -> list[Unit]:
        """A ``Loop`` runs its body once per iteration, each body node a kernel call (onnxruntime runs the body node
        by node; PyTorch exports ``nn.EmbeddingBag`` as a Loop over the bags). The body's shapes are data-dependent
        (a bag's slice, a few elements), so its nodes count for their dispatch (``dispatched``, the ``noop`` unit)
        and the Loop itself is a ``move`` of its outputs.

        Iterations: the first scan output's leading dimension, else a constant trip count, else one, all at batch 1
        (units are one sample's; a ``noop`` unit does not grow with the batch, so a Loop over a batch's bags is
        undercounted at larger batches).
        """
        body = next((a.g for a in node.attribute if a.name == "body"), None)
        if body is not None:
            body_constant = _constant_tensors(body)
            kernels = sum(
                1
                for inner in body.node
                if (inner.op_type in VIEWS or inner.op_type not in FREE)
                and not (inner.output and all(name in body_constant for name in inner.output if name))
            )
            self.dispatched += kernels * self._loop_iterations(node)
        outputs = [self.shapes[name] for name in node.output if name and name in self.shapes]
        return [Unit("move", {"elements": max(sum(math.prod(shape) for shape in outputs), 1)})]

    def _loop_iterations(self, node: onnx.NodeProto) -> int:
        carried = max(len(node.input) - 2, 0)
        scanned = [name for name in node.output[carried:] if name]
        if scanned and scanned[0] in self.shapes and self.shapes[scanned[0]]:
            return max(int(self.shapes[scanned[0]][0]), 1)
        trip = _constant_int(self.graph, node.input[0]) if node.input and node.input[0] else None
        return trip if trip is not None and trip >= 1 else 1

    def _kept_block(self, node: onnx.NodeProto) -> int:
        """Elements a Transpose moves together: the product of the trailing axes its ``perm`` keeps in place."""
        x = self.shapes.get(node.input[0])
        if x is None:
            return 1
        perm = list(_attr(node, "perm", None) or reversed(range(len(x))))  # type: ignore[call-overload]
        block, axis = 1, len(x) - 1
        while axis >= 0 and perm[axis] == axis:
            block *= x[axis]
            axis -= 1
        return block if axis >= 0 else 1  # an identity perm moves nothing: a plain copy


def _constant_int(graph: onnx.GraphProto, name: str) -> int | None:
    """The value of a one-element integer initializer or ``Constant`` node named ``name``; None otherwise."""
    values = [onnx.numpy_helper.to_array(t) for t in graph.initializer if t.name == name]
    for node in graph.node:
        if node.op_type == "Constant" and name in node.output and node.attribute:
            values += _constant_value(node) or []
    for value in values:
        if value.size == 1 and value.dtype.kind in "iu":
            return int(value.reshape(-1)[0])
    return None
