"""Signal kernels: DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix.

Complex tensors follow the ONNX layout: a trailing dim of 2 (real, imaginary); a trailing dim of 1 is a real
signal. Transforms run with ``numpy.fft`` at the input's precision (complex64 for float32 and narrower, as the
ONNX expected outputs were produced; complex128 for float64) and are cast back to the input dtype.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
from runtime.kernels.tensor_create import onnx_to_np_dtype


def _as_complex(x: np.ndarray) -> np.ndarray:
    """Drop the trailing real/imaginary dim: ``[..., 1]`` (real) or ``[..., 2]`` (complex) to complex."""
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    if x.shape[-1] == 1:
        return x[..., 0].astype(ctype)
    if x.shape[-1] == 2:
        z = np.empty(x.shape[:-1], dtype=ctype)
        z.real, z.imag = x[..., 0], x[..., 1]
        return z
    raise ValueError(f"the last dim must be 1 (real) or 2 (complex), got {x.shape[-1]}")


def _from_complex(z: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


def _scalar_int(x: np.ndarray | None) -> int | None:
    return None if x is None or np.size(x) == 0 else int(np.asarray(x).reshape(-1)[0])


def dft(x: np.ndarray, length: int | None, axis: int, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX DFT along ``axis`` of the signal (``axis`` indexes ``x``, never its last dim)."""
    axis = axis % x.ndim
    if axis == x.ndim - 1:
        raise ValueError("the DFT axis cannot be the last (real/imaginary) dim")
    signal = _as_complex(x)
    if inverse:
        if onesided:  # one-sided spectrum in, real signal out
            n = 2 * (signal.shape[axis] - 1) if length is None else length
            return np.fft.irfft(signal, n=n, axis=axis)[..., None].astype(x.dtype)
        return _from_complex(np.fft.ifft(signal, n=length, axis=axis), x.dtype)
    spectrum = np.fft.fft(signal, n=length, axis=axis)
    if onesided:
        keep = spectrum.shape[axis] // 2 + 1
        spectrum = np.take(spectrum, np.arange(keep), axis=axis)
    return _from_complex(spectrum, x.dtype)


class _DFT(Kernel):
    """DFT along one axis; ``inverse`` and ``onesided`` attributes (see :func:`dft`)."""

    op_type = "DFT"
    uses_blas = True

    def transform(self, x: np.ndarray, dft_length: np.ndarray | None, axis: int) -> np.ndarray:
        inverse, onesided = bool(self.attrs["inverse"]), bool(self.attrs["onesided"])
        return dft(x, _scalar_int(dft_length), axis, inverse, onesided)


@register
class DFT17(_DFT):
    """DFT with an ``axis`` attribute (default 1) and optional ``dft_length`` input (opset 17)."""

    since_version = 17
    attr_defaults: ClassVar[dict[str, Any]] = {"axis": 1, "inverse": 0, "onesided": 0}

    def compute(self, x: np.ndarray, dft_length: np.ndarray | None = None) -> np.ndarray:
        return self.transform(x, dft_length, int(self.attrs["axis"]))


@register
class DFT20(_DFT):
    """DFT with optional ``dft_length`` and ``axis`` inputs (axis default -2, opset 20)."""

    since_version = 20
    attr_defaults: ClassVar[dict[str, Any]] = {"inverse": 0, "onesided": 0}

    def compute(
        self, x: np.ndarray, dft_length: np.ndarray | None = None, axis: np.ndarray | None = None
    ) -> np.ndarray:
        axis_value = _scalar_int(axis)
        return self.transform(x, dft_length, -2 if axis_value is None else axis_value)


