"""Memory-planned execution of a ``Plan`` for one input signature.

Intermediate tensors live in a few reused per-thread buffers (``runtime/passes/memory_plan.py``; in place where a
kernel allows), graph inputs are staged into fixed buffers, and every step whose inputs then sit at fixed addresses
runs as a prebound compiled call, so the run loop is a short list of calls. A step meeting shapes other than
recorded (value-dependent shapes) makes the run start again unplanned. A view op (Reshape, Squeeze...) is fixed
once only when what shapes it is a constant: one shaped by a graph input's values runs every time, since those
values may change between runs of one input signature.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime import native
from runtime.errors import KernelError
from runtime.fixed_values import compute_fixed, fixed_steps
from runtime.ir import Node
from runtime.native import Args
from runtime.native.abi import _bound, in_sequence, native_calls
from runtime.op_traits import BLAS_OPS, VIEW_OPS
from runtime.profiling import COPY_OUTPUTS, STAGE_INPUTS, Profile
from runtime.steps import _guard_size, _read_position, _reads, _recording, _Step, store_results

if TYPE_CHECKING:
    from runtime.passes.memory_plan import MemoryPlan
    from runtime.plan import Plan


#: Input signatures (shape sets) a plan keeps static buffers for.
MAX_STATIC_PLANS = 4
#: ``ap_run_program``'s argument block (runtime/native/program.c): the call count, then (entry, block) pairs.
PG_COUNT, PG_CALLS, PG_NARGS = range(3)


class _Replan(Exception):
    """A planned step met inputs of other shapes than recorded (value-dependent shapes): run unplanned."""


def _shape_of(value: Any) -> tuple[int, ...] | None:
    return value.shape if isinstance(value, np.ndarray) else None


def _meta(value: Any) -> tuple[tuple[int, ...], np.dtype[Any]] | None:
    """Shape and dtype of a plannable result (a non-empty, non-object array)."""
    if isinstance(value, np.ndarray) and value.dtype != object and value.size > 0:
        return value.shape, value.dtype
    return None


def _signature(env: Mapping[str, Any], names: Sequence[str]) -> tuple[Any, ...] | None:
    sig = []
    for name in names:
        value = env.get(name)
        if not isinstance(value, np.ndarray):
            return None
        sig.append((value.shape, value.dtype.str))
    return tuple(sig)


class _StaticPlan:
    """One input signature's schedule with planned buffers (built from a recorded run).

    Graph inputs are copied into fixed buffers at the start of a run and outputs that live in planned buffers are
    copied out at the end, so every step whose kernel can bind runs as a prebound compiled call.
    """

    def __init__(self, plan: Plan, record: list[tuple[Any, ...]], inputs: Mapping[str, Any]) -> None:
        from runtime.passes.memory_plan import StepInfo

        self.plan = plan
        #: Outputs of view ops -> their node: copying such an output out materialises the view (the op's work).
        self.view_nodes = {step.outputs[0]: step.node for step in plan.steps if step.outputs and _is_view_op(step.node)}
        #: Those whose step the run skips (a view fixed once): their node runs only when copied out.
        self.skipped_views: set[str] = set()
        infos = []
        self.arg_shapes: list[tuple[Any, ...]] = []
        self.out_meta: list[tuple[tuple[int, ...], np.dtype[Any]] | None] = []
        for step, (arg_shapes, first) in zip(plan.steps, record, strict=True):
            kernel = step.kernel
            into = hasattr(kernel, "compute_into") and len(step.outputs) == 1 and first is not None
            reads = tuple(_reads(step.node))
            inplace = tuple(_read_position(step.node, p) for p in getattr(kernel, "inplace_inputs", ()))
            infos.append(
                StepInfo(
                    reads=reads,
                    outputs=step.outputs,
                    writes_into=into,
                    fresh=bool(getattr(kernel, "fresh_output", False)),
                    inplace=tuple(p for p in inplace if p is not None),
                    out_nbytes=int(np.prod(first[0], dtype=np.int64)) * first[1].itemsize if into else None,
                )
            )
            self.arg_shapes.append(arg_shapes)
            self.out_meta.append(first if into else None)
        # outputs are read (copied out) after the last step
        infos.append(StepInfo(reads=tuple(plan.output_names), outputs=()))
        #: Steps whose outputs this signature fixes (runtime.fixed_values): computed once, skipped by every run.
        self.fixed, self.memory, self.slices = self._plan_memory(infos)
        self.out_meta = [None if i in self.fixed else meta for i, meta in enumerate(self.out_meta)]
        self.planned = [self.memory.slot_of.get(step.outputs[0]) if step.outputs else None for step in plan.steps]
        meta_of = {step.outputs[0]: meta for step, meta in zip(plan.steps, self.out_meta, strict=True) if meta}
        #: Per step writing into a slice of a concat's output: that slot, the concat's shape and the slice.
        self.placed_out: list[tuple[int, tuple[int, ...], slice] | None] = [
            _slice_target(step.outputs[0] if step.outputs else "", self.slices, self.memory.slot_of, meta_of, meta)
            for step, meta in zip(plan.steps, self.out_meta, strict=True)
        ]
        #: Graph inputs staged into fixed buffers: name -> (shape, dtype) of this signature.
        self.staged = {
            name: (value.shape, value.dtype)
            for name, value in inputs.items()
            if name in plan.input_names and isinstance(value, np.ndarray) and value.dtype != object
        }
        self._local = threading.local()
        #: Refined when a thread builds its program (until then assume BLAS may be used).
        self.may_use_blas = True
        #: Bytes one thread's planned buffers take (slots plus staged inputs).
        self.buffer_bytes = self.memory.total_bytes + sum(
            int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for shape, dtype in self.staged.values()
        )

    def _plan_memory(self, infos: list[Any]) -> tuple[set[int], MemoryPlan, dict[str, tuple[str, int]]]:
        """The fixed steps, the memory plan and the concat placements. A fixed step's outputs get no buffer, and a
        Shape counts as fixed only if what it reads has a fixed shape: a graph input, a constant or a value the
        plan gives a buffer (first assumed for every value a kernel can write into a buffer, then checked)."""
        from runtime.passes.memory_plan import plan_buffers

        shaped = {s.outputs[0] for s, info in zip(self.plan.steps, infos, strict=False) if info.writes_into}
        for _ in range(3):
            fixed = fixed_steps(self.plan, shaped)
            trial = [replace(info, writes_into=False) if i in fixed else info for i, info in enumerate(infos)]
            metas = [None if i in fixed else meta for i, meta in enumerate(self.out_meta)]
            #: Concat by placement: part -> (its concat's output, channel offset) for parts written into their slice.
            slices = _concat_slices(self.plan, trial, metas)
            memory = plan_buffers(trial, set(), {v: c for v, (c, _) in slices.items()})
            shaped = set(memory.slot_of) | set(memory.placed)
            if fixed <= fixed_steps(self.plan, shaped):
                return fixed, memory, {v: where for v, where in slices.items() if v in memory.placed}
        slices = _concat_slices(self.plan, infos, self.out_meta)
        memory = plan_buffers(infos, set(), {v: c for v, (c, _) in slices.items()})
        return set(), memory, {v: where for v, where in slices.items() if v in memory.placed}

    def _state(self) -> tuple[dict[str, Any], list[_Entry], list[_Entry], BufferSpans]:
        """This thread's environment template, programs (step by step, and with stretches of compiled calls
        merged) and buffers (built once per thread)."""
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._build_state()
            self._local.state = state
        return state

    def _build_state(self) -> tuple[dict[str, Any], list[_Entry], list[_Entry], BufferSpans]:
        """Allocate (and touch) the slots and input buffers, then decide per step how it runs:

        ``bound``: a prebound compiled call (every input lives at a fixed address: a constant, a staged input, a
        planned buffer or a fixed view of one); ``into``: the kernel writes into its planned buffer; ``skip``: a
        view op whose result is a fixed view computed here once; ``run``: the ordinary kernel call. Consecutive
        bound steps that only call compiled kernels also form one ``ap_run_program`` call (the merged program,
        run when nobody profiles the steps one by one).
        """
        plan = self.plan
        slots = [np.zeros(n, dtype=np.uint8) for n in self.memory.slot_bytes]
        staged = {name: np.zeros(shape, dtype=dtype) for name, (shape, dtype) in self.staged.items()}
        overridable = set(plan.input_names)
        stable: dict[str, Any] = {k: v for k, v in plan.constants.items() if k not in overridable}
        stable.update(staged)
        program: list[tuple[str, Any]] = []
        fixed_values: set[str] = set()
        # arrays compiled copies of strided views write, reused every run: reshapes' results
        # (``_bound_reshape_copy``) and kernels' contiguous inputs (``_bound_on_copies``)
        copies: list[np.ndarray] = []
        for i, (step, slot, meta, placed) in enumerate(
            zip(plan.steps, self.planned, self.out_meta, self.placed_out, strict=True)
        ):
            inputs_stable = all(not name or name in stable for name in step.inputs)
            args = [stable.get(name) if name else None for name in step.inputs]
            if i in self.fixed:
                values = compute_fixed(step, args, self.arg_shapes[i])
                if values is not None:
                    for name, value in zip(step.outputs, values, strict=False):
                        if name:
                            stable[name] = value
                            fixed_values.add(name)
                    program.append(("skip", None))
                    continue
            if meta is not None and (slot is not None or placed is not None):
                shape, dtype = meta
                if placed is not None:  # a channel slice of its concat's output
                    host_slot, host_shape, channels = placed
                    out = np.ndarray(host_shape, dtype=dtype, buffer=slots[host_slot])[..., channels]
                else:
                    assert slot is not None
                    out = np.ndarray(shape, dtype=dtype, buffer=slots[slot])
                bound = None
                bind = getattr(step.kernel, "bind", None)
                if inputs_stable and bind is not None:
                    try:
                        bound = bind(out, *args)
                        if bound is None:  # a strided view it cannot read: bound on a compiled copy of it
                            bound = _bound_on_copies(bind, out, args, copies)
                    except Exception:  # binding is an optimisation; the step still runs unbound
                        bound = None
                stable[step.outputs[0]] = out
                program.append(("bound", bound) if bound is not None else ("into", out))
                continue
            # a view is fixed only when what shapes it (Reshape's shape, Squeeze's axes...) is a constant: one read
            # from a graph input changes from run to run while the staged buffer it would be computed from does not
            shaped_by_constants = all(
                not name or (name in plan.constants and name not in overridable) or name in fixed_values
                for name in step.inputs[1:]
            )
            if inputs_stable and shaped_by_constants and _is_view_op(step.node) and len(step.outputs) == 1:
                try:
                    view = step.kernel.run(*args)[0]
                except Exception:
                    view = None
                if isinstance(view, np.ndarray) and isinstance(args[0], np.ndarray) and np.shares_memory(view, args[0]):
                    stable[step.outputs[0]] = view
                    self.skipped_views.add(step.outputs[0])
                    program.append(("skip", None))
                    continue
                copy = _bound_reshape_copy(step.node, args[0], view)
                if copy is not None:  # a reshape of a strided view: its copy runs compiled into the result it made
                    stable[step.outputs[0]] = view
                    copies.append(view)
                    program.append(("bound", copy))
                    continue
            program.append(("run", None))
        env = dict(plan.constants)
        env.update(stable)
        buffers = slots + list(staged.values()) + copies
        self.may_use_blas = any(
            kind != "bound" and kind != "skip" and step.node.op_type in BLAS_OPS
            for (kind, _), step in zip(program, plan.steps, strict=True)
        )
        # the run loop walks only the steps that do something, with what they need bound up front
        compact = [
            (kind, payload, step, self.arg_shapes[i])
            for i, ((kind, payload), step) in enumerate(zip(program, plan.steps, strict=True))
            if kind != "skip"
        ]
        return env, compact, _merge_compiled(compact), BufferSpans(buffers)

    def staged_buffers(self) -> dict[str, np.ndarray]:
        """This thread's fixed buffers of the staged inputs (``Executable.input_buffers``)."""
        template = self._state()[0]
        return {name: template[name] for name in self.staged}

    def execute(self, env: dict[str, Any]) -> list[Any]:
        plan = self.plan
        template, steps, merged, buffers = self._state()
        feeds = env
        env = template.copy()
        staged = self.staged
        profile = _recording(plan.shared)
        program = merged if profile is None else steps
        started = time.perf_counter() if profile is not None else 0.0
        for name, value in feeds.items():
            if name not in staged:
                env[name] = value
            elif value is not env[name]:  # a caller feeding the buffer itself keeps its value there: no copy
                np.copyto(env[name], value)
        if profile is not None and staged:
            profile.add_io(STAGE_INPUTS, time.perf_counter() - started)
        previous = getattr(plan._local, "env", None)
        plan._local.env = env
        limit = plan.shared.options.max_alloc_bytes
        try:
            for kind, payload, step, arg_shapes in program:
                started = time.perf_counter() if profile is not None else 0.0
                if kind == "bound":
                    payload()
                elif kind == "into":
                    args = [env[name] if name else None for name in step.inputs]
                    for a, shape in zip(args, arg_shapes, strict=True):
                        if shape is not None and (not isinstance(a, np.ndarray) or a.shape != shape):
                            raise _Replan
                    _compute_into(step, payload, args)
                else:
                    args = [env[name] if name else None for name in step.inputs]
                    if step.guard_size:
                        _guard_size(step, args, limit)
                    store_results(step, step.kernel.run(*args), env)
                if profile is not None:
                    profile.add(step.node.name or step.node.label(), step.node.op_type, time.perf_counter() - started)
            if profile is None:
                return [_detach(env[name], buffers) for name in plan.output_names]
            return self._copy_out_profiled(env, buffers, profile)
        except KeyError as exc:
            raise KernelError(f"value {exc.args[0]!r} was not available when needed") from None
        finally:
            plan._local.env = previous

    def _copy_out_profiled(self, env: dict[str, Any], buffers: BufferSpans, profile: Profile) -> list[Any]:
        """``_detach`` every output, timing each copy: a view op's output is materialised here (its node's time),
        any other output living in a planned buffer is copied out (``COPY_OUTPUTS``)."""
        values = []
        for name in self.plan.output_names:
            started = time.perf_counter()
            value = env[name]
            detached = _detach(value, buffers)
            values.append(detached)
            if detached is value:
                continue
            seconds = time.perf_counter() - started
            node = self.view_nodes.get(name)
            if node is None:
                profile.add_io(COPY_OUTPUTS, seconds)
            else:
                profile.add(node.name or node.label(), node.op_type, seconds, calls=int(name in self.skipped_views))
        return values


