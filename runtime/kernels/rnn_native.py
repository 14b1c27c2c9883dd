"""RNN, GRU and LSTM on the compiled loop (``ap_rnn_layer`` in runtime/native/recurrent.c).

The input projection of every time step and direction is one compiled GEMM with packed weights,
``X @ [W_0; W_1]^T`` plus the biases that fold into it (all of them, except GRU's ``Rb_h`` under
``linear_before_reset``). The recurrence of every direction then runs in one C call: per step a GEMM of the
batch's states against ``R^T`` (packed once per weight, each gate padded to 16 columns, in panels of 16 columns)
and the gate math, with ``sequence_lens``, initial states, peepholes, clip and ``input_forget``, writing straight
into ``Y``, ``Y_h`` and ``Y_c`` in either layout. Two directions run concurrently where there are two threads.

``run`` computes one call; ``bind`` prepares a layer whose only output is ``Y`` as a prebound pair of compiled
calls for memory-planned runs. Both return ``None`` where the inputs are outside what the loop handles (the
caller then takes the NumPy path): a dtype other than float32, an inconsistent shape, ``sequence_lens`` not
integers of shape ``(batch,)``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from runtime.kernels.fused import _Cache
from runtime.native import Args, NativeLib
from runtime.native.abi import Bound, Epilogue, _bound, in_sequence
from runtime.native.matmul import PackedMatMul

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
    RN_LENS_I32,
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
) = range(33)
RL_DIRS, RL_BLOCKS, RL_NARGS = 0, 1, 3  # ap_rnn_layer's block: direction count, then each direction's block
#: Recurrent multiply-adds per step from which a single sequence's step is split between the pool's threads (as
#: is any step whose R^T outgrows one thread's cache, recurrent.c). Each step ends in a join, and on a loaded
#: machine a descheduled worker holds its share up (docs/decisions.md).
SERIAL_WORK = 1 << 21


@dataclass(frozen=True)
class Packed:
    """What the loop needs from the constant inputs, derived once per (W, R, B, P) set of arrays."""

    hidden: int
    #: X @ [W_0; W_1]^T + the biases that fold into it: every step and direction in one compiled GEMM
    projection: PackedMatMul
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

    def __init__(self) -> None:
        super().__init__()
        #: Per calling thread: the argument blocks (``_blocks``), reused from call to call.
        self.local = threading.local()

    @property
    def value(self) -> Packed | None:
        """The packed weights last built (None before the first call)."""
        entry = self.entry
        return None if entry is None else entry[1]


def _blocks(cache: PackCache) -> tuple[Args, Args, Args]:
    """This thread's argument blocks of one kernel: one per direction, and ``ap_rnn_layer``'s naming both."""
    blocks: tuple[Args, Args, Args] | None = getattr(cache.local, "blocks", None)
    if blocks is None:
        first, second, layer = Args(RN_NARGS), Args(RN_NARGS), Args(RL_NARGS)
        layer.block[RL_BLOCKS] = first.ptr
        layer.block[RL_BLOCKS + 1] = second.ptr
        layer.keep += [first, second]
        blocks = (first, second, layer)
        cache.local.blocks = blocks
    return blocks


def _pack(
    kernel: _Recurrent, lib: NativeLib, w: np.ndarray, r: np.ndarray, b: np.ndarray | None, p: np.ndarray | None
) -> Packed:
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
    return Packed(hidden, PackedMatMul(lib, w_t, bias if b is not None else None, Epilogue()), r_t, rb_h, peep)


def _state(s: np.ndarray | None) -> np.ndarray | None:
    """An initial state as the loop reads it: float32 with unit stride along the hidden axis (any other strides,
    such as a transposed view, are read in place), else a copy."""
    if s is None or _readable_state(s):
        return s
    return np.ascontiguousarray(s, dtype=np.float32)


def _readable_state(s: np.ndarray) -> bool:
    return s.dtype == np.float32 and s.strides[2] == 4 and all(k >= 0 and k % 4 == 0 for k in s.strides[:2])


def _state_steps(s: np.ndarray | None, layout: int) -> tuple[int, int]:
    """(row stride, direction offset) of a state in floats; (0, 0) when absent."""
    if s is None:
        return 0, 0
    first, second = s.strides[0] // 4, s.strides[1] // 4
    return (second, first) if layout == 0 else (first, second)


def _geometry(kernel: _Recurrent, x: np.ndarray, w: np.ndarray, r: np.ndarray, optional: tuple[Any, ...]) -> Any:
    """``(seq, batch, b, seq_lens, h0, c0, p)`` when the loop handles these inputs, else None."""
    layout = int(kernel.attrs["layout"])
    dirs, g = kernel.num_dir, kernel.gates
    hidden = r.shape[-1]
    if w.ndim != 3 or r.shape != (dirs, g * hidden, hidden) or w.shape[:2] != (dirs, g * hidden):
        return None
    if x.ndim != 3 or w.shape[2] != x.shape[2] or x.dtype != np.float32:
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
    if seq_lens is not None and (seq_lens.shape != (batch,) or seq_lens.dtype.kind not in "iu"):
        return None
    state_shape = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    if any(s is not None and s.shape != state_shape for s in (h0, c0)):
        return None
    return seq, batch, b, seq_lens, h0, c0, p


def _rows(x: np.ndarray, layout: int) -> tuple[np.ndarray, bool]:
    """``x`` as the projection's (rows, input) matrix, and whether its rows run over (step, batch). A view with its
    first two axes swapped (PyTorch's batch_first export transposes the input) is read in place, in its memory
    order; any other layout is copied."""
    if not x.flags.c_contiguous and x.transpose(1, 0, 2).flags.c_contiguous:
        return x.transpose(1, 0, 2).reshape(-1, x.shape[2]), layout == 1
    return np.ascontiguousarray(x).reshape(-1, x.shape[2]), layout == 0


def _lens(seq_lens: np.ndarray | None) -> tuple[np.ndarray | None, int]:
    """``sequence_lens`` as the loop reads it (int32 or int64, contiguous; clamped by the loop) and its int32 flag."""
    if seq_lens is None:
        return None, 0
    if seq_lens.dtype == np.int32 and seq_lens.flags.c_contiguous:
        return seq_lens, 1
    return np.ascontiguousarray(seq_lens, dtype=np.int64), 0


def _fill(
    kernel: _Recurrent,
    packed: Packed,
    blocks: tuple[Args, Args, Args],
    seq: int,
    batch: int,
    at: dict[str, Any],
    lens_i32: int,
    time_major: bool,
) -> None:
    """Write each direction's ``ap_rnn_seq`` block and the layer block. ``at`` holds the addresses (0 when
    absent) of ``xp`` (the projection), ``y``, ``hn``, ``cn``, ``h0``, ``c0`` and ``lens``, and the states' (row
    stride, direction offset) in ``h0_steps`` and ``c0_steps``; ``time_major``
    says whether the projection's rows run over (step, batch) rather than (batch, step)."""
    layout = int(kernel.attrs["layout"])
    dirs, g = kernel.num_dir, kernel.gates
    hidden = packed.hidden
    ncol = dirs * g * hidden
    xp_t, xp_b = (batch * ncol, ncol) if time_major else (ncol, seq * ncol)
    if layout == 0:
        y_t, y_b, y_dir = dirs * batch * hidden, hidden, batch * hidden
        fin_b, fin_dir = hidden, batch * hidden
    else:
        y_t, y_b, y_dir = dirs * hidden, seq * dirs * hidden, hidden
        fin_b, fin_dir = dirs * hidden, hidden
    acts = kernel.native_acts
    assert acts is not None
    fsz = 4  # bytes per float32
    base = [0] * RN_NARGS  # one list per direction, stored into the block at once (item stores cost ~0.1 us each)
    base[RN_KIND] = KIND[g]
    base[RN_XP_T], base[RN_XP_B] = xp_t, xp_b
    base[RN_SEQ], base[RN_BATCH], base[RN_HIDDEN] = seq, batch, hidden
    base[RN_LENS], base[RN_LENS_I32] = at["lens"], lens_i32
    base[RN_Y_T], base[RN_Y_B] = y_t, y_b
    base[RN_HN_B] = base[RN_CN_B] = fin_b
    (base[RN_H0_B], h0_dir), (base[RN_C0_B], c0_dir) = at["h0_steps"], at["c0_steps"]
    base[RN_HAS_CLIP] = 0 if kernel.clip is None else 1
    base[RN_CLIP] = 0 if kernel.clip is None else Args.f32(kernel.clip)
    base[RN_LBR] = 1 if g == 3 and kernel.attrs.get("linear_before_reset") else 0
    base[RN_INPUT_FORGET] = 1 if g == 4 and kernel.attrs.get("input_forget") else 0
    base[RN_SERIAL_WORK] = SERIAL_WORK
    reverse_all = kernel.attrs["direction"] == "reverse"

    def shifted(name: str, offset: int) -> int:
        return at[name] and at[name] + offset * fsz

    for d in range(dirs):
        blk = list(base)
        blk[RN_XP] = shifted("xp", d * g * hidden)
        blk[RN_RT] = packed.r_t_at[d]
        blk[RN_H0] = shifted("h0", d * h0_dir)
        blk[RN_C0] = shifted("c0", d * c0_dir)
        blk[RN_REVERSE] = 1 if reverse_all or d == 1 else 0
        blk[RN_Y] = shifted("y", d * y_dir)
        blk[RN_HN] = shifted("hn", d * fin_dir)
        blk[RN_CN] = shifted("cn", d * fin_dir)
        blk[RN_RBH] = packed.rb_h_at[d]
        blk[RN_PEEP] = packed.peep_at[d]
        codes = acts[d] + [0] * (3 - len(acts[d]))
        blk[RN_ACT_F], blk[RN_ACT_G], blk[RN_ACT_H] = codes[:3]
        blocks[d].block[:] = blk
    blocks[2].block[RL_DIRS] = dirs


