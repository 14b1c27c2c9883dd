"""ImageDecoder: images encoded here (PNG with every filter type, BMP, PNM, TIFF), the JPEG from onnx's frozen
test data in every pixel format, and the JPEG building blocks against their floating-point definitions."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from onnx.backend.test.case.node import _image_decoder_data as frozen

from runtime.errors import KernelError
from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel
from runtime.kernels.jpeg import idct_islow, upsample, ycc_to_rgb

RNG = np.random.default_rng(5)
IMAGE = RNG.integers(0, 256, (5, 7, 3), dtype=np.uint8)


def decoder(pixel_format: str = "RGB") -> Kernel:
    node = NodeContext(name="test_ImageDecoder", op_type="ImageDecoder", opset=20)
    return resolve("ImageDecoder", "", 20)(node, {"pixel_format": pixel_format})


def decode(data: bytes, pixel_format: str = "RGB") -> np.ndarray:
    (out,) = decoder(pixel_format).run(np.frombuffer(data, dtype=np.uint8))
    return out


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def encode_png(image: np.ndarray, color_type: int, palette: bytes = b"") -> bytes:
    """A PNG whose rows cycle through filter types 0-4, so decoding exercises every filter."""
    height = image.shape[0]
    rows = image.reshape(height, -1).astype(np.int64)
    bpp = 1 if image.ndim == 2 else image.shape[2]
    raw = bytearray()
    prev = np.zeros(rows.shape[1], np.int64)
    for y in range(height):
        kind, cur = y % 5, rows[y]
        out = []
        for i, v in enumerate(cur):
            left = int(cur[i - bpp]) if i >= bpp else 0
            up_left = int(prev[i - bpp]) if i >= bpp else 0
            pred = [0, left, int(prev[i]), (left + int(prev[i])) // 2, _paeth(left, int(prev[i]), up_left)][kind]
            out.append((int(v) - pred) & 0xFF)
        raw += bytes([kind, *out])
        prev = cur

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    width = image.shape[1]
    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    body = chunk(b"IHDR", header) + (chunk(b"PLTE", palette) if palette else b"")
    return b"\x89PNG\r\n\x1a\n" + body + chunk(b"IDAT", zlib.compress(bytes(raw))) + chunk(b"IEND", b"")


def test_png_rgb_with_every_filter_type() -> None:
    np.testing.assert_array_equal(decode(encode_png(IMAGE, 2)), IMAGE)
    np.testing.assert_array_equal(decode(encode_png(IMAGE, 2), "BGR"), IMAGE[..., ::-1])


def test_png_rgba_grey_and_palette() -> None:
    rgba = np.concatenate([IMAGE, np.full((5, 7, 1), 9, np.uint8)], axis=2)
    np.testing.assert_array_equal(decode(encode_png(rgba, 6)), IMAGE)
    grey = IMAGE[..., 0]
    np.testing.assert_array_equal(decode(encode_png(grey, 0), "Grayscale")[..., 0], grey)
    np.testing.assert_array_equal(decode(encode_png(grey, 0)), np.repeat(grey[..., None], 3, axis=2))
    palette = np.array([[10, 20, 30], [200, 100, 0]], np.uint8)
    index = (grey > 127).astype(np.uint8)
    np.testing.assert_array_equal(decode(encode_png(index, 3, palette.tobytes())), palette[index])


def encode_bmp(image: np.ndarray) -> bytes:
    """24-bit bottom-up BMP (rows padded to 4 bytes, BGR order)."""
    height, width, _ = image.shape
    stride = (width * 3 + 3) // 4 * 4
    rows = b"".join(image[y, :, ::-1].tobytes().ljust(stride, b"\0") for y in range(height - 1, -1, -1))
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 54 + len(rows), 0, 0, 54) + info + rows


def test_bmp_bottom_up_with_row_padding() -> None:
    np.testing.assert_array_equal(decode(encode_bmp(IMAGE)), IMAGE)


def test_pnm_binary_ascii_comments_and_maxval() -> None:
    header = b"P6\n# made by a test\n7 5\n255\n"
    np.testing.assert_array_equal(decode(header + IMAGE.tobytes()), IMAGE)
    grey = IMAGE[..., 0]
    np.testing.assert_array_equal(decode(b"P5 7 5 255\n" + grey.tobytes(), "Grayscale")[..., 0], grey)
    ascii_pgm = b"P2\n2 1\n15\n0 15\n"
    assert decode(ascii_pgm, "Grayscale")[..., 0].tolist() == [[0, 255]]


def encode_tiff(image: np.ndarray, packbits: bool) -> bytes:
    """Little-endian single-strip RGB TIFF, uncompressed or PackBits (literal runs only)."""
    height, width, _ = image.shape
    pixels = image.tobytes()
    if packbits:
        pixels = b"".join(bytes([len(c) - 1]) + c for c in (pixels[i : i + 128] for i in range(0, len(pixels), 128)))
    entries = [
        (256, 3, 1, width), (257, 3, 1, height), (258, 3, 3, 8 + 8 * 0), (259, 3, 1, 32773 if packbits else 1),
        (262, 3, 1, 2), (273, 4, 1, 0), (277, 3, 1, 3), (278, 3, 1, height), (279, 4, 1, len(pixels)),
    ]  # fmt: skip
    ifd_size = 2 + 12 * len(entries) + 4
    bits_at = 8 + ifd_size
    data_at = bits_at + 6
    ifd = struct.pack("<H", len(entries))
    for tag, kind, count, value in entries:
        if tag == 258:
            ifd += struct.pack("<HHII", tag, kind, count, bits_at)
        elif tag == 273:
            ifd += struct.pack("<HHII", tag, kind, count, data_at)
        elif kind == 3:
            ifd += struct.pack("<HHIHH", tag, kind, count, value, 0)
        else:
            ifd += struct.pack("<HHII", tag, kind, count, value)
    return b"II*\0" + struct.pack("<I", 8) + ifd + b"\0\0\0\0" + struct.pack("<HHH", 8, 8, 8) + pixels


@pytest.mark.parametrize("packbits", [False, True])
def test_tiff_strips(packbits: bool) -> None:
    np.testing.assert_array_equal(decode(encode_tiff(IMAGE, packbits)), IMAGE)


def test_jpeg_pixel_formats_agree_with_each_other() -> None:
    data = frozen.image_decoder_decode_jpeg_rgb.data.tobytes()
    rgb = decode(data)
    np.testing.assert_array_equal(rgb, frozen.image_decoder_decode_jpeg_rgb.output)
    np.testing.assert_array_equal(decode(data, "BGR"), rgb[..., ::-1])
    luma = (rgb.astype(np.int64) @ np.array([19595, 38470, 7471]) + 0x8000) >> 16
    np.testing.assert_array_equal(decode(data, "Grayscale")[..., 0], luma)


def test_islow_idct_is_within_one_level_of_the_exact_idct() -> None:
    coefs = RNG.integers(-300, 300, (20, 8, 8)) * (RNG.random((20, 8, 8)) < 0.3)
    k = np.arange(8)
    basis = np.cos((2 * k[:, None] + 1) * k[None, :] * np.pi / 16) * np.where(k == 0, np.sqrt(0.5), 1.0)[None, :]
    exact = np.clip(np.round(basis @ coefs @ basis.T / 4) + 128, 0, 255)
    assert np.abs(idct_islow(coefs) - exact).max() <= 1


def test_fancy_upsampling_weights_and_ycc_conversion() -> None:
    plane = np.array([[0, 160], [80, 240]])
    out = upsample(plane, 2, 1)  # only 2 columns: libjpeg falls back to replication
    assert out.tolist() == [[0, 0, 160, 160], [80, 80, 240, 240]]
    wide = np.array([[0, 16, 32]])
    assert upsample(wide, 2, 1).tolist() == [[0, 4, 12, 20, 28, 32]]  # 3/4 near + 1/4 far, alternating rounding
    grey = ycc_to_rgb(np.array([77]), np.array([128]), np.array([128]))
    assert grey.tolist() == [[77, 77, 77]]
    red = ycc_to_rgb(np.array([76]), np.array([85]), np.array([255]))
    assert red.tolist() == [[254, 0, 0]]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"RIFF\0\0\0\0WEBPVP8 ", "WebP images are not supported"),
        (b"\0\0\0\x0cjP  \r\n\x87\n", "JPEG 2000 images are not supported"),
        (b"GIF89a", "unrecognised image format"),
        (b"\xff\xd8\xff\xc2\0\x0b\x08\0\x01\0\x01\x01\x01\x11\0", "only baseline"),
    ],
)
def test_unsupported_inputs_fail_with_a_clear_message(data: bytes, message: str) -> None:
    with pytest.raises(KernelError, match=message):
        decode(data)
