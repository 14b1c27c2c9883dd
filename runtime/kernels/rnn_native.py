"""RNN, GRU and LSTM on the compiled loop (``ap_rnn_seq`` in runtime/native/recurrent.c).

The input projection of every time step and direction is one matmul, ``X @ [W_0; W_1]^T`` plus the biases that
can be folded into it (all of them, except GRU's ``Rb_h`` under ``linear_before_reset``). Each direction's
recurrence then runs in one C call: per step a GEMM of the batch's states against ``R^T`` (packed once per weight,
each gate padded to 16 columns, stored in panels of 16 columns) and the gate math, with ``sequence_lens``, initial
states, peepholes, clip and ``input_forget``, writing straight into ``Y``, ``Y_h`` and ``Y_c`` in either layout.

``run`` returns ``None`` where the inputs are outside what the loop handles (the caller then takes the NumPy
path): a dtype other than float32, an inconsistent shape, ``sequence_lens`` not of shape ``(batch,)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.kernels.fused import _Cache
from runtime.native import Args, NativeLib

if TYPE_CHECKING:
    from runtime.kernels.rnn import _Recurrent

#: Lanes of one vector: each gate's columns in the packed R^T are padded to a multiple of this.
LANES = 16
KIND = {1: 0, 3: 1, 4: 2}  # gates per unit -> recurrent.c's kind (RNN, GRU, LSTM)
(
    RN_KIND,
    RN_XP,
    RN_XP_T,
    RN_XP_B,
    RN_RT,
    RN_SEQ,
    RN_BATCH,
    RN_HIDDEN,
    RN_H0,
    RN_H0_B,
    RN_C0,
    RN_C0_B,
    RN_LENS,
    RN_REVERSE,
    RN_Y,
    RN_Y_T,
    RN_Y_B,
    RN_HN,
    RN_HN_B,
    RN_CN,
    RN_CN_B,
    RN_HAS_CLIP,
    RN_CLIP,
    RN_LBR,
    RN_RBH,
    RN_PEEP,
    RN_INPUT_FORGET,
    RN_ACT_F,
    RN_ACT_G,
    RN_ACT_H,
    RN_SERIAL_WORK,
    RN_NARGS,
) = range(32)
#: Recurrent multiply-adds per step from which a step's hidden units are split between the pool's threads. Each
#: step ends in a join, and on a loaded machine a descheduled worker holds its share up: below ~2M (an LSTM of
#: 512 units at batch 1) splitting measured slower here, at batch 8 it ran 1.7x faster (13.8 -> 8.1 ms).
SERIAL_WORK = 1 << 21


@dataclass(frozen=True)
class Packed:
    """What the loop needs from the constant inputs, derived once per (W, R, B, P) set of arrays."""

    w_t: np.ndarray  # (input, dirs * G * H): every direction's W, transposed, for one projection matmul
    bias: np.ndarray  # (dirs * G * H,): the biases folded into the projection
    r_t: list[np.ndarray]  # per direction (G * Hp / 16, H, 16): R^T, each gate padded to Hp columns, in panels
    rb_h: list[np.ndarray | None]  # per direction: GRU's Rb_h where linear_before_reset keeps it apart
    peep: list[np.ndarray | None]  # per direction: LSTM peepholes (3H)
    r_t_at: list[int] = field(init=False)
    rb_h_at: list[int] = field(init=False)
    peep_at: list[int] = field(init=False)

    def __post_init__(self) -> None:
        # the addresses of the constant buffers, taken once (0 for an absent one)
        object.__setattr__(self, "r_t_at", [_addr(t) for t in self.r_t])
        object.__setattr__(self, "rb_h_at", [0 if t is None else _addr(t) for t in self.rb_h])
        object.__setattr__(self, "peep_at", [0 if t is None else _addr(t) for t in self.peep])


def _addr(array: np.ndarray) -> int:
    """An array's data address (the array interface is cheaper to read than ``ndarray.ctypes``)."""
    return int(array.__array_interface__["data"][0])


class PackCache(_Cache):
    """One ``Packed`` per kernel, rebuilt only when the weights are other array objects."""

    @property
    def value(self) -> Packed | None:
        """The packed weights last built (None before the first call)."""
        entry = self.entry
        return None if entry is None else entry[1]


