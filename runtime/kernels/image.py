"""ImageDecoder with decoders written here on the standard library (``zlib``) and NumPy, so that the runtime
needs no imaging dependency.

Supported: PNG (8-bit, non-interlaced, all colour types), BMP (uncompressed 8/24/32-bit), PNM (P2/P3/P5/P6,
8-bit), TIFF (8-bit strips, uncompressed or PackBits) and baseline JPEG (see ``runtime.kernels.jpeg``).
Not supported: WebP and JPEG 2000 (each needs a full codec of its own); those inputs fail with a clear error.
Greyscale output uses the ITU-R 601 luma weights in the 16-bit fixed point that Pillow uses, so results match
the ONNX expected outputs (which were produced with Pillow).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register
from runtime.kernels.jpeg import decode_jpeg


class ImageFormatError(ValueError):
    """The bytes are not an image this decoder can read."""


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    if pa <= pb and pa <= pc:
        return a
    return b if pb <= pc else c


def _png_unfilter(raw: bytes, height: int, stride: int, bpp: int) -> np.ndarray:
    """Undo PNG's per-row filters (None, Sub, Up, Average, Paeth)."""
    out = np.zeros((height, stride), dtype=np.uint8)
    prev = np.zeros(stride, dtype=np.int64)
    pos = 0
    for y in range(height):
        kind = raw[pos]
        row = np.frombuffer(raw, dtype=np.uint8, count=stride, offset=pos + 1).astype(np.int64)
        pos += stride + 1
        if kind == 0:
            cur = row
        elif kind == 2:
            cur = (row + prev) & 0xFF
        else:
            cur = row.copy()
            for i in range(stride):
                left = int(cur[i - bpp]) if i >= bpp else 0
                if kind == 1:
                    cur[i] = (cur[i] + left) & 0xFF
                elif kind == 3:
                    cur[i] = (cur[i] + (left + int(prev[i])) // 2) & 0xFF
                elif kind == 4:
                    up_left = int(prev[i - bpp]) if i >= bpp else 0
                    cur[i] = (cur[i] + _paeth(left, int(prev[i]), up_left)) & 0xFF
                else:
                    raise ImageFormatError(f"PNG: unknown filter type {kind}")
        out[y] = cur
        prev = cur
    return out


def decode_png(data: bytes) -> np.ndarray:
    """8-bit PNG to ``[H, W, C]`` uint8 (C = 1 grey, 2 grey+alpha, 3 RGB, 4 RGBA; palettes expand to RGB)."""
    pos = 8
    header: tuple[int, ...] = ()
    palette = b""
    idat = bytearray()
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"PLTE":
            palette = body
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or interlace:
        raise ImageFormatError(f"PNG: only 8-bit non-interlaced images are supported (depth {depth})")
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]
    pixels = _png_unfilter(zlib.decompress(bytes(idat)), height, width * channels, channels)
    image = pixels.reshape(height, width, channels)
    if color == 3:
        table = np.frombuffer(palette, dtype=np.uint8).reshape(-1, 3)
        image = table[image[..., 0]]
    return image