@register
class STFT(Kernel):
    """Short-time Fourier transform of ``[batch, length, 1|2]`` into ``[batch, frames, bins, 2]``."""

    op_type = "STFT"
    uses_blas = True
    since_version = 17
    attr_defaults: ClassVar[dict[str, Any]] = {"onesided": 1}

    def compute(
        self,
        signal: np.ndarray,
        frame_step: np.ndarray,
        window: np.ndarray | None = None,
        frame_length: np.ndarray | None = None,
    ) -> np.ndarray:
        step = int(np.asarray(frame_step).reshape(-1)[0])
        length = _scalar_int(frame_length)
        if length is None:
            if window is None:
                raise ValueError("STFT needs a window or a frame_length")
            length = window.shape[0]
        win = np.ones(length) if window is None else window.astype(np.float64)
        if win.shape[0] != length:
            raise ValueError(f"window length {win.shape[0]} differs from frame_length {length}")
        z = _as_complex(signal)  # [batch, length]
        n_frames = 1 + (z.shape[1] - length) // step
        starts = np.arange(n_frames) * step
        frames = z[:, starts[:, None] + np.arange(length)[None, :]] * win  # [batch, frames, length]
        spectrum = np.fft.fft(frames, axis=-1)
        if self.attrs["onesided"]:
            spectrum = spectrum[..., : length // 2 + 1]
        return _from_complex(spectrum, signal.dtype)


class _Window(Kernel):
    """Shared: ``N`` is the size when ``periodic`` (default), else size - 1; output dtype attribute."""

    since_version = 17
    attr_defaults: ClassVar[dict[str, Any]] = {"output_datatype": 1, "periodic": 1}

    def values(self, n: np.ndarray, denom: float) -> np.ndarray:
        raise NotImplementedError

    def compute(self, size: np.ndarray) -> np.ndarray:
        count = int(np.asarray(size).reshape(-1)[0])
        denom = count if self.attrs["periodic"] else count - 1
        n = np.arange(count, dtype=np.float64)
        return self.values(n, float(denom)).astype(onnx_to_np_dtype(self.attrs["output_datatype"]))


@register
class HannWindow(_Window):
    """``sin^2(pi n / N)``."""

    op_type = "HannWindow"

    def values(self, n: np.ndarray, denom: float) -> np.ndarray:
        return np.sin(np.pi * n / denom) ** 2


@register
class HammingWindow(_Window):
    """``25/46 - 21/46 cos(2 pi n / N)``."""

    op_type = "HammingWindow"

    def values(self, n: np.ndarray, denom: float) -> np.ndarray:
        alpha = 25.0 / 46.0
        return alpha - (1 - alpha) * np.cos(2 * np.pi * n / denom)


@register
class BlackmanWindow(_Window):
    """``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""

    op_type = "BlackmanWindow"

    def values(self, n: np.ndarray, denom: float) -> np.ndarray:
        return 0.42 - 0.5 * np.cos(2 * np.pi * n / denom) + 0.08 * np.cos(4 * np.pi * n / denom)


@register
class MelWeightMatrix(Kernel):
    """``[dft_length // 2 + 1, num_mel_bins]`` triangular filters, evenly spaced on the mel scale.

    Filter edges are mel points mapped back to Hz and then to integer DFT bins, as the ONNX spec defines it.
    """

    op_type = "MelWeightMatrix"
    since_version = 17
    attr_defaults: ClassVar[dict[str, Any]] = {"output_datatype": 1}

    def compute(
        self,
        num_mel_bins: np.ndarray,
        dft_length: np.ndarray,
        sample_rate: np.ndarray,
        lower_edge_hertz: np.ndarray,
        upper_edge_hertz: np.ndarray,
    ) -> np.ndarray:
        n_mel, n_dft, rate = int(num_mel_bins), int(dft_length), int(sample_rate)
        low_mel = 2595 * math.log1p(float(lower_edge_hertz) / 700) / math.log(10)
        high_mel = 2595 * math.log1p(float(upper_edge_hertz) / 700) / math.log(10)
        mel_step = (high_mel - low_mel) / (n_mel + 2)
        mels = np.arange(n_mel + 2) * mel_step + low_mel
        hertz = 700 * np.expm1(mels / 2595 * math.log(10))
        bins = (((n_dft + 1) * hertz) // rate).astype(np.int64)
        out = np.zeros((n_dft // 2 + 1, n_mel), dtype=np.float64)
        j = np.arange(out.shape[0])
        for i in range(n_mel):
            lo, mid, hi = bins[i], bins[i + 1], bins[i + 2]
            if mid == lo:
                out[mid, i] = 1.0
            else:
                rising = (j >= lo) & (j <= mid)
                out[rising, i] = (j[rising] - lo) / (mid - lo)
            if hi > mid:
                falling = (j >= mid) & (j < hi)
                out[falling, i] = (hi - j[falling]) / (hi - mid)
        return out.astype(onnx_to_np_dtype(self.attrs["output_datatype"]))
