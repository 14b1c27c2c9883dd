"""A model's mix of op classes, and how much of it the rows a whole-model fit learned from ever exercised.

A whole-model fit has one rate per op class (``perfmodels.fit.FEATURES``). A class that no row of a route spends
its FLOPs in leaves that rate to the fit's pulls alone: it takes the efficiency the route shows on its related
costs (a GEMM priced at the route's convolution efficiency). Predicting a model made of such a class is then a
guess, however well the fit did on the rows it saw; the kernel-unit sum, swept on sampled shapes of every kind,
is not. Held out by family, BERT is the case: the only family with GEMM FLOPs, its whole-model fits erred -35% to
+48% where its unit sums erred 2-7% (docs/decisions.md, 2026-11-26, op mix).

``coverage`` is the share of a query's FLOPs in the classes the route's rows exercised; the planner scales the
whole-model fit's weight against the unit sum by it (``unitfit.combine``). Some kernels hide in a class: a recurrent
layer's FLOPs count as ``gemm``, but a route whose rows never ran one has learned nothing of how it loops over its
steps (``UNIT_CLASSES``, read off the rows' kernel units). Held out on another day's pair, onnxruntime's LSTMs and
GRUs were predicted 33-40% under their times with the whole-model fit pulling, 2-18% without
(docs/decisions.md, 2026-11-28).

Example::

    >>> seen = exercised(np.vstack(rows["x"]))                              # doctest: +SKIP
    >>> coverage(x, seen)                                                    # doctest: +SKIP
    0.02
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from analysis.units import Unit, decode_units, unit_flops
from perfmodels.fit import FEATURES

if TYPE_CHECKING:
    import pandas as pd

#: A route's key: (target, framework, compiler, layout, precision, threads), as ``GroupFit.key``.
RouteKey = tuple[str, str, str, str, str, int]
_GROUP = ["target", "framework", "compiler", "layout", "precision", "threads"]

_AT = {name: i for i, name in enumerate(FEATURES)}
#: The op classes whose FLOP shares make a model's mix (LRN counts as normalisation).
FLOP_CLASSES: dict[str, tuple[int, ...]] = {
    klass: tuple(_AT[f"{c}_flops"] for c in members)
    for klass, members in (
        ("conv", ("conv",)),
        ("conv_dw", ("conv_dw",)),
        ("gemm", ("gemm",)),
        ("gemv", ("gemv",)),
        ("norm", ("norm", "lrn")),
        ("other", ("other",)),
    )
}
#: A class counts as exercised by a route's rows when one of them spends at least this share of its FLOPs in it.
EXERCISED_SHARE = 0.01
#: Kernel-unit kinds exercised apart from the class of ``FLOP_CLASSES`` the whole-model features count their FLOPs in
#: (a recurrent layer's in ``gemm``): their shares follow the ``FLOP_CLASSES`` shares in ``exercised``.
UNIT_CLASSES = {"recurrent": "gemm"}


def flop_shares(x: np.ndarray) -> np.ndarray:
    """The share of a query's FLOPs in each of ``FLOP_CLASSES`` (``x``: a ``perfmodels.fit`` feature vector)."""
    flops = np.array([float(sum(x[i] for i in idx)) for idx in FLOP_CLASSES.values()])
    return flops / max(float(flops.sum()), 1.0)


def unit_shares(units: Sequence[Unit]) -> np.ndarray:
    """The share of ``units``' FLOPs (counts included) in each kind of ``UNIT_CLASSES``."""
    flops = np.array([unit_flops(u) * u.count for u in units], dtype=float)
    total = float(flops.sum())
    if total <= 0:
        return np.zeros(len(UNIT_CLASSES))
    return np.array([float(flops[[u.kind == kind for u in units]].sum()) / total for kind in UNIT_CLASSES])


def exercised(xs: np.ndarray, units: Iterable[str] = ()) -> tuple[float, ...]:
    """The largest share of each class over the rows ``xs`` (one feature vector a row), then of each
    ``UNIT_CLASSES`` kind over the rows' encoded kernel ``units``: what the rows exercised."""
    texts = {text for text in units if text}
    kinds = [unit_shares(decode_units(text)) for text in texts] or [np.zeros(len(UNIT_CLASSES))]
    by_kind = np.max(np.vstack(kinds), axis=0)
    if not len(xs):
        return tuple(0.0 for _ in FLOP_CLASSES) + tuple(float(v) for v in by_kind)
    return tuple(float(v) for v in np.max(np.vstack([flop_shares(x) for x in xs]), axis=0)) + tuple(
        float(v) for v in by_kind
    )


def coverage(x: np.ndarray, seen: tuple[float, ...] | None, units: Sequence[Unit] = ()) -> float:
    """The share of ``x``'s FLOPs in classes that rows with the largest shares ``seen`` (``exercised``) exercised
    (1 without ``seen``: nothing known against it), less the share of its kernel ``units``' FLOPs in
    ``UNIT_CLASSES`` kinds those rows never ran."""
    if seen is None:
        return 1.0
    classes = len(FLOP_CLASSES)
    unseen = np.asarray(seen[:classes], dtype=float) < EXERCISED_SHARE
    covered = float(1.0 - flop_shares(x)[unseen].sum())
    kinds = np.asarray(seen[classes:], dtype=float)
    if units and len(kinds) == len(UNIT_CLASSES):  # (a class left out above holds its kinds' FLOPs already)
        counted = np.array([not unseen[list(FLOP_CLASSES).index(c)] for c in UNIT_CLASSES.values()])
        covered -= float(unit_shares(units)[(kinds < EXERCISED_SHARE) & counted].sum())
    return max(covered, 0.0)


def exercised_by_route(rows: pd.DataFrame) -> dict[RouteKey, tuple[float, ...]]:
    """``exercised`` of each route's rows (``perfmodels.fit.training_rows``: a feature vector ``x`` a row)."""
    if rows.empty:
        return {}
    return {
        (*(str(k) for k in key[:5]), int(key[5])): exercised(  # type: ignore[misc]
            np.vstack(part["x"].to_list()), part.get("units", ())
        )
        for key, part in rows.groupby(_GROUP, sort=True)
    }
