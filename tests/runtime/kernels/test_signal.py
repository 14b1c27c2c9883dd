"""Signal kernels against NumPy's FFT and the window formulas, across both DFT opset forms."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel


def kernel(op: str, opset: int = 20, **attrs: Any) -> Kernel:
    return resolve(op, "", opset)(NodeContext(name=f"test_{op}", op_type=op, opset=opset), attrs)


def as_pairs(z: np.ndarray) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1)


RNG = np.random.default_rng(7)
SIGNAL = RNG.standard_normal((2, 6, 3)) + 1j * RNG.standard_normal((2, 6, 3))


@pytest.mark.parametrize("length", [None, 4, 9])
def test_dft_of_a_complex_signal_matches_numpy(length: int | None) -> None:
    n = None if length is None else np.array(length, np.int64)
    (out,) = kernel("DFT").run(as_pairs(SIGNAL), n, np.array(1, np.int64))
    np.testing.assert_allclose(out, as_pairs(np.fft.fft(SIGNAL, n=length, axis=1)), atol=1e-10)


def test_dft_opset17_axis_attribute_and_onesided_real_input() -> None:
    real = SIGNAL.real[..., None].astype(np.float32)
    (out,) = kernel("DFT", opset=17, axis=2, onesided=1).run(real)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, as_pairs(np.fft.rfft(SIGNAL.real, axis=2)), rtol=1e-4, atol=1e-5)


def test_inverse_dft_undoes_the_forward_transform() -> None:
    x = as_pairs(SIGNAL)
    (spectrum,) = kernel("DFT").run(x, None, np.array(-2, np.int64))
    (back,) = kernel("DFT", inverse=1).run(spectrum, None, np.array(-2, np.int64))
    np.testing.assert_allclose(back, x, atol=1e-10)


def test_inverse_onesided_dft_is_irfft() -> None:
    real = SIGNAL.real
    (half,) = kernel("DFT", onesided=1).run(real[..., None], None, np.array(1, np.int64))
    (back,) = kernel("DFT", inverse=1, onesided=1).run(half, None, np.array(1, np.int64))
    assert back.shape == (*real.shape, 1)
    np.testing.assert_allclose(back[..., 0], real, atol=1e-10)


def test_stft_matches_a_frame_by_frame_fft() -> None:
    signal = RNG.standard_normal((2, 32, 1)).astype(np.float32)
    window = np.hanning(8).astype(np.float32)
    (out,) = kernel("STFT").run(signal, np.array(3, np.int64), window)
    n_frames = 1 + (32 - 8) // 3
    assert out.shape == (2, n_frames, 5, 2)
    for f in range(n_frames):
        frame = signal[:, 3 * f : 3 * f + 8, 0] * window
        np.testing.assert_allclose(out[:, f], as_pairs(np.fft.rfft(frame, axis=-1)), rtol=1e-4, atol=1e-5)


def test_stft_two_sided_without_window_uses_frame_length() -> None:
    signal = RNG.standard_normal((1, 10, 1))
    (out,) = kernel("STFT", onesided=0).run(signal, np.array(5, np.int64), None, np.array(4, np.int64))
    assert out.shape == (1, 2, 4, 2)
    np.testing.assert_allclose(out[0, 1], as_pairs(np.fft.fft(signal[0, 5:9, 0])), atol=1e-10)


@pytest.mark.parametrize(
    ("op", "symmetric_formula"),
    [
        ("HannWindow", np.hanning),
        ("BlackmanWindow", np.blackman),
        ("HammingWindow", lambda m: 25 / 46 - 21 / 46 * np.cos(2 * np.pi * np.arange(m) / (m - 1))),
    ],
)
def test_windows_symmetric_and_periodic(op: str, symmetric_formula: Any) -> None:
    (symmetric,) = kernel(op, periodic=0).run(np.array(9, np.int64))
    np.testing.assert_allclose(symmetric, symmetric_formula(9), atol=1e-6)
    (periodic,) = kernel(op, output_datatype=11).run(np.array(8, np.int64))  # periodic N == symmetric N+1 cut
    assert periodic.dtype == np.float64
    np.testing.assert_allclose(periodic, symmetric_formula(9)[:8], atol=1e-12)


def test_mel_weight_matrix_is_a_bank_of_unit_peak_triangles() -> None:
    args = [np.array(v, np.int64) for v in (8, 64, 16000)] + [np.array(v, np.float32) for v in (0.0, 8000.0)]
    (weights,) = kernel("MelWeightMatrix").run(*args)
    assert weights.shape == (33, 8) and weights.dtype == np.float32
    assert (weights >= 0).all() and (weights <= 1).all()
    np.testing.assert_allclose(weights.max(axis=0), 1.0)
    peaks = weights.argmax(axis=0)
    assert (np.diff(peaks) > 0).all()  # filters move up in frequency
