"""Classic-ML kernels: TfIdfVectorizer weighting modes, LabelEncoder forms, TreeEnsemble aggregation and post
transforms, worked out by hand on small inputs."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel

ML = "ai.onnx.ml"


def kernel(op: str, domain: str = "", opset: int = 21, **attrs: Any) -> Kernel:
    node = NodeContext(name=f"test_{op}", op_type=op, domain=domain, opset=opset)
    return resolve(op, domain, opset)(node, attrs)


TFIDF: dict[str, Any] = {
    "min_gram_length": 1,
    "max_gram_length": 2,
    "max_skip_count": 1,
    "ngram_counts": [0, 2],  # unigrams "a", "b"; bigrams ("a", "b"), ("b", "a")
    "ngram_indexes": [0, 1, 2, 3],
    "pool_strings": ["a", "b", "a", "b", "b", "a"],
}
TOKENS = np.array([["a", "b", "a", "c"]], dtype=object)
# unigrams: a x2, b x1; bigrams without skip: ab, ba; with one skip: a_a (not pooled), b_c -> ab x1, ba x1
COUNTS = [2, 1, 1, 1]


@pytest.mark.parametrize(
    ("mode", "weights", "expected"),
    [
        ("TF", None, COUNTS),
        ("IDF", [0.5, 2.0, 3.0, 4.0], [0.5, 2.0, 3.0, 4.0]),
        ("IDF", None, [1, 1, 1, 1]),
        ("TFIDF", [0.5, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]),
    ],
)
def test_tfidf_modes(mode: str, weights: list[float] | None, expected: list[float]) -> None:
    attrs = {**TFIDF, "mode": mode} | ({"weights": weights} if weights else {})
    (out,) = kernel("TfIdfVectorizer", **attrs).run(TOKENS)
    assert out.dtype == np.float32 and out.tolist() == [expected]


def test_tfidf_skips_count_bigrams_across_gaps_and_1d_input_gives_1d_output() -> None:
    attrs = {**TFIDF, "mode": "TF", "min_gram_length": 2, "max_skip_count": 2}
    (out,) = kernel("TfIdfVectorizer", **attrs).run(np.array(["a", "x", "x", "b"], dtype=object))
    assert out.tolist() == [0, 0, 1, 0]  # "a _ _ b" is the bigram ab at skip 2


def test_label_encoder_tensor_and_list_forms() -> None:
    k = kernel("LabelEncoder", ML, opset=4, keys_floats=[1.0, float("nan")], values_strings=["one", "nan"])
    (out,) = k.run(np.array([1.0, np.nan, 2.0], np.float32))
    assert out.dtype == object and out.tolist() == ["one", "nan", "_Unused"]
    k = kernel(
        "LabelEncoder",
        ML,
        opset=4,
        keys_tensor=np.array([5, 6], np.int64),
        values_tensor=np.array([0.5, 0.25], np.float64),
        default_tensor=np.array([-9.0]),
    )
    (out,) = k.run(np.array([[6, 7]], np.int64))
    assert out.dtype == np.float64 and out.tolist() == [[0.25, -9.0]]


def test_label_encoder_opset1_class_list_maps_both_ways() -> None:
    k = kernel("LabelEncoder", ML, opset=1, classes_strings=["x", "y"], default_int64=-5)
    assert k.run(np.array(["y", "z"], dtype=object))[0].tolist() == [1, -5]
    assert k.run(np.array([0, 3], np.int64))[0].tolist() == ["x", "_Unused"]


def test_array_feature_extractor_and_binarizer() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert kernel("ArrayFeatureExtractor", ML).run(x, np.array([2, 0]))[0].tolist() == [[2, 0], [5, 3]]
    assert kernel("ArrayFeatureExtractor", ML).run(np.arange(3), np.array([1]))[0].tolist() == [[1]]
    (b,) = kernel("Binarizer", ML, threshold=2.0).run(x)
    assert b.dtype == np.float32 and b.tolist() == [[0, 0, 0], [1, 1, 1]]


# tree 0: x0 <= 0.5 ? leaf0 (t0, 1.0) : (x1 in {2, 3} ? leaf1 (t1, 2.0) : leaf2 (t0, -1.0)); NaN x0 goes true.
# tree 1: a lone leaf3 (t1, 0.5).
TREES: dict[str, Any] = {
    "nodes_featureids": [0, 1, 0],
    "nodes_modes": np.array([0, 6, 0], np.uint8),
    "nodes_splits": np.array([0.5, np.nan, 0.0], np.float32),
    "nodes_truenodeids": [0, 1, 3],
    "nodes_falsenodeids": [1, 2, 3],
    "nodes_trueleafs": [1, 1, 1],
    "nodes_falseleafs": [0, 1, 1],
    "nodes_missing_value_tracks_true": [1, 0, 0],
    "membership_values": np.array([2.0, 3.0, np.nan], np.float32),
    "leaf_targetids": [0, 1, 0, 1],
    "leaf_weights": np.array([1.0, 2.0, -1.0, 0.5], np.float32),
    "tree_roots": [0, 2],
    "n_targets": 2,
}
ROWS = np.array([[0.0, 9.0], [1.0, 3.0], [1.0, 4.0], [np.nan, 2.0]], np.float32)
# tree 0 gives row 0 -> t0 +1, row 1 -> t1 +2, row 2 -> t0 -1, row 3 (NaN) -> t0 +1; tree 1 gives t1 +0.5 to all.
# A target no tree reaches stays 0 under MIN/MAX.
EXPECTED = {
    1: [[1, 0.5], [0, 2.5], [-1, 0.5], [1, 0.5]],  # SUM
    0: [[0.5, 0.25], [0, 1.25], [-0.5, 0.25], [0.5, 0.25]],  # AVERAGE over the 2 trees
    2: [[1, 0.5], [0, 0.5], [-1, 0.5], [1, 0.5]],  # MIN
    3: [[1, 0.5], [0, 2.0], [-1, 0.5], [1, 0.5]],  # MAX
}


@pytest.mark.parametrize("aggregate", sorted(EXPECTED))
def test_tree_ensemble_aggregates(aggregate: int) -> None:
    (out,) = kernel("TreeEnsemble", ML, opset=5, aggregate_function=aggregate, **TREES).run(ROWS)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, EXPECTED[aggregate])


def test_tree_ensemble_logistic_and_softmax_post_transforms() -> None:
    (raw,) = kernel("TreeEnsemble", ML, opset=5, **TREES).run(ROWS)
    (logistic,) = kernel("TreeEnsemble", ML, opset=5, post_transform=2, **TREES).run(ROWS)
    np.testing.assert_allclose(logistic, 1 / (1 + np.exp(-raw)), rtol=1e-6)
    (softmax,) = kernel("TreeEnsemble", ML, opset=5, post_transform=1, **TREES).run(ROWS)
    e = np.exp(raw - raw.max(axis=1, keepdims=True))
    np.testing.assert_allclose(softmax, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