def _concat_slices(
    plan: Plan, infos: Sequence[Any], out_meta: Sequence[tuple[tuple[int, ...], np.dtype[Any]] | None]
) -> dict[str, tuple[str, int]]:
    """Concat by placement, offered: the inputs of a last-axis concat (kernel trait ``concat_last_axis``) whose
    producer can write a channel slice (``channel_slice_output``) and which nothing else reads, with their offset
    along the last axis. The memory plan decides which offers stand."""
    producer = {step.outputs[0]: i for i, step in enumerate(plan.steps) if len(step.outputs) == 1}
    readers: dict[str, int] = {}
    for info in infos:
        for name in info.reads:
            readers[name] = readers.get(name, 0) + 1
    found: dict[str, tuple[str, int]] = {}
    for step, meta in zip(plan.steps, out_meta, strict=True):
        if meta is None or not getattr(step.kernel, "concat_last_axis", False):
            continue
        offset = 0
        for name in step.inputs:
            i = producer.get(name)
            part = out_meta[i] if i is not None else None
            if i is None or part is None or part[1] != meta[1] or part[0][:-1] != meta[0][:-1]:
                break  # the offsets of the parts after it are not known
            writes_slices = getattr(plan.steps[i].kernel, "channel_slice_output", False)
            if writes_slices and readers.get(name) == 1 and name not in plan.output_names:
                found[name] = (step.outputs[0], offset)
            offset += part[0][-1]
    return found


