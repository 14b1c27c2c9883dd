"""Classic-ML kernels: TfIdfVectorizer (default domain) and the ``ai.onnx.ml`` ops LabelEncoder,
ArrayFeatureExtractor, Binarizer and TreeEnsemble."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register

ML_DOMAIN = "ai.onnx.ml"


@register
class TfIdfVectorizer(Kernel):
    """Count the pool's n-grams (optionally with skips) in each row of ``[C]`` or ``[B, C]`` tokens.

    ``ngram_counts[i]`` is where the (i+1)-grams start in the pool; the k-th pooled n-gram scores output column
    ``ngram_indexes[k]``. Only n-grams of length ``min_gram_length..max_gram_length`` count; unigrams are
    counted once, not once per skip distance. ``mode`` TF/IDF/TFIDF weights the counts.
    """

    op_type = "TfIdfVectorizer"
    since_version = 9

    def setup(self) -> None:
        a = self.attrs
        pool: list[Any] = list(a.get("pool_strings") or a.get("pool_int64s") or [])
        starts = [*a["ngram_counts"], len(pool)]
        self.min_n, self.max_n = int(a["min_gram_length"]), int(a["max_gram_length"])
        self.max_skip = int(a["max_skip_count"])
        self.indexes = list(a["ngram_indexes"])
        self.width = max(self.indexes) + 1 if self.indexes else 0
        self.weights = list(a.get("weights") or [])
        self.mode = a["mode"]
        if self.mode not in ("TF", "IDF", "TFIDF"):
            raise ValueError(f"unknown TfIdfVectorizer mode {self.mode!r}")
        self.grams: dict[tuple[Any, ...], int] = {}  # n-gram -> output column
        gram_id = 0
        for i in range(len(starts) - 1):
            n = i + 1
            items = pool[starts[i] : starts[i + 1]]
            for k in range(len(items) // n):
                if self.min_n <= n <= self.max_n:
                    self.grams[tuple(items[k * n : (k + 1) * n])] = self.indexes[gram_id]
                gram_id += 1

    def _row_counts(self, row: list[Any]) -> np.ndarray:
        counts = np.zeros(self.width, dtype=np.int64)
        length = len(row)
        for skip in range(self.max_skip + 1):
            stride = skip + 1
            for n in range(max(self.min_n, 1 if skip == 0 else 2), self.max_n + 1):
                for start in range(length - (n - 1) * stride):
                    column = self.grams.get(tuple(row[start : start + (n - 1) * stride + 1 : stride]))
                    if column is not None:
                        counts[column] += 1
        return counts

    def compute(self, x: np.ndarray) -> np.ndarray:
        rows = x.reshape(1, -1) if x.ndim <= 1 else x
        as_key = str if rows.dtype == object else int
        counts = (
            np.stack([self._row_counts([as_key(v) for v in r]) for r in rows])
            if rows.shape[0]
            else (np.zeros((0, self.width), dtype=np.int64))
        )
        if self.mode == "TF":
            out = counts.astype(np.float32)
        else:
            weights = np.asarray(self.weights, dtype=np.float32) if self.weights else np.ones(self.width, np.float32)
            base = (counts > 0) if self.mode == "IDF" else counts
            out = (base * weights).astype(np.float32)
        return out.reshape(-1) if x.ndim <= 1 else out


def _lookup_key(value: Any) -> Any:
    """Dictionary key that also matches NaN to NaN (float keys)."""
    if isinstance(value, float) and math.isnan(value):
        return "__nan__"
    return value


@register
class LabelEncoder(Kernel):
    """Map each input value through ``keys -> values`` (list or tensor attributes); misses get the default."""

    op_type = "LabelEncoder"
    domain = ML_DOMAIN
    since_version = 1

    def setup(self) -> None:
        a = self.attrs
        if "classes_strings" in a:  # opset 1: string <-> int64 via the class list index
            self._setup_v1(list(a["classes_strings"]))
            return
        keys = self._first(("keys_tensor", "keys_strings", "keys_int64s", "keys_floats"))
        values = self._first(("values_tensor", "values_strings", "values_int64s", "values_floats"))
        if keys is None or values is None or len(keys) != len(values):
            raise ValueError("LabelEncoder needs keys and values of the same length")
        key_list = list(np.asarray(keys).tolist()) if isinstance(keys, np.ndarray) else list(keys)
        if isinstance(values, np.ndarray):
            self.out_dtype: np.dtype[Any] = values.dtype
        elif "values_strings" in a:
            self.out_dtype = np.dtype(object)
        elif "values_int64s" in a:
            self.out_dtype = np.dtype(np.int64)
        else:
            self.out_dtype = np.dtype(np.float32)
        value_list = list(np.asarray(values).tolist()) if isinstance(values, np.ndarray) else list(values)
        self.table = {_lookup_key(k): v for k, v in zip(key_list, value_list, strict=True)}
        self.default = self._default()

    def _first(self, names: tuple[str, ...]) -> Any:
        for name in names:
            if self.attrs.get(name) is not None:
                return self.attrs[name]
        return None

    def _default(self) -> Any:
        a = self.attrs
        if "default_tensor" in a:
            return np.asarray(a["default_tensor"]).reshape(-1)[0].item()
        if self.out_dtype.kind == "O":
            return a.get("default_string", "_Unused")
        if np.issubdtype(self.out_dtype, np.integer):
            return int(a.get("default_int64", -1))
        return float(a.get("default_float", -0.0))

    def _setup_v1(self, classes: list[str]) -> None:
        self.v1_classes = classes
        self.v1_default_int = int(self.attrs.get("default_int64", -1))
        self.v1_default_str = self.attrs.get("default_string", "_Unused")

    def compute(self, x: np.ndarray) -> np.ndarray:
        if hasattr(self, "v1_classes"):
            if x.dtype == object:
                index = {s: i for i, s in enumerate(self.v1_classes)}
                return np.array([index.get(s, self.v1_default_int) for s in x.flat], dtype=np.int64).reshape(x.shape)
            names = [
                self.v1_classes[i] if 0 <= i < len(self.v1_classes) else self.v1_default_str
                for i in x.astype(np.int64).flat
            ]
            out = np.empty(len(names), dtype=object)
            out[:] = names
            return out.reshape(x.shape)
        mapped = (
            [self.table.get(_lookup_key(v), self.default) for v in x.tolist()]
            if x.ndim == 1
            else [self.table.get(_lookup_key(v), self.default) for v in x.reshape(-1).tolist()]
        )
        if self.out_dtype.kind == "O":
            out = np.empty(len(mapped), dtype=object)
            out[:] = mapped
            return out.reshape(x.shape)
        return np.array(mapped, dtype=self.out_dtype).reshape(x.shape)


@register
class ArrayFeatureExtractor(Kernel):
    """Select columns ``indices`` of the last axis (a 1-D input gives one row)."""

    op_type = "ArrayFeatureExtractor"
    domain = ML_DOMAIN
    since_version = 1

    def compute(self, x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices).astype(np.int64).reshape(-1)
        if x.ndim == 1:
            return x[idx].reshape(1, -1)
        return np.take(x, idx, axis=-1)


@register
class Binarizer(Kernel):
    """1 where ``x > threshold``, else 0, in the input dtype."""

    op_type = "Binarizer"
    domain = ML_DOMAIN
    since_version = 1
    attr_defaults: ClassVar[dict[str, Any]] = {"threshold": 0.0}

    def compute(self, x: np.ndarray) -> np.ndarray:
        return (x > self.attrs["threshold"]).astype(x.dtype)


_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)


@register
class TreeEnsemble(Kernel):
    """Sum/average/min/max of leaf weights reached by each row in each tree, per target (ml opset 5).

    All rows walk a tree together: each step evaluates the current node's comparison for every row still on
    an interior node. ``post_transform`` (softmax, logistic, softmax_zero, probit) is applied to the result.
    """

    op_type = "TreeEnsemble"
    domain = ML_DOMAIN
    since_version = 5
    attr_defaults: ClassVar[dict[str, Any]] = {"aggregate_function": 1, "post_transform": 0}

    def setup(self) -> None:
        a = self.attrs
        self.splits = np.asarray(a["nodes_splits"], dtype=np.float64).reshape(-1)
        self.features = np.asarray(a["nodes_featureids"], dtype=np.int64)
        self.modes = np.asarray(a["nodes_modes"]).astype(np.int64).reshape(-1)
        self.true_ids = np.asarray(a["nodes_truenodeids"], dtype=np.int64)
        self.false_ids = np.asarray(a["nodes_falsenodeids"], dtype=np.int64)
        self.true_leaf = np.asarray(a["nodes_trueleafs"], dtype=bool)
        self.false_leaf = np.asarray(a["nodes_falseleafs"], dtype=bool)
        self.leaf_targets = np.asarray(a["leaf_targetids"], dtype=np.int64)
        self.leaf_weights = np.asarray(a["leaf_weights"], dtype=np.float64).reshape(-1)
        self.roots = [int(r) for r in a["tree_roots"]]
        self.n_targets = int(a["n_targets"])
        tracks = a.get("nodes_missing_value_tracks_true")
        self.missing_true = np.zeros(len(self.modes), bool) if tracks is None else np.asarray(tracks, dtype=bool)
        self.members: dict[int, np.ndarray] = {}
        if (self.modes == _MEMBER).any():
            values = np.asarray(a.get("membership_values"), dtype=np.float64).reshape(-1)
            groups: list[list[float]] = [[]]
            for v in values:
                if math.isnan(v):
                    groups.append([])
                else:
                    groups[-1].append(float(v))
            member_nodes = np.flatnonzero(self.modes == _MEMBER)
            if len(groups) - 1 < len(member_nodes):
                raise ValueError("membership_values has fewer sets than MEMBER nodes")
            self.members = {int(n): np.asarray(groups[i]) for i, n in enumerate(member_nodes)}

    def _goes_true(self, node: int, x: np.ndarray) -> np.ndarray:
        mode, split = self.modes[node], self.splits[node]
        if mode == _LEQ:
            hit = x <= split
        elif mode == _LT:
            hit = x < split
        elif mode == _GTE:
            hit = x >= split
        elif mode == _GT:
            hit = x > split
        elif mode == _EQ:
            hit = x == split
        elif mode == _NEQ:
            hit = x != split
        elif mode == _MEMBER:
            hit = np.isin(x, self.members[node])
        else:
            raise ValueError(f"unknown node mode {mode}")
        return hit | (self.missing_true[node] & np.isnan(x))

    def _leaves(self, root: int, x: np.ndarray) -> np.ndarray:
        """Leaf index reached by each row from ``root``."""
        n_rows = x.shape[0]
        if self.true_leaf[root] and self.false_leaf[root] and self.true_ids[root] == self.false_ids[root]:
            return np.full(n_rows, self.true_ids[root])
        node = np.full(n_rows, root)
        at_leaf = np.zeros(n_rows, dtype=bool)
        while not at_leaf.all():
            for current in np.unique(node[~at_leaf]):
                rows = np.flatnonzero(~at_leaf & (node == current))
                go_true = self._goes_true(int(current), x[rows, self.features[current]])
                node[rows] = np.where(go_true, self.true_ids[current], self.false_ids[current])
                at_leaf[rows] = np.where(go_true, self.true_leaf[current], self.false_leaf[current])
        return node

    def compute(self, x: np.ndarray) -> np.ndarray:
        data = x.astype(np.float64).reshape(x.shape[0], -1)
        agg = int(self.attrs["aggregate_function"])
        init = {0: 0.0, 1: 0.0, 2: np.inf, 3: -np.inf}[agg]
        out = np.full((data.shape[0], self.n_targets), init)
        rows = np.arange(data.shape[0])
        for root in self.roots:
            leaf = self._leaves(root, data)
            target, weight = self.leaf_targets[leaf], self.leaf_weights[leaf]
            if agg in (0, 1):
                np.add.at(out, (rows, target), weight)
            elif agg == 2:
                np.minimum.at(out, (rows, target), weight)
            else:
                np.maximum.at(out, (rows, target), weight)
        if agg == 0:
            out /= len(self.roots)
        elif agg in (2, 3):  # a target no tree reached stays at 0 rather than +-inf
            out[np.isinf(out)] = 0.0
        return _post_transform(out, int(self.attrs["post_transform"])).astype(x.dtype)


def _post_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    """The ai.onnx.ml post transforms: 0 none, 1 softmax, 2 logistic, 3 softmax_zero, 4 probit."""
    if kind == 0:
        return scores
    if kind == 1:
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind == 2:
        return 1.0 / (1.0 + np.exp(-scores))
    if kind == 3:  # softmax over the non-zero scores; zeros stay zero
        nonzero = scores != 0
        shifted = np.where(nonzero, scores - np.where(nonzero, scores, -np.inf).max(axis=1, keepdims=True), 0)
        e = np.where(nonzero, np.exp(shifted), 0.0)
        total = e.sum(axis=1, keepdims=True)
        return e / np.where(total == 0, 1.0, total)
    if kind == 4:
        from statistics import NormalDist  # probit: the standard normal quantile

        quantile = np.vectorize(lambda p: NormalDist().inv_cdf(p) if 0 < p < 1 else math.copysign(math.inf, p - 0.5))
        return np.asarray(quantile(scores), dtype=np.float64)
    raise ValueError(f"unknown post_transform {kind}")
