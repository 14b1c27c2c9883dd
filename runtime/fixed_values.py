"""Values an input signature fixes: the static plan computes them once and skips their steps on every run.

Models exported with a dynamic batch rebuild constants from shapes on every run (``Shape -> Gather -> Unsqueeze ->
Concat -> ConstantOfShape`` for a recurrent layer's zero state, ``Shape -> Slice -> Concat -> Reshape`` for a
flatten). Within one input signature those values never change, so the memory-planned run need not recompute them:

    # Shape(v), Size(v) where v's shape is fixed (a graph input, a constant, a planned buffer, a view of one
    #     shaped by constants: a ViT's patch tokens before its class token is expanded to the batch) -> fixed
    # op(a, b, ...) where every input is a constant or fixed, op deterministic, no subgraph -> fixed

A value the caller receives (a graph output) is never fixed: the caller may keep or change it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.op_traits import NEVER_FOLD, VIEW_OPS

if TYPE_CHECKING:
    from runtime.plan import Plan

#: Ops whose result depends only on their input's shape.
SHAPE_OPS = frozenset({"Shape", "Size"})
#: A computed value larger than this stays a per-run computation (it would otherwise be kept per thread).
MAX_FIXED_BYTES = 1 << 22


def fixed_steps(plan: Plan, shape_fixed: Collection[str]) -> set[int]:
    """Indices of the steps of ``plan`` whose outputs are fixed, given the values whose shapes are fixed besides
    the graph inputs and constants (the planned buffers, or the steps that can write into one)."""
    overridable = set(plan.input_names)
    values = {name for name in plan.constants if name not in overridable}
    shaped = set(values) | overridable | set(shape_fixed)
    outputs = set(plan.output_names)
    found: set[int] = set()
    for i, step in enumerate(plan.steps):
        node = step.node
        if node.domain or node.op_type in NEVER_FOLD or any(True for _ in node.subgraphs()):
            continue
        named = [o for o in step.outputs if o]
        if not named or any(o in outputs for o in named):
            continue
        if node.op_type in SHAPE_OPS:
            ok = bool(step.inputs) and step.inputs[0] in shaped
        else:
            ok = all(not name or name in values for name in step.inputs)
        if ok:
            found.add(i)
            values.update(named)
            shaped.update(named)
        elif _view_of_fixed_shape(node.op_type, step.inputs, shaped, values):
            shaped.update(named)
    return found


def _view_of_fixed_shape(op_type: str, inputs: Sequence[str], shaped: set[str], values: set[str]) -> bool:
    """Whether a view op's output has a fixed shape: it follows its input's shape and its constant (or fixed) shape
    operands, never its data."""
    if op_type not in VIEW_OPS or not inputs or inputs[0] not in shaped:
        return False
    return all(not name or name in values for name in inputs[1:])


def compute_fixed(step: Any, args: list[Any], arg_shapes: Sequence[Any]) -> list[Any] | None:
    """The outputs of a fixed step (a Shape op's input stands in by its recorded shape), or None when they
    cannot be had (an input missing, a failure, or a result too large to keep)."""
    args = list(args)
    if step.node.op_type in SHAPE_OPS and args and args[0] is None and arg_shapes and arg_shapes[0] is not None:
        args[0] = np.broadcast_to(np.zeros((), dtype=np.float32), arg_shapes[0])
    if any(name and a is None for name, a in zip(step.inputs, args, strict=True)):
        return None
    try:
        results = step.kernel.run(*args)
    except Exception:  # the step then runs as usual, and reports its error there
        return None
    values = [np.asarray(r) if isinstance(r, np.generic) else r for r in results]
    if len(values) < len([o for o in step.outputs if o]):
        return None
    if any(not isinstance(v, np.ndarray) or v.nbytes > MAX_FIXED_BYTES for v in values):
        return None
    return values