def _pack(kernel: _Recurrent, w: np.ndarray, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None) -> Packed:
    dirs, g = kernel.num_dir, kernel.gates
    hidden = r.shape[-1]
    hp = -(-hidden // LANES) * LANES
    lbr = g == 3 and bool(kernel.attrs.get("linear_before_reset"))
    w_t = np.ascontiguousarray(w.reshape(dirs * g * hidden, -1).astype(np.float32).T)
    bias = np.zeros(dirs * g * hidden, dtype=np.float32)
    r_t: list[np.ndarray] = []
    rb_h: list[np.ndarray | None] = []
    peep: list[np.ndarray | None] = []
    for d in range(dirs):
        packed = np.zeros((hidden, g * hp), dtype=np.float32)
        for gate in range(g):
            packed[:, gate * hp : gate * hp + hidden] = r[d, gate * hidden : (gate + 1) * hidden].T
        r_t.append(np.ascontiguousarray(packed.reshape(hidden, g * hp // LANES, LANES).transpose(1, 0, 2)))
        rb_h.append(None)
        if b is not None:
            wb = b[d, : g * hidden].astype(np.float32)
            rb = b[d, g * hidden :].astype(np.float32).copy()
            if lbr:
                rb_h[d] = rb[2 * hidden :].copy()
                rb[2 * hidden :] = 0
            bias[d * g * hidden : (d + 1) * g * hidden] = wb + rb
        peep.append(None if p is None else np.ascontiguousarray(p[d].astype(np.float32)))
    return Packed(w_t, bias, r_t, rb_h, peep)


def _state(s: np.ndarray | None) -> np.ndarray | None:
    return None if s is None else np.ascontiguousarray(s, dtype=np.float32)


def run(
    kernel: _Recurrent, lib: NativeLib, x: np.ndarray, w: np.ndarray, r: np.ndarray, optional: tuple[Any, ...]
) -> tuple[np.ndarray, ...] | None:
    """The layer's outputs ``(Y, Y_h[, Y_c])`` (as many as the node has), or None to take the NumPy path."""
    layout = int(kernel.attrs["layout"])
    dirs, g = kernel.num_dir, kernel.gates
    hidden = r.shape[-1]
    if w.ndim != 3 or r.shape != (dirs, g * hidden, hidden) or w.shape[:2] != (dirs, g * hidden):
        return None
    if w.shape[2] != x.shape[2]:
        return None
    seq, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
    b = optional[0] if len(optional) > 0 else None
    seq_lens = optional[1] if len(optional) > 1 else None
    h0 = optional[2] if len(optional) > 2 else None
    c0 = optional[3] if g == 4 and len(optional) > 3 else None
    p = optional[4] if g == 4 and len(optional) > 4 else None
    if b is not None and b.shape != (dirs, 2 * g * hidden):
        return None
    if p is not None and p.shape != (dirs, 3 * hidden):
        return None
    if seq_lens is not None and seq_lens.shape != (batch,):
        return None
    state_shape = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    if any(s is not None and s.shape != state_shape for s in (h0, c0)):
        return None
    packed = kernel._packed.get((w, r, b, p), lambda: _pack(kernel, w, r, b, p))
    h0c = _state(h0)
    c0c = _state(c0)
    lens = None if seq_lens is None else np.clip(seq_lens.astype(np.int64), 0, seq)

    ncol = dirs * g * hidden
    xp = np.matmul(np.ascontiguousarray(x).reshape(-1, x.shape[2]), packed.w_t)
    xp += packed.bias
    xp_t, xp_b = (batch * ncol, ncol) if layout == 0 else (ncol, seq * ncol)
    if layout == 0:
        y = np.empty((seq, dirs, batch, hidden), dtype=np.float32)
        y_t, y_b, y_dir = dirs * batch * hidden, hidden, batch * hidden
        finals_shape, fin_b, fin_dir = (dirs, batch, hidden), hidden, batch * hidden
    else:
        y = np.empty((batch, seq, dirs, hidden), dtype=np.float32)
        y_t, y_b, y_dir = dirs * hidden, seq * dirs * hidden, hidden
        finals_shape, fin_b, fin_dir = (batch, dirs, hidden), dirs * hidden, hidden
    h_n = np.empty(finals_shape, dtype=np.float32)
    c_n = np.empty(finals_shape, dtype=np.float32) if g == 4 else None
    acts = kernel.native_acts
    assert acts is not None
    a = Args(RN_NARGS)
    fsz = 4  # bytes per float32
    base = [0] * RN_NARGS  # one list per direction, stored into the block at once (item stores cost ~0.1 us each)
    base[RN_KIND] = KIND[g]
    base[RN_XP_T], base[RN_XP_B] = xp_t, xp_b
    base[RN_SEQ], base[RN_BATCH], base[RN_HIDDEN] = seq, batch, hidden
    base[RN_LENS] = 0 if lens is None else _addr(lens)
    base[RN_Y_T], base[RN_Y_B] = y_t, y_b
    base[RN_HN_B] = base[RN_CN_B] = base[RN_H0_B] = base[RN_C0_B] = fin_b
    base[RN_HAS_CLIP] = 0 if kernel.clip is None else 1
    base[RN_CLIP] = 0 if kernel.clip is None else Args.f32(kernel.clip)
    base[RN_LBR] = 1 if g == 3 and kernel.attrs.get("linear_before_reset") else 0
    base[RN_INPUT_FORGET] = 1 if g == 4 and kernel.attrs.get("input_forget") else 0
    base[RN_SERIAL_WORK] = SERIAL_WORK
    xp_at, y_at, hn_at = _addr(xp), _addr(y), _addr(h_n)
    h0_at = 0 if h0c is None else _addr(h0c)
    c0_at = 0 if c0c is None else _addr(c0c)
    cn_at = 0 if c_n is None else _addr(c_n)
    reverse_all = kernel.attrs["direction"] == "reverse"
    for d in range(dirs):
        blk = list(base)
        blk[RN_XP] = xp_at + d * g * hidden * fsz
        blk[RN_RT] = packed.r_t_at[d]
        blk[RN_H0] = h0_at and h0_at + d * fin_dir * fsz
        blk[RN_C0] = c0_at and c0_at + d * fin_dir * fsz
        blk[RN_REVERSE] = 1 if reverse_all or d == 1 else 0
        blk[RN_Y] = y_at + d * y_dir * fsz
        blk[RN_HN] = hn_at + d * fin_dir * fsz
        blk[RN_CN] = cn_at and cn_at + d * fin_dir * fsz
        blk[RN_RBH] = packed.rb_h_at[d]
        blk[RN_PEEP] = packed.peep_at[d]
        codes = acts[d] + [0] * (3 - len(acts[d]))
        blk[RN_ACT_F], blk[RN_ACT_G], blk[RN_ACT_H] = codes[:3]
        a.block[:] = blk
        lib.rnn_seq(a.ptr)
    outs: list[np.ndarray] = [y, h_n] + ([c_n] if c_n is not None else [])
    return tuple(outs[: max(1, kernel.node.n_outputs)])
