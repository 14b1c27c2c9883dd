"""Baseline JPEG decoder (Huffman, 8-bit, 1 or 3 components, any 1x/2x chroma subsampling, restart markers).

Written to reproduce libjpeg's default decoding bit for bit, because the ONNX expected outputs come from Pillow
(libjpeg-turbo): the "islow" integer IDCT (13-bit constants, 2 extra bits between passes), "fancy" triangle-
filter chroma upsampling with libjpeg's alternating rounding, and its 16-bit fixed-point YCbCr->RGB tables.
Progressive and arithmetic-coded JPEGs, 12-bit samples and CMYK are not supported (clear error).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np


class JpegError(ValueError):
    """The bytes are not a JPEG this decoder supports."""


def _zigzag() -> np.ndarray:
    """Natural (row-major) index of each zig-zag position."""
    order: list[int] = []
    for s in range(15):
        rows = range(min(s, 7), max(0, s - 7) - 1, -1) if s % 2 == 0 else range(max(0, s - 7), min(s, 7) + 1)
        order.extend(r * 8 + (s - r) for r in rows)
    return np.array(order)


ZIGZAG = _zigzag()


@dataclass
class _Component:
    ident: int
    h: int
    v: int
    quant: int
    dc_table: int = 0
    ac_table: int = 0
    blocks: np.ndarray = field(default_factory=lambda: np.zeros(0))


class _BitReader:
    """MSB-first bits of one entropy-coded segment (byte stuffing already removed)."""

    def __init__(self, data: bytes) -> None:
        self.bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8)).tolist()
        self.pos = 0

    def bit(self) -> int:
        if self.pos >= len(self.bits):
            return 1  # libjpeg pads a truncated stream with ones
        b = self.bits[self.pos]
        self.pos += 1
        return int(b)

    def receive(self, n: int) -> int:
        v = 0
        for _ in range(n):
            v = (v << 1) | self.bit()
        return v

    def receive_extend(self, n: int) -> int:
        """An n-bit magnitude category value, sign-extended as JPEG codes it."""
        if n == 0:
            return 0
        v = self.receive(n)
        return v if v >= 1 << (n - 1) else v - (1 << n) + 1

    def decode(self, table: dict[tuple[int, int], int]) -> int:
        code = 0
        for length in range(1, 17):
            code = (code << 1) | self.bit()
            symbol = table.get((length, code))
            if symbol is not None:
                return symbol
        raise JpegError("JPEG: invalid Huffman code")


def _huffman_table(counts: bytes, symbols: bytes) -> dict[tuple[int, int], int]:
    """Canonical Huffman codes: ``(length, code) -> symbol``."""
    table: dict[tuple[int, int], int] = {}
    code, k = 0, 0
    for length in range(1, 17):
        for _ in range(counts[length - 1]):
            table[(length, code)] = symbols[k]
            code += 1
            k += 1
        code <<= 1
    return table


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _descale(x: np.ndarray, n: int) -> np.ndarray:
    return (x + (1 << (n - 1))) >> n


def _idct_1d(d: list[np.ndarray], shift: int) -> list[np.ndarray]:
    """libjpeg's islow 1-D IDCT (Loeffler-Ligtenberg-Moschytz, 13-bit constants) with final descale."""
    z1 = (d[2] + d[6]) * 4433
    tmp2 = z1 - d[6] * 15137
    tmp3 = z1 + d[2] * 6270
    tmp0 = (d[0] + d[4]) << 13
    tmp1 = (d[0] - d[4]) << 13
    t10, t13, t11, t12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    o0, o1, o2, o3 = d[7], d[5], d[3], d[1]
    z1, z2, z3, z4 = o0 + o3, o1 + o2, o0 + o2, o1 + o3
    z5 = (z3 + z4) * 9633
    o0, o1, o2, o3 = o0 * 2446, o1 * 16819, o2 * 25172, o3 * 12299
    z1, z2 = z1 * -7373, z2 * -20995
    z3, z4 = z3 * -16069 + z5, z4 * -3196 + z5
    o0, o1, o2, o3 = o0 + z1 + z3, o1 + z2 + z4, o2 + z2 + z3, o3 + z1 + z4
    outs = [t10 + o3, t11 + o2, t12 + o1, t13 + o0, t13 - o0, t12 - o1, t11 - o2, t10 - o3]
    return [_descale(v, shift) for v in outs]


def idct_islow(coefs: np.ndarray) -> np.ndarray:
    """Dequantised ``[..., 8, 8]`` coefficients (row = vertical frequency) to 0..255 samples."""
    c = coefs.astype(np.int64)
    cols = _idct_1d([c[..., k, :] for k in range(8)], 13 - 2)  # pass 1: down the columns
    work = np.stack(cols, axis=-2)
    rows = _idct_1d([work[..., :, k] for k in range(8)], 13 + 2 + 3)  # pass 2: along the rows
    return np.clip(np.stack(rows, axis=-1) + 128, 0, 255)


