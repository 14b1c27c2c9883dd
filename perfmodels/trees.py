"""A fitted gradient-boosted tree ensemble as plain NumPy arrays: predictions without importing scikit-learn.

The kernel-unit models (``perfmodels.unitfit``) are scikit-learn ``GradientBoostingRegressor``s. Importing
scikit-learn (and the SciPy it pulls in) takes about a second, most of a plan's cold start, while predicting from
150 depth-3 trees is a few array lookups. ``compile_ensemble`` copies the trees' split features, thresholds,
children and leaf values into padded ``(trees, nodes)`` arrays; ``TreeEnsemble.predict`` walks every tree at once,
one level per step. It follows scikit-learn's rule exactly (features cast to float32, go left when
``x[feature] <= threshold``), and ``compile_ensemble`` checks the copy against the regressor on the fit's own
features before it is used.

Example::

    >>> ensemble = compile_ensemble(regressor, features)     # doctest: +SKIP
    >>> ensemble.predict(features)                           # doctest: +SKIP
    array([...])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: ``children_left`` of a leaf in scikit-learn's tree arrays.
_LEAF = -1


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """``offset + scale * Σ_tree leaf value`` of a boosted ensemble (``predict`` has the regressor's signature)."""

    offset: float
    scale: float
    #: (trees, nodes) arrays, padded with leaves; a leaf's ``feature`` is 0 and its children point at itself.
    feature: np.ndarray
    threshold: np.ndarray
    left: np.ndarray
    right: np.ndarray
    value: np.ndarray
    depth: int

    def predict(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=np.float32).astype(np.float64)  # scikit-learn's trees compare in float32
        if x.ndim != 2 or len(x) == 0:
            return np.zeros(len(x))
        trees = np.arange(self.feature.shape[0])[:, None]
        samples = np.arange(len(x))[None, :]
        node = np.zeros((self.feature.shape[0], len(x)), dtype=np.intp)
        for _ in range(self.depth):
            goes_left = x[samples, self.feature[trees, node]] <= self.threshold[trees, node]
            node = np.where(goes_left, self.left[trees, node], self.right[trees, node])
        return self.offset + self.scale * self.value[trees, node].sum(axis=0)


def compile_ensemble(regressor: Any, features: np.ndarray) -> TreeEnsemble | None:
    """``regressor`` (a fitted ``GradientBoostingRegressor`` with one output) as a ``TreeEnsemble``, or None when it
    has another shape or the copy does not reproduce its predictions on ``features`` (then keep the regressor)."""
    try:
        trees = [estimator.tree_ for estimator in np.asarray(regressor.estimators_).ravel()]
        scale = float(regressor.learning_rate)
    except (AttributeError, TypeError):
        return None
    if not trees or any(t.value.shape[1:] != (1, 1) for t in trees):
        return None
    width = max(t.node_count for t in trees)
    shape = (len(trees), width)
    feature = np.zeros(shape, dtype=np.intp)
    threshold = np.zeros(shape)
    left = np.tile(np.arange(width, dtype=np.intp), (len(trees), 1))  # padding and leaves stay where they are
    right = left.copy()
    value = np.zeros(shape)
    for i, t in enumerate(trees):
        n = t.node_count
        split = t.children_left[:n] != _LEAF
        feature[i, :n] = np.where(split, t.feature[:n], 0)
        threshold[i, :n] = np.where(split, t.threshold[:n], 0.0)
        left[i, :n] = np.where(split, t.children_left[:n], np.arange(n))
        right[i, :n] = np.where(split, t.children_right[:n], np.arange(n))
        value[i, :n] = t.value[:n, 0, 0]
    depth = max(int(t.max_depth) for t in trees)
    x = np.asarray(features, dtype=float)
    unshifted = TreeEnsemble(0.0, scale, feature, threshold, left, right, value, depth)
    expected = np.asarray(regressor.predict(x), dtype=float)
    # the initial estimate (the training targets' mean for squared error) is what the trees leave over
    offset = float(np.median(expected - unshifted.predict(x)))
    ensemble = TreeEnsemble(offset, scale, feature, threshold, left, right, value, depth)
    return ensemble if np.allclose(ensemble.predict(x), expected, rtol=1e-9, atol=1e-9) else None