def _packed(kernel: _Recurrent, lib: NativeLib, w: np.ndarray, r: np.ndarray, b: Any, p: Any) -> Packed:
    return kernel._packed.get((w, r, b, p), lambda: _pack(kernel, lib, w, r, b, p))


def run(
    kernel: _Recurrent,
    lib: NativeLib,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    optional: tuple[Any, ...],
    y_out: np.ndarray | None = None,
) -> tuple[np.ndarray, ...] | None:
    """The layer's outputs ``(Y, Y_h[, Y_c])`` (as many as the node has; an output the node leaves out is not
    computed and given as None), or None to take the NumPy path. ``Y`` goes into ``y_out`` when given (a
    C-contiguous float32 array of Y's shape)."""
    geometry = _geometry(kernel, x, w, r, optional)
    if geometry is None:
        return None
    seq, batch, b, seq_lens, h0, c0, p = geometry
    packed = _packed(kernel, lib, w, r, b, p)
    layout = int(kernel.attrs["layout"])
    dirs, g, hidden = kernel.num_dir, kernel.gates, packed.hidden
    h0c, c0c = _state(h0), _state(c0)
    lens, lens_i32 = _lens(seq_lens)
    rows, time_major = _rows(x, layout)
    xp = packed.projection(rows)
    present = kernel.node.output_present or (True,) * kernel.node.n_outputs
    wanted = [i < len(present) and present[i] for i in range(3)]
    y_shape = (seq, dirs, batch, hidden) if layout == 0 else (batch, seq, dirs, hidden)
    finals_shape = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    if y_out is not None and (y_out.shape != y_shape or y_out.dtype != np.float32 or not y_out.flags.c_contiguous):
        return None
    y = (y_out if y_out is not None else np.empty(y_shape, dtype=np.float32)) if wanted[0] else None
    h_n = np.empty(finals_shape, dtype=np.float32) if wanted[1] else None
    c_n = np.empty(finals_shape, dtype=np.float32) if wanted[2] and g == 4 else None
    blocks = _blocks(kernel._packed)
    at: dict[str, Any] = {"xp": _addr(xp), "y": _opt_addr(y), "hn": _opt_addr(h_n), "cn": _opt_addr(c_n)}
    at.update(h0=_opt_addr(h0c), c0=_opt_addr(c0c), lens=_opt_addr(lens))
    at.update(h0_steps=_state_steps(h0c, layout), c0_steps=_state_steps(c0c, layout))
    _fill(kernel, packed, blocks, seq, batch, at, lens_i32, time_major)
    lib.rnn_layer(blocks[2].ptr)
    outs = [y, h_n] + ([c_n] if g == 4 else [])
    return tuple(outs[: max(1, kernel.node.n_outputs)])  # type: ignore[arg-type]


