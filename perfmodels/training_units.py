"""A training step's forward pass priced by the kernel-unit models the inference sweeps learned on the same host.

The training rows' models are cut into kernel units (``analysis.unitgraph``) like any inference model; each unit's
time on the trainer's framework comes from that framework's unit model (``perfmodels.unitfit``) at the row's thread
count. So a held-out family borrows the rates other models' kernels of similar shape were measured at, instead of one
FLOP rate for the whole model. The forward pass's priced seconds are one feature of ``perfmodels.training_fit``'s
unit-priced model; the backward pass is learned as a multiple of it.

Only frameworks whose backward pass runs the kernels their inference units measured are priced this way
(``UNIT_PRICED_FRAMEWORKS``): PyTorch's autograd calls the same ATen/oneDNN convolution and matrix kernels as its
forward, while appopt-runtime's gradients run NumPy im2col and ``matmul`` kernels (``runtime/kernels/grad_conv.py``)
that no unit sweep timed. Why: docs/decisions.md (2026-11-26, training step time priced by kernel units).

Where a row's units come from: its ``units`` column when recorded, else ``TRAINING_UNITS``, the units of the
training suite's shipped models keyed by task name (written by ``python -m benchmarks.training_units``).
"""

from __future__ import annotations

import importlib.resources
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from analysis.units import Unit, decode_units

if TYPE_CHECKING:
    import pandas as pd

    from perfmodels.unitfit import UnitFit, UnitRoute

#: Frameworks whose training step is priced by their inference kernel units (see the module docstring).
UNIT_PRICED_FRAMEWORKS = ("pytorch",)
#: The training suite's models cut into kernel units, by task name (``python -m benchmarks.training_units``).
TRAINING_UNITS = Path(str(importlib.resources.files("benchmarks.results").joinpath("training_units.json")))
#: The unit sweeps' route of a framework's plain (uncompiled, NCHW, fp32) kernels, which its trainers call.
_SWEPT_ROUTE = ("none", "NCHW", "fp32")

UnitRouteKey = tuple[str, str, int]


def read_training_units(path: Path = TRAINING_UNITS) -> dict[str, tuple[Unit, ...]]:
    """Units per task from ``path`` (none when the file is missing); ValueError naming the task for a bad entry."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error})") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{path}: expected an object of task name -> units")
    out = {}
    for task, encoded in data.items():
        try:
            out[str(task)] = tuple(decode_units(encoded))
        except (TypeError, ValueError) as error:
            raise ValueError(f"{path}: {task}: {error}") from None
    return out


def row_units(rows: pd.DataFrame, shipped: Mapping[str, tuple[Unit, ...]]) -> list[tuple[Unit, ...]]:
    """Each row's forward units: its own ``units`` when recorded, else the shipped ones of its model (or none)."""
    recorded = rows["units"] if "units" in rows else [None] * len(rows)
    return [
        tuple(decode_units(text)) if isinstance(text, str) and text else shipped.get(str(model), ())
        for text, model in zip(recorded, rows["model"], strict=True)
    ]


def unit_route(units: UnitFit | None, target: str, framework: str, threads: int) -> UnitRoute | None:
    """The unit model a ``framework`` trainer's kernels are priced by on ``target`` at ``threads`` (None: not swept,
    or not a ``UNIT_PRICED_FRAMEWORKS`` framework)."""
    if units is None or framework not in UNIT_PRICED_FRAMEWORKS:
        return None
    return units.route((target, framework, *_SWEPT_ROUTE, int(threads)))


def forward_seconds(route: UnitRoute, units: Sequence[Unit], batch: int) -> float:
    """Seconds of one forward pass of ``batch`` samples through ``units`` on ``route``: the sum of its units' times,
    without the per-query call cost (the training fit's per-node term carries dispatch). NaN when ``units`` is empty
    or holds a kind the route has not learned."""
    if not units:
        return math.nan
    times = route.unit_seconds(units, batch)
    if np.isnan(times).any():
        return math.nan
    return float(np.array([u.count for u in units], dtype=float) @ times)