def _slice_target(
    value: str,
    slices: Mapping[str, tuple[str, int]],
    slot_of: Mapping[str, int],
    meta_of: Mapping[str, tuple[tuple[int, ...], np.dtype[Any]]],
    meta: tuple[tuple[int, ...], np.dtype[Any]] | None,
) -> tuple[int, tuple[int, ...], slice] | None:
    """Where a placed concat input is written: its concat's slot and shape, and its slice of the last axis."""
    if value not in slices or meta is None:
        return None
    host, offset = slices[value]
    return slot_of[host], meta_of[host][0], slice(offset, offset + meta[0][-1])


#: One entry of a run program: (kind, payload, step, recorded argument shapes).
_Entry = tuple[str, Any, _Step, Any]


def _merge_compiled(program: list[_Entry]) -> list[_Entry]:
    """``program`` with every stretch of two or more bound steps that only call compiled kernels (their
    ``native_calls``) replaced by one ``ap_run_program`` call, named by the stretch's first step."""
    lib = native.lib()
    if lib is None:
        return program
    merged: list[_Entry] = []
    stretch: list[tuple[_Entry, tuple[tuple[int, int], ...]]] = []

    def close() -> None:
        if len(stretch) < 2:
            merged.extend(entry for entry, _ in stretch)
        else:
            calls = [call for _, made in stretch for call in made]
            block = Args(PG_CALLS + 2 * len(calls))
            block.block[PG_COUNT] = len(calls)
            block.block[PG_CALLS:] = np.asarray(calls, dtype=np.int64).reshape(-1)
            block.keep.extend(entry[1] for entry, _ in stretch)  # the bound calls keep their blocks alive
            first = stretch[0][0]
            merged.append(("bound", _bound(lib.run_program, block), first[2], first[3]))
        stretch.clear()

    for entry in program:
        made = native_calls(entry[1]) if entry[0] == "bound" else None
        if made is None:
            close()
            merged.append(entry)
        else:
            stretch.append((entry, made))
    close()
    return merged


