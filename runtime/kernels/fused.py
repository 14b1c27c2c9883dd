"""Kernels of the ops the graph passes create (domain ``com.appopt``): fused convolutions and products, NHWC
layout ops, GELU and elementwise chains. The convolution and NHWC layout kernels live in
``runtime.kernels.fused_conv``; this module holds the shared helpers, products and elementwise kernels.

Each op runs on the compiled kernels (``runtime.native``) when they are available and the tensors are float32,
and on NumPy otherwise, so a compiled model stays runnable on a machine without a C compiler. The NumPy paths
repeat the unfused ops' arithmetic step by step, so with the compiled kernels off a fused graph gives the same
bits as the original one.

Kernels that can use constant inputs (weights) define ``prepare(constants, shapes)``; the executor calls it once
at compile time with the initializers, so packing and algorithm choice happen before the first run. Without it
the first call packs (and later calls reuse the packing while the weight array is the same object).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np

from runtime import native
from runtime.kernels.activations import sigmoid, softplus
from runtime.kernels.base import IntoKernel, Kernel, register, store_into
from runtime.kernels.elementwise import erf
from runtime.native import ops
from runtime.native.abi import apply_activation

DOMAIN = "com.appopt"


class _Cache:
    """One object derived from constant inputs, rebuilt only when those inputs are other array objects."""

    def __init__(self) -> None:
        #: (sources, value), replaced whole: a thread reading it never pairs one build's sources with another's value
        self.entry: tuple[tuple[Any, ...], Any] | None = None
        self.lock = threading.Lock()

    def get(self, sources: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        entry = self.entry
        if entry is not None and _same_objects(sources, entry[0]):
            return entry[1]
        with self.lock:
            value = build()
            self.entry = (sources, value)
        return value


def epilogue_of(attrs: dict[str, Any]) -> ops.Epilogue:
    """The fused activation and scale of a fused node."""
    return ops.Epilogue(
        str(attrs.get("activation", "")),
        float(attrs.get("act_lo", 0.0)),
        float(attrs.get("act_hi", 0.0)),
        float(attrs.get("alpha", 1.0)),
    )


def _finish(y: np.ndarray, res: np.ndarray | None, epilogue: ops.Epilogue) -> np.ndarray:
    """Residual then activation on a freshly computed ``y`` (NumPy path), in the unfused order."""
    if res is not None:
        y = y + res.astype(y.dtype, copy=False)
    if epilogue.activation == "Relu":
        return np.maximum(y, y.dtype.type(0))
    if epilogue.activation == "Clip":
        return np.minimum(np.maximum(y, y.dtype.type(epilogue.lo)), y.dtype.type(epilogue.hi))
    if epilogue.activation == "LeakyRelu":
        return np.where(y < 0, y * y.dtype.type(epilogue.lo), y)
    return apply_activation(y, epilogue.activation, epilogue.lo, epilogue.hi)


# -- products ----------------------------------------------------------------------------------------------------
@register
class FusedMatMul(IntoKernel):
    """``act(alpha * op(A) @ op(B) + Bias + Res)``: MatMul (NumPy broadcasting) with ``transA``/``transB``
    (swap the last two axes), ``alpha``, an optional bias along the last axis and an optional residual.

    A ``div`` attribute means the scale came from a division: the NumPy path divides by it (as the unfused graph
    did), the compiled kernel multiplies by ``alpha = 1 / div``."""

    op_type = "FusedMatMul"
    uses_blas = True
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"transA": 0, "transB": 0, "alpha": 1.0, "activation": ""}
    #: "packed" (compiled kernel, constant B), "dynamic" (compiled, B packed per call) or "blas" (NumPy).
    algorithm: str | None = None

    def setup(self) -> None:
        self.epilogue = epilogue_of(self.attrs)
        self.trans_a = bool(self.attrs["transA"])
        self.trans_b = bool(self.attrs["transB"])
        self.alpha = float(self.attrs["alpha"])
        self._packed = _Cache()

    def prepare(self, constants: Sequence[Any], shapes: Sequence[Any]) -> None:
        lib = native.lib()
        b = constants[1] if len(constants) > 1 else None
        bias = constants[2] if len(constants) > 2 else None
        if lib is None:
            return
        if b is not None and b.ndim == 2 and b.dtype == np.float32 and (bias is not None or not self._has(2)):
            from runtime import tuning

            self.algorithm = tuning.matmul_algorithm(self, lib, b, bias, shapes[0] if shapes else None)

    def _has(self, index: int) -> bool:
        present = self.node.input_present
        return len(present) > index and present[index]

    def _packed_matmul(self, lib: native.NativeLib, b: np.ndarray, bias: np.ndarray | None) -> ops.PackedMatMul:
        def build() -> ops.PackedMatMul:
            bm = b.T if self.trans_b else b
            return ops.PackedMatMul(lib, bm, bias, self.epilogue)

        return self._packed.get((b, bias), build)

    fresh_output = True
    inplace_inputs = (3,)

    def compute_into(
        self,
        out: np.ndarray | None,
        a: np.ndarray,
        b: np.ndarray,
        bias: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> np.ndarray:
        lib = native.lib()
        if (
            lib is not None
            and self.algorithm != "blas"
            and a.dtype == np.float32
            and b.dtype == np.float32
            and a.ndim >= 2
            and b.ndim >= 2
            and (bias is None or (bias.dtype == np.float32 and bias.size == b.shape[-2 if self.trans_b else -1]))
        ):
            y = self._compute_native(lib, a, b, bias, res, out)
            if y is not None:
                return y
        return store_into(out, self.compute_numpy(a, b, bias, res))

    def _compute_native(
        self,
        lib: native.NativeLib,
        a: np.ndarray,
        b: np.ndarray,
        bias: np.ndarray | None,
        res: np.ndarray | None,
        out: np.ndarray | None,
    ) -> np.ndarray | None:
        if self.trans_a:
            a = np.swapaxes(a, -1, -2)
        if self.algorithm == "packed" and b.ndim == 2:
            return self._packed_matmul(lib, b, bias)(a, res, out)
        bm = np.swapaxes(b, -1, -2) if self.trans_b else b
        return ops.DynamicMatMul(lib, bias, self.epilogue)(a, bm, res, out)

    def bind(
        self,
        out: np.ndarray,
        a: np.ndarray,
        b: np.ndarray,
        bias: np.ndarray | None = None,
        res: np.ndarray | None = None,
    ) -> ops.Bound | None:
        lib = native.lib()
        if lib is None or self.algorithm == "blas" or self.trans_a or a.dtype != np.float32 or b.dtype != np.float32:
            return None
        if a.ndim < 2 or b.ndim < 2 or (bias is not None and bias.dtype != np.float32):
            return None
        if self.algorithm == "packed" and b.ndim == 2:
            return self._packed_matmul(lib, b, bias).bind(a, res, out)
        bm = np.swapaxes(b, -1, -2) if self.trans_b else b
        return ops.DynamicMatMul(lib, bias, self.epilogue).bind(a, bm, res, out)

    def compute_numpy(
        self, a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None, res: np.ndarray | None = None
    ) -> np.ndarray:
        if self.trans_a:
            a = np.swapaxes(a, -1, -2)
        if self.trans_b:
            b = np.swapaxes(b, -1, -2)
        wide = a.dtype.kind == "f" and a.dtype.itemsize < 4
        y = np.asarray(np.matmul(a.astype(np.float32) if wide else a, b.astype(np.float32) if wide else b))
        if "div" in self.attrs:
            y = y / y.dtype.type(self.attrs["div"])
        elif self.alpha != 1.0:
            y = y * y.dtype.type(self.alpha)
        if bias is not None:
            y = y + bias.astype(y.dtype, copy=False)
        return _finish(y, res, self.epilogue).astype(a.dtype, copy=False)


# -- elementwise -------------------------------------------------------------------------------------------------
@register
class Gelu(Kernel):
    """GELU with erf, recognised from ``x * 0.5 * (1 + erf(x / sqrt 2))``. The NumPy path repeats the pattern's
    own steps (``form`` 0: ``(x*half) * (erf(x/div) + 1)``, 1: ``(x * (erf(x/div) + 1)) * half``)."""

    op_type = "Gelu"
    amp_class = "fp32"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"form": 0, "half": 0.5, "div": 1.4142135381698608, "div_op": "Div"}
    fresh_output = True
    inplace_inputs = (0,)

    def compute_into(self, out: np.ndarray, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.flags.c_contiguous:
            return ops.gelu(lib, x, out)
        return store_into(out, self.compute(x))

    def bind(self, out: np.ndarray, x: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        return None if lib is None else ops.bind_rows(lib, "gelu", x, out)

    def compute(self, x: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.flags.c_contiguous:
            return ops.gelu(lib, x)
        t = x.dtype.type
        scaled = x / t(self.attrs["div"]) if self.attrs["div_op"] == "Div" else x * t(self.attrs["div"])
        inner = erf(scaled).astype(x.dtype, copy=False) + t(1.0)
        if int(self.attrs["form"]) == 0:
            return (x * t(self.attrs["half"])) * inner
        return (x * inner) * t(self.attrs["half"])


#: Step opcodes of an ElementwiseChain (the ``EO_*`` enum in kernels.c).
CHAIN_BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5}
CHAIN_UNARY = {
    "Relu": 6,
    "Neg": 7,
    "Abs": 8,
    "Exp": 9,
    "Erf": 10,
    "Sigmoid": 11,
    "Tanh": 12,
    "Sqrt": 13,
    "Reciprocal": 14,
    "Clip": 15,
    "LeakyRelu": 16,
    "Softplus": 20,
    "Mish": 21,
}
#: ``x ** scalar``, and the two steps that let a chain evaluate a tree: copy the accumulator into a register, and
#: replace it by an operand.
CHAIN_POW, CHAIN_SAVE, CHAIN_LOAD = 17, 18, 19
#: Operand kinds: none (unary), a scalar, a tensor of the output's shape, a vector along the last axis, the
#: accumulator itself, a register (``CHAIN_SAVE``).
KIND_NONE, KIND_SCALAR, KIND_FULL, KIND_INNER, KIND_SELF, KIND_REG = 0, 1, 2, 3, 4, 5
#: Registers a chain may use (``EW_REGS`` in kernels.c).
CHAIN_REGISTERS = 4
_NP_BINARY: dict[int, Any] = {0: np.add, 1: np.subtract, 2: np.multiply, 3: np.divide, 4: np.maximum, 5: np.minimum}


@register
class ElementwiseChain(IntoKernel):
    """A program of float32 elementwise ops applied to input 0, evaluated in one pass.

    ``steps`` holds 4 ints per step: opcode (``CHAIN_BINARY``/``CHAIN_UNARY``/``CHAIN_POW``/``CHAIN_SAVE``/
    ``CHAIN_LOAD``), operand kind, operand index (into ``scalars`` for scalars and Clip bounds, a register for
    ``KIND_REG`` and ``CHAIN_SAVE``, else input ``index + 1``) and ``swapped`` (operand on the left). Each step
    updates one accumulator, which starts as input 0. Operands broadcast to input 0's shape.
    """

    op_type = "ElementwiseChain"
    domain = DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"steps": [], "scalars": []}

    def setup(self) -> None:
        flat = [int(v) for v in self.attrs["steps"]]
        self.steps = [tuple(flat[i : i + 4]) for i in range(0, len(flat), 4)]
        self.scalars = np.asarray(self.attrs["scalars"] or [0.0], dtype=np.float32)
        self.step_block = np.asarray(flat or [0], dtype=np.int64)
        saved: set[int] = set()
        for op, kind, idx, _ in self.steps:
            if (kind == KIND_REG or op == CHAIN_SAVE) and not 0 <= idx < CHAIN_REGISTERS:
                raise ValueError(f"register {idx} outside 0..{CHAIN_REGISTERS - 1}")
            if kind == KIND_REG and idx not in saved:
                raise ValueError(f"register {idx} read before a step saves it")
            if op == CHAIN_SAVE:
                saved.add(idx)

    fresh_output = True
    inplace_inputs = (0,)

    def compute_into(self, out: np.ndarray | None, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        lib = native.lib()
        if lib is not None and x.dtype == np.float32 and x.ndim >= 1 and self._native_ok(x, operands):
            return self._compute_native(lib, x, operands, out)
        return store_into(out, self.compute_numpy(x, *operands))

    def _native_ok(self, x: np.ndarray, operands: Sequence[np.ndarray]) -> bool:
        if not x.flags.c_contiguous:
            return False
        for _, kind, idx, _ in self.steps:
            if kind == KIND_FULL and (operands[idx].shape != x.shape or operands[idx].dtype != np.float32):
                return False
            if kind == KIND_INNER and (operands[idx].size != x.shape[-1] or operands[idx].dtype != np.float32):
                return False
        return True

    def _args(self, x: np.ndarray, operands: Sequence[np.ndarray], out: np.ndarray) -> native.Args:
        kept = [np.ascontiguousarray(o, dtype=np.float32) for o in operands]
        table = np.asarray([native.addr(o) for o in kept] or [0], dtype=np.int64)
        a = native.Args(ops.EW_NARGS)
        a.block[: ops.EW_NARGS] = (
            native.addr(x),
            native.addr(out),
            x.size,
            x.shape[-1],
            len(self.steps),
            native.addr(self.step_block),
            a.pin(table),
            native.addr(self.scalars),
        )
        a.keep.extend([*kept, x, out, self.step_block, self.scalars])
        return a

    def _compute_native(
        self, lib: native.NativeLib, x: np.ndarray, operands: Sequence[np.ndarray], out: np.ndarray | None
    ) -> np.ndarray:
        if out is None:
            out = np.empty_like(x)
        lib.ew(self._args(x, operands, out))  # (the Args object itself: it keeps any contiguous copies alive)
        return out

    def bind(self, out: np.ndarray, x: np.ndarray, *operands: np.ndarray) -> ops.Bound | None:
        lib = native.lib()
        if lib is None or x.dtype != np.float32 or x.ndim < 1 or not self._native_ok(x, operands):
            return None
        if out.shape != x.shape or not out.flags.c_contiguous:
            return None
        if any(not (o.dtype == np.float32 and o.flags.c_contiguous) for o in operands):
            return None  # a copy would not keep a stable address
        return ops._bound(lib.ew, self._args(x, operands, out))

    def compute_numpy(self, x: np.ndarray, *operands: np.ndarray) -> np.ndarray:
        # a tensor operand larger than input 0 where the graph named their dims apart broadcasts the result up
        full = [operands[idx].shape for _, kind, idx, _ in self.steps if kind == KIND_FULL]
        shape = np.broadcast_shapes(x.shape, *full) if full else x.shape
        y = np.array(np.broadcast_to(x, shape) if shape != x.shape else x, copy=True)
        t = y.dtype.type
        registers: dict[int, np.ndarray] = {}
        with np.errstate(all="ignore"):
            for op, kind, idx, swapped in self.steps:
                if op in _NP_BINARY or op == CHAIN_LOAD:
                    other: Any
                    if kind == KIND_SCALAR:
                        other = t(self.scalars[idx])
                    elif kind == KIND_SELF:
                        other = y.copy()
                    elif kind == KIND_REG:
                        other = registers[idx]
                    else:
                        other = operands[idx]
                    if kind == KIND_INNER:
                        other = np.asarray(other).reshape(-1)
                    if op == CHAIN_LOAD:
                        y[...] = other
                        continue
                    fn = _NP_BINARY[op]
                    if swapped:
                        fn(other, y, out=y)
                    else:
                        fn(y, other, out=y)
                elif op == 6:
                    np.maximum(y, t(0), out=y)
                elif op == 7:
                    np.negative(y, out=y)
                elif op == 8:
                    np.abs(y, out=y)
                elif op == 9:
                    np.exp(y, out=y)
                elif op == 10:
                    y[...] = erf(y)
                elif op == 11:
                    y[...] = sigmoid(y)
                elif op == 12:
                    np.tanh(y, out=y)
                elif op == 13:
                    np.sqrt(y, out=y)
                elif op == 14:
                    np.divide(t(1), y, out=y)
                elif op == 15:
                    np.minimum(np.maximum(y, t(self.scalars[idx]), out=y), t(self.scalars[idx + 1]), out=y)
                elif op == 16:
                    np.multiply(y, np.where(y < 0, t(self.scalars[idx]), t(1)), out=y)
                elif op == 20:
                    y[...] = softplus(y)
                elif op == 21:
                    y[...] = y * np.tanh(softplus(y))
                elif op == CHAIN_POW:
                    np.power(y, t(self.scalars[idx]), out=y)
                elif op == CHAIN_SAVE:
                    registers[idx] = y.copy()
        return y


def _same_objects(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
