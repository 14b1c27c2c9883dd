"""Recurrent layers: RNN, LSTM, GRU (forward/reverse/bidirectional, layouts 0/1, sequence_lens, initial
states, peepholes, custom activations with alpha/beta, clip, linear_before_reset, input_forget).

The input projection ``X @ W^T`` for all time steps is one product; only the recurrence loops over time. Neither
path calls BLAS (the compiled loop has its own GEMMs, the NumPy path contracts with ``np.einsum``), so a model
with recurrent layers runs without the per-run BLAS thread cap.
``sequence_lens`` is handled with masks: a batch entry past its length keeps its state and emits zeros, and the
reverse direction naturally starts at each entry's last valid step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from runtime.kernels import rnn_native
from runtime.kernels.base import Kernel, register
from runtime.kernels.rnn_native import PackCache

Activation = Callable[[np.ndarray], np.ndarray]


def _times_t(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b.T`` over the last axis of ``a``, without BLAS (``np.einsum`` unoptimised never calls it)."""
    return np.einsum("...k,nk->...n", a, b)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _make_activation(name: str, alpha: float | None, beta: float | None) -> Activation:
    """One ONNX RNN activation by (case-insensitive) name, with its alpha/beta defaults."""
    key = name.lower()
    if key == "relu":
        return lambda x: np.maximum(x, 0)
    if key == "tanh":
        return np.tanh
    if key == "sigmoid":
        return _sigmoid
    if key == "affine":
        a, b = alpha if alpha is not None else 1.0, beta if beta is not None else 0.0
        return lambda x: a * x + b
    if key == "leakyrelu":
        a = alpha if alpha is not None else 0.01
        return lambda x: np.where(x >= 0, x, a * x)
    if key == "thresholdedrelu":
        a = alpha if alpha is not None else 1.0
        return lambda x: np.where(x > a, x, 0)
    if key == "scaledtanh":
        a, b = alpha if alpha is not None else 1.0, beta if beta is not None else 1.0
        return lambda x: a * np.tanh(b * x)
    if key == "hardsigmoid":
        a, b = alpha if alpha is not None else 0.2, beta if beta is not None else 0.5
        return lambda x: np.clip(a * x + b, 0, 1)
    if key == "elu":
        a = alpha if alpha is not None else 1.0
        return lambda x: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1))
    if key == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if key == "softplus":
        return lambda x: np.logaddexp(0, x)
    raise ValueError(f"unsupported RNN activation {name!r}")


#: Activations the compiled loop implements (runtime/native/recurrent.c codes); alpha/beta do not apply to them.
_NATIVE_ACTIVATIONS = {"sigmoid": 0, "tanh": 1, "relu": 2}

_USES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
_USES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


@dataclass(frozen=True)
class Direction:
    """What one direction's cell steps share: the recurrence weights ``r``, the input and recurrence biases,
    the cell's extra parameters (LSTM peepholes, else None) and its activations."""

    r: np.ndarray
    wb: np.ndarray
    rb: np.ndarray
    params: Any
    acts: list[Activation]