#: View ops whose result is their input's elements in C order (a copy of them where the input is strided).
C_ORDER_VIEWS = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})


def _bound_reshape_copy(node: Node, source: Any, result: Any) -> Any:
    """A compiled copy of ``source``'s elements into ``result`` (what a reshape of a strided view computed: a fresh
    array), for a reshape of a source at a fixed address; None when it does not apply."""
    if node.domain or node.op_type not in C_ORDER_VIEWS:
        return None
    if not isinstance(source, np.ndarray) or not isinstance(result, np.ndarray):
        return None
    lib = native.lib()
    if lib is None:
        return None
    from runtime.native.convnets import strided_copy_call

    return strided_copy_call(lib, source, result)


def _bound_on_copies(bind: Any, out: np.ndarray, args: list[Any], copies: list[np.ndarray]) -> Any:
    """``bind(out, *args)`` with each strided array argument (a fixed view: a Transpose's of a planned buffer)
    replaced by a contiguous copy that a compiled strided copy refreshes before the kernel, both one call that the
    merged program can take in (None: no strided argument, or the kernel cannot bind either way). The copies'
    buffers join ``copies``."""
    lib = native.lib()
    strided = [i for i, a in enumerate(args) if isinstance(a, np.ndarray) and a.size and not a.flags.c_contiguous]
    if lib is None or not strided:
        return None
    from runtime.native.convnets import strided_copy_call

    made, fresh = [], list(args)
    for i in strided:
        fresh[i] = np.empty(args[i].shape, dtype=args[i].dtype)
        copy = strided_copy_call(lib, args[i], fresh[i])
        if copy is None:
            return None
        made.append(copy)
    bound = bind(out, *fresh)
    if bound is None or native_calls(bound) is None:
        return None
    copies.extend(fresh[i] for i in strided)
    return in_sequence(*made, bound)