def bind(
    kernel: _Recurrent,
    lib: NativeLib,
    out: np.ndarray,
    x: np.ndarray,
    w: np.ndarray,
    r: np.ndarray,
    optional: tuple[Any, ...],
) -> Bound | None:
    """One prebound call writing ``Y`` into ``out`` (the node's only output), reading ``x``, the states and the
    lengths where they are now (the static plan keeps them there): the projection GEMM into a scratch buffer of
    its own, then every direction's loop. None where the loop does not handle these inputs."""
    geometry = _geometry(kernel, x, w, r, optional)
    if geometry is None or not out.flags.c_contiguous or out.dtype != np.float32:
        return None
    layout = int(kernel.attrs["layout"])
    rows, time_major = _rows(x, layout)
    if not np.shares_memory(rows, x):
        return None  # a copy would be taken now, and the bound call must read x where it lives
    seq, batch, b, seq_lens, h0, c0, p = geometry
    packed = _packed(kernel, lib, w, r, b, p)
    dirs, hidden = kernel.num_dir, packed.hidden
    if out.shape != ((seq, dirs, batch, hidden) if layout == 0 else (batch, seq, dirs, hidden)):
        return None
    states = [s for s in (h0, c0) if s is not None]
    if not all(_readable_state(s) for s in states):
        return None
    if seq_lens is not None and (seq_lens.dtype not in (np.int32, np.int64) or not seq_lens.flags.c_contiguous):
        return None
    xp = np.empty((seq * batch, packed.projection.n), dtype=np.float32)
    project = packed.projection.bind(rows, None, xp)
    if project is None:
        return None
    blocks = (Args(RN_NARGS), Args(RN_NARGS), Args(RL_NARGS))
    blocks[2].block[RL_BLOCKS], blocks[2].block[RL_BLOCKS + 1] = blocks[0].ptr, blocks[1].ptr
    blocks[2].keep += [blocks[0], blocks[1], packed, xp, x, out, *states, seq_lens]
    at: dict[str, Any] = {"xp": _addr(xp), "y": _addr(out), "hn": 0, "cn": 0}
    at.update(h0=_opt_addr(h0), c0=_opt_addr(c0), lens=_opt_addr(seq_lens))
    at.update(h0_steps=_state_steps(h0, layout), c0_steps=_state_steps(c0, layout))
    _fill(kernel, packed, blocks, seq, batch, at, int(seq_lens is not None and seq_lens.dtype == np.int32), time_major)
    return in_sequence(project, _bound(lib.rnn_layer, blocks[2]))


def _opt_addr(array: np.ndarray | None) -> int:
    return 0 if array is None else _addr(array)