class _Recurrent(Kernel):
    """Shared plumbing: attribute decoding, layouts, directions, masks; subclasses define one cell step."""

    #: Gates per hidden unit in W/R (RNN 1, GRU 3, LSTM 4).
    gates: ClassVar[int] = 1
    default_activations: ClassVar[list[str]] = []
    attr_defaults: ClassVar[dict[str, Any]] = {"direction": "forward", "layout": 0}

    def setup(self) -> None:
        direction = self.attrs["direction"]
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ValueError(f"unsupported direction {direction!r}")
        self.num_dir = 2 if direction == "bidirectional" else 1
        per_dir = len(self.default_activations)
        names = list(self.attrs.get("activations") or self.default_activations * self.num_dir)
        if len(names) == per_dir and self.num_dir == 2:
            names = names * 2
        alphas = list(self.attrs.get("activation_alpha") or [])
        betas = list(self.attrs.get("activation_beta") or [])
        acts = []
        for name in names:
            key = name.lower()
            alpha = alphas.pop(0) if key in _USES_ALPHA and alphas else None
            beta = betas.pop(0) if key in _USES_BETA and betas else None
            acts.append(_make_activation(name, alpha, beta))
        self.activations = [acts[d * per_dir : (d + 1) * per_dir] for d in range(self.num_dir)]
        clip = self.attrs.get("clip")
        self.clip = None if clip is None else float(clip)
        codes = [_NATIVE_ACTIVATIONS.get(name.lower()) for name in names]
        #: Per direction, the compiled loop's activation codes; None where one has no compiled form.
        self.native_acts: list[list[int]] | None = None
        if None not in codes and len(codes) == per_dir * self.num_dir:
            self.native_acts = [
                [int(c or 0) for c in codes[d * per_dir : (d + 1) * per_dir]] for d in range(self.num_dir)
            ]
        self._packed = PackCache()

    def _clip(self, x: np.ndarray) -> np.ndarray:
        return x if self.clip is None else np.clip(x, -self.clip, self.clip)

    def _native(self, x: np.ndarray) -> Any:
        """The compiled kernels where the loop can take this call (native activations, float32), else None."""
        if self.native_acts is None or x.dtype != np.float32 or x.ndim != 3 or not x.size:
            return None
        from runtime import native

        return native.lib()

    def compute(self, x: np.ndarray, w: np.ndarray, r: np.ndarray, *optional: np.ndarray | None) -> Any:
        lib = self._native(x)
        if lib is not None:
            out = rnn_native.run(self, lib, x, w, r, optional)
            if out is not None:
                return out
        return self.compute_numpy(x, w, r, *optional)

    def compute_into(self, out: np.ndarray, x: np.ndarray, w: np.ndarray, r: np.ndarray, *optional: Any) -> Any:
        """``Y`` where it is the node's only output (memory-planned runs): written into ``out`` by the loop."""
        lib = self._native(x)
        if lib is not None and self.node.n_outputs == 1:
            done = rnn_native.run(self, lib, x, w, r, optional, y_out=out)
            if done is not None:
                return done[0]
        return self.compute(x, w, r, *optional)[0]

    def bind(self, out: np.ndarray, x: np.ndarray, w: np.ndarray, r: np.ndarray, *optional: Any) -> Any:
        """A prebound compiled call writing ``Y`` (the only output) into ``out``; None where the loop cannot."""
        lib = self._native(x)
        if lib is None or self.node.n_outputs != 1:
            return None
        return rnn_native.bind(self, lib, out, x, w, r, optional)

    def compute_numpy(self, x: np.ndarray, w: np.ndarray, r: np.ndarray, *optional: np.ndarray | None) -> Any:
        """The NumPy reference: the same projection as one product, then one Python step per time step."""
        layout = int(self.attrs["layout"])
        dtype = x.dtype
        ct = np.float64 if dtype == np.float64 else np.float32
        if layout == 1:
            x = np.swapaxes(x, 0, 1)
        seq, batch, _ = x.shape
        hidden = r.shape[-1]
        b = optional[0] if len(optional) > 0 else None
        seq_lens = optional[1] if len(optional) > 1 else None
        states = [self._state_input(optional, k, layout) for k in range(2, 2 + self.n_states)]
        extra = optional[2 + self.n_states] if len(optional) > 2 + self.n_states else None

        lens = np.full(batch, seq, dtype=np.int64) if seq_lens is None else seq_lens.astype(np.int64)
        steps_mask = np.arange(seq)[:, None] < lens[None, :]  # (seq, batch)
        y = np.zeros((seq, self.num_dir, batch, hidden), dtype=ct)
        finals: list[list[np.ndarray]] = [[] for _ in range(self.n_states)]
        g = self.gates
        for d in range(self.num_dir):
            wd, rd = w[d].astype(ct), r[d].astype(ct)
            if b is None:
                wb = np.zeros(g * hidden, dtype=ct)
                rb = np.zeros(g * hidden, dtype=ct)
            else:
                wb, rb = b[d, : g * hidden].astype(ct), b[d, g * hidden :].astype(ct)
            x_proj = _times_t(x.astype(ct, copy=False), wd)  # (seq, batch, G*hidden)
            init = [np.zeros((batch, hidden), dtype=ct) if s is None else s[d].astype(ct) for s in states]
            reverse = self.attrs["direction"] == "reverse" or d == 1
            order = range(seq - 1, -1, -1) if reverse else range(seq)
            cur = init
            dw = Direction(rd, wb, rb, self._direction_params(d, extra, hidden, ct), self.activations[d])
            for t in order:
                new = self.cell(x_proj[t], cur, dw)
                active = steps_mask[t][:, None]
                cur = [np.where(active, n, c) for n, c in zip(new, cur, strict=True)]
                y[t, d] = np.where(active, new[0], 0)
            for k in range(self.n_states):
                finals[k].append(cur[k])

        outs: list[np.ndarray] = []
        y_out = y if layout == 0 else y.transpose(2, 0, 1, 3)
        outs.append(y_out.astype(dtype))
        for k in range(self.n_states):
            final = np.stack(finals[k])
            outs.append((final if layout == 0 else final.transpose(1, 0, 2)).astype(dtype))
        return tuple(outs[: max(1, self.node.n_outputs)])

    @property
    def n_states(self) -> int:
        return 1

    def _state_input(self, optional: tuple[np.ndarray | None, ...], k: int, layout: int) -> np.ndarray | None:
        s = optional[k] if len(optional) > k else None
        if s is None or layout == 0:
            return s
        return np.swapaxes(s, 0, 1)

    def _direction_params(self, d: int, extra: np.ndarray | None, hidden: int, ct: type) -> Any:
        return None

    def cell(self, xw: np.ndarray, state: list[np.ndarray], dw: Direction) -> list[np.ndarray]:
        """One time step: the new states from this step's input projection ``xw`` and the current ``state``."""
        raise NotImplementedError


