"""Kernel units: the pieces a model's time is the sum of, each described by plain numbers.

A unit is what inference frameworks run as one kernel: a convolution or matrix product with the bias, batch norm,
activation and residual add they fuse into it, or one pooling, normalisation, element-wise or data-movement node.
``analysis.unitgraph`` cuts an ONNX graph into units; ``benchmarks.unit_sweep`` measures sampled units alone on
each backend; ``perfmodels.unitfit`` learns each route's time per unit kind from those sweeps and predicts a model
as the sum of its units (nn-Meter's kernel-level prediction, Zhang et al., MobiSys 2021).

Dimensions are given for one sample: the first dimension of each kind (``BATCHED``) is multiplied by the batch.

Example::

    >>> u = Unit("conv", {"n": 1, "cin": 64, "cout": 64, "h": 56, "w": 56, "kh": 3, "kw": 3, "stride": 1,
    ...                   "group": 1, "oh": 56, "ow": 56, "act": 1, "residual": 0, "init_w": 1})
    >>> round(unit_flops(u, batch=1) / 1e9, 3)
    0.231
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: The dimensions each kind is described by, in order. ``act``/``residual``: a fused activation / residual add;
#: ``init_w``: the weights are stored in the model (1) or computed in it (0: a quantiser may leave them in fp32);
#: ``dwpw``: a depthwise convolution and the 1x1 convolution that alone reads it (MobileNet's separable block, which
#: runtimes with a fused kernel run without writing the tensor between them);
#: ``heavy``: a transcendental element-wise function (Erf, Exp, Tanh, Sigmoid…); ``avg``: average (not max) pooling;
#: ``skipnorm``: a residual add read only by a layer normalisation (a transformer block's ``LayerNorm(x + f(x))``,
#: which onnxruntime runs as one SkipLayerNormalization kernel and others as two); ``permute``: a transpose that keeps
#: the last axes in place, so it moves rows of ``block`` contiguous elements (a transformer's head split and merge),
#: where a ``move`` is any other data movement (a transpose that moves the last axis, a concat, a gather);
#: ``recurrent``: an LSTM (4 gates), GRU (3) or plain RNN (1) layer over ``steps`` steps in one or two
#: ``directions``, which every runtime runs as one kernel looping over the steps (how well it loops is its own: one
#: runtime's fused loop is not another's, nor a product per step measured alone).
KINDS: dict[str, tuple[str, ...]] = {
    "conv": ("n", "cin", "cout", "h", "w", "kh", "kw", "stride", "group", "oh", "ow", "act", "residual", "init_w"),
    "dwconv": ("n", "c", "mult", "h", "w", "kh", "kw", "stride", "oh", "ow", "act", "residual", "init_w"),
    "dwpw": ("n", "c", "h", "w", "kh", "kw", "stride", "oh", "ow", "cout", "dw_act", "act", "residual", "init_w"),
    "gemm": ("m", "k", "n", "act", "init_w"),
    "bmm": ("b", "m", "k", "n"),
    "pool": ("n", "c", "h", "w", "kh", "kw", "stride", "oh", "ow", "avg"),
    "eltwise": ("elements", "inputs", "heavy"),
    "layernorm": ("rows", "cols"),
    "softmax": ("rows", "cols"),
    "lrn": ("n", "c", "hw", "size"),
    "move": ("elements",),
    "noop": ("nodes",),
    "skipnorm": ("rows", "cols"),
    "permute": ("elements", "block"),
    "recurrent": ("batch", "steps", "inputs", "hidden", "gates", "directions"),
}
#: The dimension of each kind that grows with the batch.
BATCHED = {kind: dims[0] for kind, dims in KINDS.items() if kind != "noop"}
#: Kinds whose weights a post-training quantiser converts to int8.
QUANTISABLE = ("conv", "dwconv", "dwpw", "gemm")
_F32 = 4.0


@dataclass(frozen=True)
class Unit:
    """One kernel unit: its kind, its dimensions for one sample, and how many identical ones the model has."""

    kind: str
    dims: Mapping[str, int] = field(hash=False)
    count: int = 1

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown unit kind {self.kind!r}; known: {', '.join(KINDS)}")
        missing = [d for d in KINDS[self.kind] if d not in self.dims]
        if missing:
            raise ValueError(f"{self.kind} unit lacks {', '.join(missing)}")

    def __getitem__(self, name: str) -> int:
        return int(self.dims[name])

    def at_batch(self, batch: int) -> Unit:
        """The same unit with its batched dimension multiplied by ``batch``."""
        if self.kind == "noop" or batch == 1:
            return self
        dims = dict(self.dims)
        dims[BATCHED[self.kind]] = dims[BATCHED[self.kind]] * batch
        return Unit(self.kind, dims, self.count)

    def signature(self) -> str:
        """A short stable name: kind and dimensions (the count left out)."""
        return self.kind + "_" + "_".join(str(int(self.dims[d])) for d in KINDS[self.kind])

    def encode(self) -> list[object]:
        return [self.kind, [int(self.dims[d]) for d in KINDS[self.kind]], self.count]


def check_units(items: object) -> None:
    """ValueError naming the first item of a decoded ``units`` list that is not ``[kind, dims, count]`` of a known
    kind with that kind's number of dimensions (what ``decode_units`` needs, without building the units)."""
    if items is None:
        return
    if not isinstance(items, (list, tuple)):
        raise ValueError("expected a list of [kind, dimensions, count]")
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) != 3 or not isinstance(item[1], (list, tuple)):
            raise ValueError(f"expected [kind, dimensions, count], got {str(item)[:60]}")
        kind = item[0]
        if kind not in KINDS:
            raise ValueError(
                f"unknown unit kind {str(kind)[:40]!r} (written by a newer appopt?); known: {', '.join(KINDS)}"
            )
        if len(item[1]) != len(KINDS[kind]):
            raise ValueError(f"{kind} unit has {len(item[1])} dimensions, expected {len(KINDS[kind])}")


