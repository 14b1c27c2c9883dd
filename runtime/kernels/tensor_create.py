"""Kernels that create tensors: Constant, ConstantOfShape, Range, EyeLike and the random generators.

Random ops draw from a NumPy ``Generator`` built once per node (seeded by the ``seed`` attribute when given), so
a seeded model repeats its sequence of draws from one compile to the next; values cannot match other runtimes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
from onnx import helper

from runtime.kernels.base import Kernel, define_kernel, register


def onnx_to_np_dtype(code: int) -> np.dtype[Any]:
    """NumPy dtype for an ONNX ``TensorProto.DataType`` code (bfloat16/float8 come from ml_dtypes)."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(int(code)))


@register
class Constant(Kernel):
    """The node's one ``value*`` attribute as a tensor (every opset form: tensor, sparse, scalar/list forms)."""

    op_type = "Constant"
    since_version = 1

    def setup(self) -> None:
        a = self.attrs
        if "value" in a:
            value = np.asarray(a["value"])
        elif "sparse_value" in a:
            value = np.asarray(a["sparse_value"])
        elif "value_float" in a:
            value = np.array(a["value_float"], dtype=np.float32)
        elif "value_floats" in a:
            value = np.array(a["value_floats"], dtype=np.float32)
        elif "value_int" in a:
            value = np.array(a["value_int"], dtype=np.int64)
        elif "value_ints" in a:
            value = np.array(a["value_ints"], dtype=np.int64)
        elif "value_string" in a:
            value = np.array(a["value_string"], dtype=object)
        elif "value_strings" in a:
            value = np.array(list(a["value_strings"]), dtype=object)
        else:
            raise ValueError(f"Constant node {self.node.name!r} has no value attribute")
        value.flags.writeable = False  # shared across runs: nobody may write into it
        self.value = value

    def compute(self) -> np.ndarray:
        return self.value


@register
class ConstantOfShape(Kernel):
    """A tensor of the given shape filled with the one-element ``value`` (float32 zero by default)."""

    op_type = "ConstantOfShape"
    creates_size = True
    since_version = 9

    def setup(self) -> None:
        value = self.attrs.get("value")
        self.fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)[:1]

    def compute(self, shape: np.ndarray) -> np.ndarray:
        dims = tuple(int(d) for d in np.asarray(shape).reshape(-1))
        return np.full(dims, self.fill[0], dtype=self.fill.dtype)


@register
class Range(Kernel):
    """``start, start + delta, ...`` below ``limit``; the length is ``max(ceil((limit - start) / delta), 0)``."""

    op_type = "Range"
    creates_size = True
    since_version = 11

    def compute(self, start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
        # scalars by the spec; 1-element tensors are accepted too (onnx's own expanded functions produce them)
        first, last, step = (np.asarray(v).reshape(-1)[0] for v in (start, limit, delta))
        dtype = np.asarray(start).dtype
        if np.issubdtype(dtype, np.integer):
            s, lim, d = int(first), int(last), int(step)
            if d == 0:
                raise ValueError("Range delta cannot be 0")
            n = max(-((s - lim) // d), 0)  # exact integer ceil division
            return (s + d * np.arange(n, dtype=np.int64)).astype(dtype)
        s_f, lim_f, d_f = float(first), float(last), float(step)
        n = max(math.ceil((lim_f - s_f) / d_f), 0)
        return (s_f + d_f * np.arange(n, dtype=np.float64)).astype(dtype)


@register
class EyeLike(Kernel):
    """A 2-D tensor shaped like the input with ones on the ``k``-th diagonal."""

    op_type = "EyeLike"
    since_version = 9
    attr_defaults: ClassVar[dict[str, Any]] = {"k": 0}

    def compute(self, x: np.ndarray) -> np.ndarray:
        dtype = onnx_to_np_dtype(self.attrs["dtype"]) if "dtype" in self.attrs else x.dtype
        rows, cols = x.shape
        return np.eye(rows, cols, k=int(self.attrs["k"]), dtype=dtype)


class _RandomKernel(Kernel):
    """Shared: one seeded Generator per node and the output dtype rule (attribute, else input, else float)."""

    never_fold = True

    def setup(self) -> None:
        seed = self.attrs.get("seed")
        self.rng = np.random.default_rng(None if seed is None else int(seed))

    def out_dtype(self, like: np.ndarray | None = None) -> np.dtype[Any]:
        if "dtype" in self.attrs:
            return onnx_to_np_dtype(self.attrs["dtype"])
        return like.dtype if like is not None else np.dtype(np.float32)


class _Samples(_RandomKernel):
    """Samples of one distribution (``fn(rng, attrs, shape)``) in the ``shape`` attribute, or, for the ``*Like``
    ops, in the shape of the input (whose dtype they also take unless ``dtype`` is given)."""

    fn: ClassVar[Callable[[np.random.Generator, dict[str, Any], tuple[int, ...]], np.ndarray]]

    def compute(self, *like: np.ndarray) -> np.ndarray:
        shape = like[0].shape if like else tuple(self.attrs["shape"])
        return type(self).fn(self.rng, self.attrs, shape).astype(self.out_dtype(*like))


def _uniform(rng: np.random.Generator, attrs: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    return rng.uniform(attrs["low"], attrs["high"], size=shape)


def _normal(rng: np.random.Generator, attrs: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    return rng.normal(attrs["mean"], attrs["scale"], size=shape)


_UNIFORM: dict[str, Any] = {"low": 0.0, "high": 1.0}
_NORMAL: dict[str, Any] = {"mean": 0.0, "scale": 1.0}
RandomUniform = define_kernel(_Samples, "RandomUniform", _uniform, "Uniform in [low, high).", attr_defaults=_UNIFORM)
RandomNormal = define_kernel(_Samples, "RandomNormal", _normal, "Normal (``mean``, ``scale``).", attr_defaults=_NORMAL)
RandomUniformLike = define_kernel(_Samples, "RandomUniformLike", _uniform, attr_defaults=_UNIFORM)
RandomNormalLike = define_kernel(_Samples, "RandomNormalLike", _normal, attr_defaults=_NORMAL)


@register
class Bernoulli(_RandomKernel):
    """1 with probability ``x`` (elementwise), else 0."""

    op_type = "Bernoulli"
    since_version = 15

    def compute(self, x: np.ndarray) -> np.ndarray:
        draws = self.rng.uniform(0.0, 1.0, size=x.shape) < x.astype(np.float64)
        return draws.astype(self.out_dtype(x))


@register
class Multinomial(_RandomKernel):
    """``sample_size`` class indices per batch row, drawn from unnormalised log-probabilities."""

    op_type = "Multinomial"
    since_version = 7
    attr_defaults: ClassVar[dict[str, Any]] = {"sample_size": 1}

    def compute(self, logits: np.ndarray) -> np.ndarray:
        dtype = onnx_to_np_dtype(self.attrs["dtype"]) if "dtype" in self.attrs else np.dtype(np.int32)
        z = logits.astype(np.float64)
        probs = np.exp(z - z.max(axis=1, keepdims=True))
        cdf = np.cumsum(probs / probs.sum(axis=1, keepdims=True), axis=1)
        draws = self.rng.uniform(size=(z.shape[0], int(self.attrs["sample_size"])))
        picks = np.stack([np.searchsorted(cdf[b], draws[b], side="right") for b in range(z.shape[0])])
        return np.minimum(picks, z.shape[1] - 1).astype(dtype)