def _is_view_op(node: Node) -> bool:
    return node.op_type in VIEW_OPS and not node.domain


class BufferSpans:
    """The byte ranges of a thread's planned buffers, merged and sorted: whether a value may share memory with any
    of them (``np.may_share_memory``'s bounds test) is one bisection, not a test per buffer (a training graph's
    200 outputs against its 400 buffers took a sixth of ResNet-50's step)."""

    def __init__(self, buffers: Sequence[np.ndarray]) -> None:
        spans: list[list[int]] = []
        for low, high in sorted(byte_bounds(b) for b in buffers if b.size):
            if spans and low < spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], high)
            else:
                spans.append([low, high])
        self.starts = [low for low, _ in spans]
        self.ends = [high for _, high in spans]

    def overlaps(self, value: np.ndarray) -> bool:
        if not value.size:
            return False
        low, high = byte_bounds(value)
        index = bisect.bisect_left(self.starts, high) - 1  # the last span starting before the value ends
        return index >= 0 and self.ends[index] > low


def byte_bounds(a: np.ndarray) -> tuple[int, int]:
    """The first byte an array's elements use and one past the last (``numpy.lib.array_utils.byte_bounds``,
    which NumPy 1.26 keeps elsewhere)."""
    low = high = int(a.__array_interface__["data"][0])
    for size, stride in zip(a.shape, a.strides, strict=True):
        if stride < 0:
            low += stride * (size - 1)
        else:
            high += stride * (size - 1)
    return low, high + a.itemsize


def _detach(value: Any, buffers: BufferSpans) -> Any:
    """A copy of an output that lives in (or views) this thread's reusable buffers; the value itself otherwise."""
    if isinstance(value, np.ndarray) and buffers.overlaps(value):
        return value.copy()
    return value


def _compute_into(step: _Step, out: np.ndarray, args: list[Any]) -> None:
    try:
        result = step.kernel.compute_into(out, *args)  # type: ignore[attr-defined]
        if result is not None and result is not out:
            np.copyto(out, result)
    except (KernelError, _Replan):
        raise
    except Exception as exc:
        node = step.node
        raise KernelError(f"node {node.name!r} ({node.op_type}): {type(exc).__name__}: {exc}") from exc