@register
class RNN(_Recurrent):
    """``H = f(X W^T + H R^T + Wb + Rb)``."""

    op_type = "RNN"
    since_version = 1
    gates = 1
    default_activations: ClassVar[list[str]] = ["Tanh"]

    def cell(self, xw: np.ndarray, state: list[np.ndarray], dw: Direction) -> list[np.ndarray]:
        (h,) = state
        return [dw.acts[0](self._clip(xw + _times_t(h, dw.r) + dw.wb + dw.rb))]


@register
class GRU(_Recurrent):
    """Gated recurrent unit, gate order (z, r, h); ``linear_before_reset`` applies R_h before the reset gate."""

    op_type = "GRU"
    since_version = 1
    gates = 3
    default_activations: ClassVar[list[str]] = ["Sigmoid", "Tanh"]
    attr_defaults: ClassVar[dict[str, Any]] = {**_Recurrent.attr_defaults, "linear_before_reset": 0}

    def cell(self, xw: np.ndarray, state: list[np.ndarray], dw: Direction) -> list[np.ndarray]:
        (h,) = state
        f, g = dw.acts
        r, wb, rb = dw.r, dw.wb, dw.rb
        hid = h.shape[1]
        rz_r = r[: 2 * hid]
        hr = _times_t(h, rz_r)
        z = f(self._clip(xw[:, :hid] + hr[:, :hid] + wb[:hid] + rb[:hid]))
        reset = f(self._clip(xw[:, hid : 2 * hid] + hr[:, hid:] + wb[hid : 2 * hid] + rb[hid : 2 * hid]))
        r_h = r[2 * hid :]
        if self.attrs["linear_before_reset"]:
            cand = xw[:, 2 * hid :] + reset * (_times_t(h, r_h) + rb[2 * hid :]) + wb[2 * hid :]
        else:
            cand = xw[:, 2 * hid :] + _times_t(reset * h, r_h) + rb[2 * hid :] + wb[2 * hid :]
        h_tilde = g(self._clip(cand))
        return [(1 - z) * h_tilde + z * h]


@register
class LSTM(_Recurrent):
    """Long short-term memory, gate order (i, o, f, c) with optional peepholes (i, o, f) and input_forget."""

    op_type = "LSTM"
    since_version = 1
    gates = 4
    default_activations: ClassVar[list[str]] = ["Sigmoid", "Tanh", "Tanh"]
    attr_defaults: ClassVar[dict[str, Any]] = {**_Recurrent.attr_defaults, "input_forget": 0}

    @property
    def n_states(self) -> int:
        return 2

    def _direction_params(self, d: int, extra: np.ndarray | None, hidden: int, ct: type) -> Any:
        if extra is None:
            return None
        p = extra[d].astype(ct)
        return p[:hidden], p[hidden : 2 * hidden], p[2 * hidden :]

    def cell(self, xw: np.ndarray, state: list[np.ndarray], dw: Direction) -> list[np.ndarray]:
        h, c = state
        f, g, hact = dw.acts
        hid = h.shape[1]
        pre = xw + _times_t(h, dw.r) + dw.wb + dw.rb
        pi, po, pf = dw.params if dw.params is not None else (0.0, 0.0, 0.0)
        i = f(self._clip(pre[:, :hid] + pi * c))
        coupled = bool(self.attrs["input_forget"])
        fg = 1 - i if coupled else f(self._clip(pre[:, 2 * hid : 3 * hid] + pf * c))
        cand = g(self._clip(pre[:, 3 * hid :]))
        c_new = fg * c + i * cand
        o = f(self._clip(pre[:, hid : 2 * hid] + po * c_new))
        return [o * hact(c_new), c_new]