def decode_units(text: str | Sequence[object] | None) -> list[Unit]:
    """Units from their JSON form (``encode_units``); empty for no text."""
    if text is None or (isinstance(text, float) and math.isnan(text)) or text == "":
        return []
    items = json.loads(text) if isinstance(text, str) else text
    check_units(items)
    units = []
    for item in items:
        kind, values, count = item  # type: ignore[misc]
        units.append(Unit(kind, dict(zip(KINDS[kind], (int(v) for v in values), strict=True)), int(count)))
    return units


def encode_units(units: Iterable[Unit]) -> str:
    """Compact JSON of ``units``, identical units merged (their counts added), in first-seen order."""
    merged: dict[str, list[object]] = {}
    for unit in units:
        key = unit.signature()
        if key in merged:
            merged[key][2] = int(merged[key][2]) + unit.count  # type: ignore[call-overload]
        else:
            merged[key] = unit.encode()
    return json.dumps(list(merged.values()), separators=(",", ":"))


#: The kinds ``unfused`` gives other kinds' units for (a route that has not measured one prices those).
UNFUSABLE = frozenset({"skipnorm", "permute", "recurrent"})


def unfused(unit: Unit) -> list[Unit] | None:
    """The units a route that has not measured ``unit``'s kind is predicted as (None: the kind has no other form):
    a ``skipnorm`` is a two-input add, then a layer normalisation (a library without the fusion runs those); a
    ``permute`` is a ``move`` of as many elements (what the kind was before it had its own); a ``recurrent`` layer is,
    per direction, its input projection over the whole sequence as one matrix product, each step's product by the
    recurrent weights, and the gates' math over the sequence as one element-wise pass (the parts' counts say how
    many; what the kind was before it had its own).
    """
    if unit.kind == "recurrent":
        r, width = unit, unit["gates"] * unit["hidden"]
        dirs = r["directions"]
        return [
            Unit("gemm", {"m": r["steps"] * r["batch"], "k": r["inputs"], "n": width, "act": 0, "init_w": 1}, dirs),
            Unit("gemm", {"m": r["batch"], "k": r["hidden"], "n": width, "act": 0, "init_w": 1}, r["steps"] * dirs),
            Unit("eltwise", {"elements": r["steps"] * r["batch"] * width, "inputs": 2, "heavy": 1}, dirs),
        ]
    if unit.kind == "skipnorm":
        rows, cols = unit["rows"], unit["cols"]
        return [Unit("eltwise", {"elements": rows * cols, "inputs": 2, "heavy": 0}),
                Unit("layernorm", {"rows": rows, "cols": cols})]
    if unit.kind == "permute":
        return [Unit("move", {"elements": unit["elements"]})]
    return None