def _fancy_h2(x: np.ndarray, near_w: int, far_w: int, bias_even: int, bias_odd: int, shift: int) -> np.ndarray:
    """Horizontal triangle filter doubling the width; edges replicate."""
    left = np.concatenate([x[:, :1], x[:, :-1]], axis=1)
    right = np.concatenate([x[:, 1:], x[:, -1:]], axis=1)
    out = np.empty((x.shape[0], 2 * x.shape[1]), dtype=np.int64)
    out[:, 0::2] = (x * near_w + left * far_w + bias_even) >> shift
    out[:, 1::2] = (x * near_w + right * far_w + bias_odd) >> shift
    return out


def upsample(plane: np.ndarray, hx: int, vx: int) -> np.ndarray:
    """libjpeg's chroma upsampling: fancy for 2x horizontal/vertical factors, box replication otherwise."""
    p = plane.astype(np.int64)
    if (hx, vx) == (1, 1):
        return p
    if (hx, vx) == (2, 2) and p.shape[1] > 2:
        above = np.concatenate([p[:1], p[:-1]], axis=0)
        below = np.concatenate([p[1:], p[-1:]], axis=0)
        out = np.empty((2 * p.shape[0], 2 * p.shape[1]), dtype=np.int64)
        out[0::2] = _fancy_h2(p * 3 + above, 3, 1, 8, 7, 4)
        out[1::2] = _fancy_h2(p * 3 + below, 3, 1, 8, 7, 4)
        return out
    if (hx, vx) == (2, 1) and p.shape[1] > 2:
        return _fancy_h2(p, 3, 1, 1, 2, 2)
    if (hx, vx) == (1, 2):
        above = np.concatenate([p[:1], p[:-1]], axis=0)
        below = np.concatenate([p[1:], p[-1:]], axis=0)
        out = np.empty((2 * p.shape[0], p.shape[1]), dtype=np.int64)
        out[0::2] = (p * 3 + above + 1) >> 2
        out[1::2] = (p * 3 + below + 2) >> 2
        return out
    return np.repeat(np.repeat(p, vx, axis=0), hx, axis=1)


