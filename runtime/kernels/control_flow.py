"""Control flow: If, Loop, Scan (opset 8 and 9+), SequenceMap.

Bodies are compiled once in ``setup`` through ``self.node.compile_subgraph``; the executor binds the outer-scope
values a body reads each time it is called. Loops stop at ``MAX_LOOP_ITERATIONS`` with a KernelError rather than
hang on a condition that never turns false.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from runtime.errors import KernelError
from runtime.kernels.base import Kernel, SubgraphFn, register

#: A Loop running more iterations than this is stopped (override with APPOPT_MAX_LOOP_ITERATIONS): an iteration
#: costs ~50 us of interpreter overhead at least, so 10**5 is seconds, where the earlier 10**7 was ten minutes of
#: what looks like a hang (a trip count of INT64_MAX with a condition that never turns false).
MAX_LOOP_ITERATIONS = int(os.environ.get("APPOPT_MAX_LOOP_ITERATIONS", 100_000))


def _truth(value: Any, what: str) -> bool:
    arr = np.asarray(value)
    if arr.size != 1:
        raise KernelError(f"{what} must hold exactly one element, got shape {list(arr.shape)}")
    return bool(arr.reshape(-1)[0])


class _WithBodies(Kernel):
    def compile(self, name: str) -> SubgraphFn:
        graph = self.attrs.get(name)
        if graph is None:
            raise ValueError(f"attribute {name!r} (a graph) is required")
        if self.node.compile_subgraph is None:
            raise ValueError("control flow needs the executor's subgraph compiler")
        return self.node.compile_subgraph(graph)


@register
class If(_WithBodies):
    """Run ``then_branch`` or ``else_branch`` depending on a boolean scalar."""

    op_type = "If"
    uses_blas = True
    since_version = 1

    def setup(self) -> None:
        self.then_branch = self.compile("then_branch")
        self.else_branch = self.compile("else_branch")

    def compute(self, cond: Any) -> list[Any]:
        branch = self.then_branch if _truth(cond, "If condition") else self.else_branch
        return list(branch())


@register
class Loop(_WithBodies):
    """``for i in range(M) while cond``: carried values flow iteration to iteration, scan outputs are stacked."""

    op_type = "Loop"
    uses_blas = True
    since_version = 1

    def setup(self) -> None:
        self.body = self.compile("body")
        self.n_carried = self.node.n_inputs - 2

    def compute(self, trip_count: Any = None, cond: Any = None, *initial: Any) -> list[Any]:
        limit = None if trip_count is None else int(np.asarray(trip_count).reshape(-1)[0])
        keep_going = True if cond is None else _truth(cond, "Loop condition")
        carried = list(initial)
        scans: list[list[Any]] | None = None
        i = 0
        while keep_going and (limit is None or i < limit):
            if i >= MAX_LOOP_ITERATIONS:
                raise KernelError(
                    f"node {self.node.name!r} (Loop): ran more than {MAX_LOOP_ITERATIONS} iterations "
                    "(APPOPT_MAX_LOOP_ITERATIONS)"
                )
            out = self.body(np.asarray(i, dtype=np.int64), np.asarray(keep_going), *carried)
            keep_going = _truth(out[0], "Loop body condition")
            carried = list(out[1 : 1 + len(carried)])
            step_scans = out[1 + len(carried) :]
            if scans is None:
                scans = [[] for _ in step_scans]
            for acc, value in zip(scans, step_scans, strict=True):
                acc.append(value)
            i += 1
        n_scan = self.node.n_outputs - len(carried)
        stacked = [np.stack(acc) for acc in scans] if scans is not None else []
        while len(stacked) < n_scan:  # zero iterations: empty scan outputs
            stacked.append(_empty_scan(self.body, 1 + len(carried) + len(stacked)))
        return carried + stacked


def _empty_scan(body: SubgraphFn, output_index: int) -> np.ndarray:
    """An empty stack for a scan output that never produced an element (dtype/shape from the body's types)."""
    values = getattr(body, "output_values", None)
    dtype: Any = np.float32
    shape: tuple[int, ...] = ()
    if values is not None and output_index < len(values):
        value = values[output_index]
        if value.dtype is not None:
            dtype = value.dtype
        if value.static_shape is not None:
            shape = value.static_shape
    return np.zeros((0, *shape), dtype=dtype)


class _Scan(_WithBodies):
    """Run ``body`` once per step of the ``num_scan_inputs`` scan inputs, carrying the state variables."""

    op_type = "Scan"
    uses_blas = True

    def setup(self) -> None:
        self.body = self.compile("body")
        self.n_scan = int(self.attrs["num_scan_inputs"])


@register
class Scan8(_Scan):
    """Opset 8 Scan: a leading batch axis, optional per-batch ``sequence_lens``."""

    since_version = 8

    def compute(self, sequence_lens: Any, *values: Any) -> list[Any]:
        n_state = len(values) - self.n_scan
        states, scans = list(values[:n_state]), list(values[n_state:])
        directions = self.attrs.get("directions") or [0] * self.n_scan
        batch = scans[0].shape[0]
        max_len = scans[0].shape[1]
        lens = np.full(batch, max_len) if sequence_lens is None else np.asarray(sequence_lens).reshape(-1)
        final_states: list[list[Any]] = [[] for _ in range(n_state)]
        outputs: list[list[Any]] | None = None
        for b in range(batch):
            st = [s[b] for s in states]
            per_step: list[list[Any]] = []
            for t in range(int(lens[b])):
                slices = [x[b, max_len - 1 - t if d else t] for x, d in zip(scans, directions, strict=True)]
                out = self.body(*st, *slices)
                st = list(out[:n_state])
                per_step.append(list(out[n_state:]))
            for k in range(n_state):
                final_states[k].append(st[k])
            if outputs is None:
                n_out = self.node.n_outputs - n_state
                outputs = [[] for _ in range(n_out)]
            for k, acc in enumerate(outputs):
                steps = [p[k] for p in per_step]
                stacked = np.stack(steps) if steps else None
                acc.append(stacked)
        result: list[Any] = [np.stack(s) for s in final_states]
        for acc in outputs or []:
            template = next(a for a in acc if a is not None)
            padded = [a if a is not None and a.shape[0] == max_len else _pad_time(a, template, max_len) for a in acc]
            result.append(np.stack(padded))
        return result


def _pad_time(a: np.ndarray | None, template: np.ndarray, length: int) -> np.ndarray:
    out = np.zeros((length, *template.shape[1:]), dtype=template.dtype)
    if a is not None:
        out[: a.shape[0]] = a
    return out


@register
class Scan(_Scan):
    """Opset 9+ Scan: state variables plus scan inputs sliced along any axis, in either direction."""

    since_version = 9

    def compute(self, *values: Any) -> list[Any]:
        n_state = len(values) - self.n_scan
        states, scans = list(values[:n_state]), [np.asarray(x) for x in values[n_state:]]
        in_axes = self.attrs.get("scan_input_axes") or [0] * self.n_scan
        in_dirs = self.attrs.get("scan_input_directions") or [0] * self.n_scan
        axes = [a + x.ndim if a < 0 else a for a, x in zip(in_axes, scans, strict=True)]
        lengths = {x.shape[a] for x, a in zip(scans, axes, strict=True)}
        if len(lengths) != 1:
            raise ValueError(f"scan inputs disagree on the sequence length: {sorted(lengths)}")
        length = lengths.pop()
        moved = [np.moveaxis(x, a, 0) for x, a in zip(scans, axes, strict=True)]
        n_out = self.node.n_outputs - n_state
        collected: list[list[Any]] = [[] for _ in range(n_out)]
        for t in range(length):
            slices = [x[length - 1 - t] if d else x[t] for x, d in zip(moved, in_dirs, strict=True)]
            out = self.body(*states, *slices)
            states = list(out[:n_state])
            for acc, value in zip(collected, out[n_state:], strict=True):
                acc.append(value)
        out_axes = self.attrs.get("scan_output_axes") or [0] * n_out
        out_dirs = self.attrs.get("scan_output_directions") or [0] * n_out
        result: list[Any] = list(states)
        for k, acc in enumerate(collected):
            if not acc:
                result.append(_empty_scan(self.body, n_state + k))
                continue
            if out_dirs[k]:
                acc = acc[::-1]
            stacked = np.stack(acc)
            axis = out_axes[k] + stacked.ndim if out_axes[k] < 0 else out_axes[k]
            result.append(np.moveaxis(stacked, 0, axis))
        return result


@register
class SequenceMap(_WithBodies):
    """Apply ``body`` to each element of the input sequence(s); tensors among the inputs are passed whole."""

    op_type = "SequenceMap"
    since_version = 17

    def setup(self) -> None:
        self.body = self.compile("body")

    def compute(self, sequence: list[Any], *others: Any) -> list[list[Any]]:
        length = len(sequence)
        for other in others:
            if isinstance(other, list) and len(other) != length:
                raise ValueError(f"sequences of different lengths: {length} and {len(other)}")
        outputs: list[list[Any]] = [[] for _ in range(self.node.n_outputs)]
        for i in range(length):
            args = [sequence[i], *(o[i] if isinstance(o, list) else o for o in others)]
            for acc, value in zip(outputs, self.body(*args), strict=True):
                acc.append(value)
        return outputs