def unfuse(units: Iterable[Unit], kinds: Iterable[str]) -> list[Unit]:
    """``units`` with those of ``kinds`` replaced by their ``unfused`` parts (counts multiplied): what a model fitted
    before those kinds had units of their own sees."""
    kinds = set(kinds)
    out: list[Unit] = []
    for unit in units:
        parts = unfused(unit) if unit.kind in kinds else None
        if parts is None:
            out.append(unit)
        else:
            out.extend(Unit(p.kind, p.dims, p.count * unit.count) for p in parts)
    return out


def _recurrent_sizes(u: Unit) -> tuple[float, float, float]:
    """(MACs, gate elements, weight elements) of a recurrent unit: every step multiplies its input and the hidden
    state by each gate's weights, in each direction."""
    gate_elements = float(u["steps"] * u["batch"] * u["directions"] * u["gates"] * u["hidden"])
    weights = float(u["directions"] * u["gates"] * u["hidden"] * (u["inputs"] + u["hidden"] + 2))
    return gate_elements * (u["inputs"] + u["hidden"]), gate_elements, weights


def unit_flops(unit: Unit, batch: int = 1) -> float:
    """Floating-point operations of one unit at ``batch`` (multiply-add = 2)."""
    u = unit.at_batch(batch)
    k = u.kind
    if k == "conv":
        macs = u["n"] * u["cout"] * u["oh"] * u["ow"] * (u["cin"] // max(u["group"], 1)) * u["kh"] * u["kw"]
        return 2.0 * macs + u["n"] * u["cout"] * u["oh"] * u["ow"] * (1 + u["act"] + u["residual"])
    if k == "dwconv":
        outs = u["n"] * u["c"] * u["mult"] * u["oh"] * u["ow"]
        return 2.0 * outs * u["kh"] * u["kw"] + outs * (1 + u["act"] + u["residual"])
    if k == "dwpw":
        mid, out = u["n"] * u["c"] * u["oh"] * u["ow"], u["n"] * u["cout"] * u["oh"] * u["ow"]
        macs = mid * (u["kh"] * u["kw"] + u["cout"])
        return 2.0 * macs + mid * (1 + u["dw_act"]) + out * (1 + u["act"] + u["residual"])
    if k == "gemm":
        return 2.0 * u["m"] * u["k"] * u["n"] + u["m"] * u["n"] * (1 + u["act"])
    if k == "bmm":
        return 2.0 * u["b"] * u["m"] * u["k"] * u["n"]
    if k == "pool":
        return float(u["n"] * u["c"] * u["oh"] * u["ow"] * u["kh"] * u["kw"])
    if k == "eltwise":
        return float(u["elements"] * (8 if u["heavy"] else 1))
    if k in ("layernorm", "softmax"):
        return 5.0 * u["rows"] * u["cols"]
    if k == "skipnorm":
        return 6.0 * u["rows"] * u["cols"]
    if k == "lrn":
        return float(u["n"] * u["c"] * u["hw"] * (u["size"] + 4))
    if k == "recurrent":
        layer_macs, gate_values, _ = _recurrent_sizes(u)
        return 2.0 * layer_macs + 8.0 * gate_values
    return 0.0


def unit_bytes(unit: Unit, batch: int = 1) -> float:
    """Bytes a straightforward fp32 kernel reads and writes: activations in and out plus the weights."""
    u = unit.at_batch(batch)
    k = u.kind
    if k == "conv":
        out = u["n"] * u["cout"] * u["oh"] * u["ow"]
        weights = u["cout"] * (u["cin"] // max(u["group"], 1)) * u["kh"] * u["kw"]
        return _F32 * (u["n"] * u["cin"] * u["h"] * u["w"] + out * (1 + u["residual"]) + weights)
    if k == "dwconv":
        out = u["n"] * u["c"] * u["mult"] * u["oh"] * u["ow"]
        weights = u["c"] * u["mult"] * u["kh"] * u["kw"]
        return _F32 * (u["n"] * u["c"] * u["h"] * u["w"] + out * (1 + u["residual"]) + weights)
    if k == "dwpw":  # the tensor between the two is not counted: a fused kernel never writes it
        out = u["n"] * u["cout"] * u["oh"] * u["ow"]
        return _F32 * (u["n"] * u["c"] * u["h"] * u["w"] + out * (1 + u["residual"]) + unit_weight_bytes(u))
    if k == "gemm":
        return _F32 * (u["m"] * u["k"] + u["k"] * u["n"] + u["m"] * u["n"])
    if k == "bmm":
        return _F32 * u["b"] * (u["m"] * u["k"] + u["k"] * u["n"] + u["m"] * u["n"])
    if k == "pool":
        return _F32 * u["n"] * u["c"] * (u["h"] * u["w"] + u["oh"] * u["ow"])
    if k == "eltwise":
        return _F32 * u["elements"] * (u["inputs"] + 1)
    if k in ("layernorm", "softmax"):
        return _F32 * 2 * u["rows"] * u["cols"]
    if k == "skipnorm":
        return _F32 * 3 * u["rows"] * u["cols"]
    if k == "lrn":
        return _F32 * 2 * u["n"] * u["c"] * u["hw"]
    if k in ("move", "permute"):
        return _F32 * 2 * u["elements"]
    if k == "recurrent":  # the sequence in and out, the gates' pre-activations, and the weights read once
        _, gate_values, layer_weights = _recurrent_sizes(u)
        sequence = u["steps"] * u["batch"] * (u["inputs"] + u["directions"] * u["hidden"])
        return _F32 * (sequence + gate_values + layer_weights)
    return 0.0


def unit_weight_bytes(unit: Unit) -> float:
    """Bytes of weights a unit reads (fp32)."""
    if unit.kind == "conv":
        return _F32 * unit["cout"] * (unit["cin"] // max(unit["group"], 1)) * unit["kh"] * unit["kw"]
    if unit.kind == "dwconv":
        return _F32 * unit["c"] * unit["mult"] * unit["kh"] * unit["kw"]
    if unit.kind == "dwpw":
        return _F32 * unit["c"] * (unit["kh"] * unit["kw"] + unit["cout"])
    if unit.kind == "gemm":
        return _F32 * unit["k"] * unit["n"]
    if unit.kind == "recurrent":
        return _F32 * _recurrent_sizes(unit)[2]
    return 0.0


def roofline_seconds(unit: Unit, batch: int, peak_flops: float, bandwidth: float) -> float:
    """The unit's roofline time: the slower of its FLOPs at the GEMM peak and its bytes at the copy bandwidth."""
    return max(unit_flops(unit, batch) / peak_flops, unit_bytes(unit, batch) / bandwidth, 1e-9)


def _lg(x: float) -> float:
    return math.log2(max(float(x), 1.0))


def _lane_waste(channels: int, lanes: int = 16) -> float:
    """How much a channel count is padded up to whole SIMD vectors (1.0 = none)."""
    return math.ceil(channels / lanes) * lanes / max(channels, 1)


def unit_features(unit: Unit, batch: int = 1) -> list[float]:
    """What a kind's regressor sees: log2 of the unit's sizes, FLOPs, bytes and intensity, and shape details
    (SIMD lane waste on channels, kernel and stride) that decide how well a kernel library fills the machine.

    Every unit of one kind gives a vector of the same length.
    """
    u = unit.at_batch(batch)
    flops, nbytes = unit_flops(unit, batch), unit_bytes(unit, batch)
    common = [_lg(flops), _lg(nbytes), math.log2(max(flops, 1.0) / max(nbytes, 1.0)), _lg(unit_weight_bytes(u))]
    k = u.kind
    if k == "conv":
        per_group_in = u["cin"] // max(u["group"], 1)
        per_group_out = u["cout"] // max(u["group"], 1)
        shape = [
            _lg(u["n"]),
            _lg(per_group_in),
            _lg(per_group_out),
            _lg(u["group"]),
            _lg(u["oh"] * u["ow"]),
            _lg(u["n"] * u["oh"] * u["ow"]),
            _lg(u["n"] * u["cin"] * u["h"] * u["w"]),
            u["kh"] * u["kw"],
            min(u["kh"], u["kw"]),
            u["stride"],
            _lane_waste(per_group_out),
            _lane_waste(per_group_in),
            u["act"],
            u["residual"],
            u.dims.get("init_w", 1),
        ]
    elif k == "dwconv":
        shape = [
            _lg(u["n"]),
            _lg(u["c"] * u["mult"]),
            _lg(u["oh"] * u["ow"]),
            _lg(u["ow"]),
            u["kh"] * u["kw"],
            u["stride"],
            _lane_waste(u["c"]),
            u["act"],
            u["residual"],
        ]
    elif k == "dwpw":
        shape = [
            _lg(u["n"]),
            _lg(u["c"]),
            _lg(u["cout"]),
            _lg(u["oh"] * u["ow"]),
            _lg(u["n"] * u["oh"] * u["ow"]),
            u["kh"] * u["kw"],
            u["stride"],
            _lane_waste(u["c"]),
            _lane_waste(u["cout"]),
            u["dw_act"],
            u["act"],
            u["residual"],
        ]
    elif k == "gemm":
        shape = [_lg(u["m"]), _lg(u["k"]), _lg(u["n"]), _lane_waste(u["n"]), u["act"], u.dims.get("init_w", 1)]
    elif k == "bmm":
        shape = [_lg(u["b"]), _lg(u["m"]), _lg(u["k"]), _lg(u["n"])]
    elif k == "pool":
        shape = [_lg(u["n"] * u["c"]), _lg(u["oh"] * u["ow"]), u["kh"] * u["kw"], u["stride"], u["avg"]]
    elif k == "eltwise":
        shape = [_lg(u["elements"]), u["inputs"], u["heavy"]]
    elif k in ("layernorm", "softmax", "skipnorm"):
        shape = [_lg(u["rows"]), _lg(u["cols"])]
    elif k == "lrn":
        shape = [_lg(u["n"] * u["c"] * u["hw"]), u["size"]]
    elif k == "move":
        shape = [_lg(u["elements"])]
    elif k == "permute":
        shape = [_lg(u["elements"]), _lg(u["block"])]
    elif k == "recurrent":  # the steps run one after another: their count and each step's product's size
        step_macs = u["batch"] * u["gates"] * u["hidden"] * u["hidden"]
        shape = [_lg(u["batch"]), _lg(u["steps"] * u["directions"]), _lg(u["inputs"]), _lg(u["hidden"]),
                 _lg(step_macs), u["gates"], u["directions"]]
    else:
        shape = [float(u["nodes"])]
    return common + [float(v) for v in shape]