def ycc_to_rgb(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """libjpeg's fixed-point (16-bit) YCbCr -> RGB, rounding as its lookup tables do."""
    one_half = 1 << 15

    def fix(v: float) -> int:
        return int(v * 65536 + 0.5)

    x_cb, x_cr = cb - 128, cr - 128
    r = y + ((fix(1.40200) * x_cr + one_half) >> 16)
    g = y + ((-fix(0.34414) * x_cb + one_half - fix(0.71414) * x_cr) >> 16)
    b = y + ((fix(1.77200) * x_cb + one_half) >> 16)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


def _scan_segments(data: bytes, pos: int) -> tuple[list[bytes], int]:
    """Entropy-coded data from ``pos``, split at restart markers, unstuffed; returns the end position."""
    segments: list[bytes] = []
    current = bytearray()
    while pos < len(data):
        byte = data[pos]
        if byte != 0xFF:
            current.append(byte)
            pos += 1
            continue
        nxt = data[pos + 1] if pos + 1 < len(data) else 0xD9
        if nxt == 0x00:
            current.append(0xFF)
            pos += 2
        elif 0xD0 <= nxt <= 0xD7:
            segments.append(bytes(current))
            current = bytearray()
            pos += 2
        elif nxt == 0xFF:
            pos += 1  # fill byte
        else:
            break
    segments.append(bytes(current))
    return segments, pos


def decode_jpeg(data: bytes) -> np.ndarray:
    """Decode a baseline JPEG to ``[H, W, 3]`` RGB or ``[H, W, 1]`` greyscale uint8."""
    quant: dict[int, np.ndarray] = {}
    dc_tables: dict[int, dict[tuple[int, int], int]] = {}
    ac_tables: dict[int, dict[tuple[int, int], int]] = {}
    comps: list[_Component] = []
    width = height = restart = 0
    adobe_transform: int | None = None
    pos = 2
    while pos < len(data):
        if data[pos] != 0xFF:
            raise JpegError("JPEG: marker expected")
        marker = data[pos + 1]
        pos += 2
        if marker == 0xD9:
            break
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            continue
        (length,) = struct.unpack(">H", data[pos : pos + 2])
        body = data[pos + 2 : pos + length]
        pos += length
        if marker == 0xDB:
            i = 0
            while i < len(body):
                precision, table_id = body[i] >> 4, body[i] & 15
                size = 128 if precision else 64
                raw = np.frombuffer(body, dtype=">u2" if precision else np.uint8, count=64, offset=i + 1)
                table = np.zeros(64, dtype=np.int64)
                table[ZIGZAG] = raw
                quant[table_id] = table.reshape(8, 8)
                i += 1 + size
        elif marker == 0xC4:
            i = 0
            while i < len(body):
                cls, table_id = body[i] >> 4, body[i] & 15
                counts = body[i + 1 : i + 17]
                n = sum(counts)
                (ac_tables if cls else dc_tables)[table_id] = _huffman_table(counts, body[i + 17 : i + 17 + n])
                i += 17 + n
        elif marker in (0xC0, 0xC1):
            precision, height, width, n_comp = struct.unpack(">BHHB", body[:6])
            if precision != 8:
                raise JpegError(f"JPEG: {precision}-bit samples are not supported")
            comps = [
                _Component(body[6 + 3 * k], body[7 + 3 * k] >> 4, body[7 + 3 * k] & 15, body[8 + 3 * k])
                for k in range(n_comp)
            ]
        elif 0xC2 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            raise JpegError("JPEG: only baseline (sequential Huffman) images are supported")
        elif marker == 0xDD:
            (restart,) = struct.unpack(">H", body[:2])
        elif marker == 0xEE and body[:5] == b"Adobe":
            adobe_transform = body[11]
        elif marker == 0xDA:
            segments, pos = _scan_segments(data, pos)
            _decode_scan(body, comps, dc_tables, ac_tables, segments, width, height, restart)
    if not comps:
        raise JpegError("JPEG: no frame header")
    return _assemble(comps, quant, width, height, adobe_transform)


def _decode_scan(
    header: bytes,
    comps: list[_Component],
    dc_tables: dict[int, dict[tuple[int, int], int]],
    ac_tables: dict[int, dict[tuple[int, int], int]],
    segments: list[bytes],
    width: int,
    height: int,
    restart: int,
) -> None:
    """Huffman-decode one sequential scan into each component's ``[rows, cols, 64]`` blocks (natural order)."""
    by_id = {c.ident: c for c in comps}
    in_scan = []
    for k in range(header[0]):
        comp = by_id[header[1 + 2 * k]]
        comp.dc_table, comp.ac_table = header[2 + 2 * k] >> 4, header[2 + 2 * k] & 15
        in_scan.append(comp)
    hmax, vmax = max(c.h for c in comps), max(c.v for c in comps)
    mcux, mcuy = _ceil_div(width, 8 * hmax), _ceil_div(height, 8 * vmax)
    for comp in in_scan:
        if comp.blocks.size == 0:
            comp.blocks = np.zeros((mcuy * comp.v, mcux * comp.h, 64), dtype=np.int64)
    if len(in_scan) == 1:  # non-interleaved: one block per MCU over the component's own extent
        comp = in_scan[0]
        cols = _ceil_div(_ceil_div(width * comp.h, hmax), 8)
        rows = _ceil_div(_ceil_div(height * comp.v, vmax), 8)
        units = [[(comp, r, c)] for r in range(rows) for c in range(cols)]
    else:
        units = [
            [(comp, my * comp.v + v, mx * comp.h + h) for comp in in_scan for v in range(comp.v) for h in range(comp.h)]
            for my in range(mcuy)
            for mx in range(mcux)
        ]
    per_segment = restart or len(units)
    for s, start in enumerate(range(0, len(units), per_segment)):
        reader = _BitReader(segments[s] if s < len(segments) else b"")
        predictors = {c.ident: 0 for c in in_scan}
        for unit in units[start : start + per_segment]:
            for comp, r, c in unit:
                block = comp.blocks[r, c]
                t = reader.decode(dc_tables[comp.dc_table])
                predictors[comp.ident] += reader.receive_extend(t)
                block[0] = predictors[comp.ident]
                k = 1
                ac = ac_tables[comp.ac_table]
                while k < 64:
                    rs = reader.decode(ac)
                    run, size = rs >> 4, rs & 15
                    if size:
                        k += run
                        block[ZIGZAG[k]] = reader.receive_extend(size)
                        k += 1
                    elif run == 15:
                        k += 16
                    else:
                        break


def _assemble(
    comps: list[_Component], quant: dict[int, np.ndarray], width: int, height: int, adobe_transform: int | None
) -> np.ndarray:
    """IDCT every block, upsample chroma, crop and convert colour."""
    hmax, vmax = max(c.h for c in comps), max(c.v for c in comps)
    planes = []
    for comp in comps:
        rows, cols = comp.blocks.shape[:2]
        coefs = comp.blocks.reshape(rows, cols, 8, 8) * quant[comp.quant]
        samples = idct_islow(coefs).transpose(0, 2, 1, 3).reshape(rows * 8, cols * 8)
        comp_w, comp_h = _ceil_div(width * comp.h, hmax), _ceil_div(height * comp.v, vmax)
        plane = upsample(samples[:comp_h, :comp_w], hmax // comp.h, vmax // comp.v)
        planes.append(plane[:height, :width])
    if len(planes) == 1:
        return planes[0].astype(np.uint8)[..., None]
    if len(planes) == 3:
        if adobe_transform == 0:
            return np.stack(planes, axis=-1).astype(np.uint8)
        return ycc_to_rgb(*planes)
    raise JpegError(f"JPEG: {len(planes)}-component images are not supported")
