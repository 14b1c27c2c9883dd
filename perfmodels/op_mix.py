"""A model's mix of op classes, and how much of it the rows a whole-model fit learned from ever exercised.

A whole-model fit has one rate per op class (``perfmodels.fit.FEATURES``). A class that no row of a route spends
its FLOPs in leaves that rate to the fit's pulls alone: it takes the efficiency the route shows on its related
costs (a GEMM priced at the route's convolution efficiency). Predicting a model made of such a class is then a
guess, however well the fit did on the rows it saw; the kernel-unit sum, swept on sampled shapes of every kind,
is not. Held out by family, BERT is the case: the only family with GEMM FLOPs, its whole-model fits erred -35% to
+48% where its unit sums erred 2-7% (docs/decisions.md, 2026-11-26, op mix).

``coverage`` is the share of a query's FLOPs in the classes the route's rows exercised; the planner scales the
whole-model fit's weight against the unit sum by it (``unitfit.combine``).

Example::

    >>> seen = exercised(np.vstack(rows["x"]))                              # doctest: +SKIP
    >>> coverage(x, seen)                                                    # doctest: +SKIP
    0.02
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

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


def flop_shares(x: np.ndarray) -> np.ndarray:
    """The share of a query's FLOPs in each of ``FLOP_CLASSES`` (``x``: a ``perfmodels.fit`` feature vector)."""
    flops = np.array([float(sum(x[i] for i in idx)) for idx in FLOP_CLASSES.values()])
    return flops / max(float(flops.sum()), 1.0)


def exercised(xs: np.ndarray) -> tuple[float, ...]:
    """The largest share of each class over the rows ``xs`` (one feature vector a row): what the rows exercised."""
    if not len(xs):
        return tuple(0.0 for _ in FLOP_CLASSES)
    return tuple(float(v) for v in np.max(np.vstack([flop_shares(x) for x in xs]), axis=0))


def coverage(x: np.ndarray, seen: tuple[float, ...] | None) -> float:
    """The share of ``x``'s FLOPs in classes that rows with the largest shares ``seen`` (``exercised``) exercised
    (1 without ``seen``: nothing known against it)."""
    if seen is None:
        return 1.0
    unseen = np.asarray(seen, dtype=float) < EXERCISED_SHARE
    return float(1.0 - flop_shares(x)[unseen].sum())


def exercised_by_route(rows: pd.DataFrame) -> dict[RouteKey, tuple[float, ...]]:
    """``exercised`` of each route's rows (``perfmodels.fit.training_rows``: a feature vector ``x`` a row)."""
    if rows.empty:
        return {}
    return {
        (*(str(k) for k in key[:5]), int(key[5])): exercised(np.vstack(part["x"].to_list()))  # type: ignore[misc]
        for key, part in rows.groupby(_GROUP, sort=True)
    }