def decode_bmp(data: bytes) -> np.ndarray:
    """Uncompressed 8-bit (palette), 24-bit or 32-bit BMP to ``[H, W, 3]`` RGB."""
    offset = struct.unpack("<I", data[10:14])[0]
    header_size = struct.unpack("<I", data[14:18])[0]
    width, height, _, bits, compression = struct.unpack("<iiHHI", data[18:34])
    if compression not in (0, 3) or bits not in (8, 24, 32):
        raise ImageFormatError(f"BMP: {bits}-bit images with compression {compression} are not supported")
    bottom_up = height > 0
    height = abs(height)
    stride = (width * bits // 8 + 3) // 4 * 4
    rows = np.frombuffer(data, dtype=np.uint8, count=stride * height, offset=offset).reshape(height, stride)
    if bits == 8:
        table = np.frombuffer(data, dtype=np.uint8, count=256 * 4, offset=14 + header_size).reshape(-1, 4)
        image = table[rows[:, :width]][..., 2::-1]
    else:
        image = rows[:, : width * bits // 8].reshape(height, width, bits // 8)[..., 2::-1]
    return np.ascontiguousarray(image[::-1] if bottom_up else image)


def decode_pnm(data: bytes) -> np.ndarray:
    """PGM/PPM (ASCII P2/P3 or binary P5/P6, maxval up to 255) to ``[H, W, C]``."""
    tokens: list[bytes] = []
    pos = 0
    while len(tokens) < 4:
        while data[pos : pos + 1].isspace():
            pos += 1
        if data[pos : pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while end < len(data) and not data[end : end + 1].isspace():
            end += 1
        tokens.append(data[pos:end])
        pos = end
    magic, width, height, maxval = tokens[0], int(tokens[1]), int(tokens[2]), int(tokens[3])
    channels = 3 if magic in (b"P3", b"P6") else 1
    if maxval > 255:
        raise ImageFormatError("PNM: only 8-bit images are supported")
    count = width * height * channels
    if magic in (b"P5", b"P6"):
        values = np.frombuffer(data, dtype=np.uint8, count=count, offset=pos + 1)
    elif magic in (b"P2", b"P3"):
        values = np.array(data[pos:].split()[:count], dtype=np.int64).astype(np.uint8)
    else:
        raise ImageFormatError(f"PNM: unsupported magic {magic!r}")
    if maxval != 255:
        values = ((values.astype(np.int64) * 255 + maxval // 2) // maxval).astype(np.uint8)
    return values.reshape(height, width, channels)


def _unpack_bits(chunk: bytes) -> bytes:
    """PackBits run-length decoding (TIFF compression 32773)."""
    out = bytearray()
    i = 0
    while i < len(chunk):
        n = chunk[i] - 256 if chunk[i] > 127 else chunk[i]
        i += 1
        if n >= 0:
            out += chunk[i : i + n + 1]
            i += n + 1
        elif n != -128:
            out += chunk[i : i + 1] * (1 - n)
            i += 1
    return bytes(out)


def decode_tiff(data: bytes) -> np.ndarray:
    """First image of an 8-bit chunky TIFF (strips, uncompressed or PackBits) to ``[H, W, C]``."""
    order = "<" if data[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", data[4:8])
    (count,) = struct.unpack(order + "H", data[ifd : ifd + 2])
    sizes = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 7: 1}
    codes = {1: "B", 2: "c", 3: "H", 4: "I", 5: "II", 7: "B"}
    tags: dict[int, list[int]] = {}
    for i in range(count):
        entry = data[ifd + 2 + 12 * i : ifd + 14 + 12 * i]
        tag, kind, n = struct.unpack(order + "HHI", entry[:8])
        nbytes = sizes.get(kind, 1) * n
        raw = entry[8 : 8 + nbytes] if nbytes <= 4 else data[struct.unpack(order + "I", entry[8:12])[0] :][:nbytes]
        if kind in (1, 3, 4):
            tags[tag] = list(struct.unpack(order + codes[kind] * n, raw))
    width, height = tags[256][0], tags[257][0]
    bits = tags.get(258, [1])
    channels = tags.get(277, [1])[0]
    compression = tags.get(259, [1])[0]
    if any(b != 8 for b in bits) or tags.get(284, [1])[0] != 1 or compression not in (1, 32773):
        raise ImageFormatError("TIFF: only 8-bit chunky strips, uncompressed or PackBits, are supported")
    strips = b"".join(
        data[o : o + n] if compression == 1 else _unpack_bits(data[o : o + n])
        for o, n in zip(tags[273], tags[279], strict=True)
    )
    image = np.frombuffer(strips, dtype=np.uint8, count=width * height * channels).reshape(height, width, channels)
    if tags.get(262, [1])[0] == 0:  # WhiteIsZero
        image = 255 - image
    return image


def to_rgb(image: np.ndarray) -> np.ndarray:
    """``[H, W, 1|2|3|4]`` to RGB (grey is replicated, alpha dropped)."""
    channels = image.shape[2]
    if channels in (1, 2):
        return np.repeat(image[..., :1], 3, axis=2)
    return image[..., :3]


def to_grey(image: np.ndarray) -> np.ndarray:
    """``[H, W, 1]`` luma: Pillow's ``L = (19595 R + 38470 G + 7471 B + 2^15) >> 16``."""
    if image.shape[2] in (1, 2):
        return image[..., :1].copy()
    rgb = image[..., :3].astype(np.uint32)
    luma = (rgb[..., 0] * 19595 + rgb[..., 1] * 38470 + rgb[..., 2] * 7471 + 0x8000) >> 16
    return luma.astype(np.uint8)[..., None]


def decode_image(data: bytes) -> np.ndarray:
    """Decode by signature; raises ImageFormatError for formats without a decoder here."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return decode_png(data)
    if data[:2] == b"\xff\xd8":
        return decode_jpeg(data)
    if data[:2] == b"BM":
        return decode_bmp(data)
    if data[:2] in (b"P2", b"P3", b"P5", b"P6"):
        return decode_pnm(data)
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return decode_tiff(data)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        raise ImageFormatError("WebP images are not supported (no WebP codec without new dependencies)")
    if data[4:12] == b"jP  \r\n\x87\n" or data[:4] == b"\xff\x4f\xff\x51":
        raise ImageFormatError("JPEG 2000 images are not supported (no JPEG 2000 codec without new dependencies)")
    raise ImageFormatError("unrecognised image format")


@register
class ImageDecoder(Kernel):
    """Decode an encoded image (a 1-D uint8 tensor) to ``[H, W, 3]`` RGB/BGR or ``[H, W, 1]`` greyscale."""

    op_type = "ImageDecoder"
    since_version = 20
    attr_defaults: ClassVar[dict[str, Any]] = {"pixel_format": "RGB"}

    def compute(self, encoded: np.ndarray) -> np.ndarray:
        image = decode_image(np.asarray(encoded, dtype=np.uint8).tobytes())
        fmt = self.attrs["pixel_format"]
        if fmt == "RGB":
            return np.ascontiguousarray(to_rgb(image))
        if fmt == "BGR":
            return np.ascontiguousarray(to_rgb(image)[..., ::-1])
        if fmt == "Grayscale":
            return to_grey(image)
        raise ValueError(f"unknown pixel_format {fmt!r}")
