"""String kernels: splitting, concatenation, regex and normalisation on object arrays of ``str``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from runtime.kernels import NodeContext, resolve
from runtime.kernels.base import Kernel


def kernel(op: str, **attrs: Any) -> Kernel:
    return resolve(op, "", 21)(NodeContext(name=f"test_{op}", op_type=op, opset=21), attrs)


def strings(*values: Any) -> np.ndarray:
    return np.array(values, dtype=object)


def test_string_split_pads_parts_and_counts_them() -> None:
    x = strings(["a,b", "c"], [",,d", ""])
    parts, counts = kernel("StringSplit", delimiter=",").run(x)
    assert parts.shape == (2, 2, 3) and parts.dtype == object
    assert parts.tolist() == [[["a", "b", ""], ["c", "", ""]], [["", "", "d"], ["", "", ""]]]
    assert counts.dtype == np.int64 and counts.tolist() == [[2, 1], [3, 1]]


def test_string_split_on_whitespace_runs_with_maxsplit() -> None:
    parts, counts = kernel("StringSplit", maxsplit=1).run(strings("  one  two three "))
    assert parts.tolist() == [["one", "two three "]] and counts.tolist() == [2]


def test_string_concat_broadcasts_and_keeps_unicode() -> None:
    (out,) = kernel("StringConcat").run(strings(["a", "b"]), strings("é"))
    assert out.dtype == object and out.tolist() == [["aé", "bé"]]


@pytest.mark.parametrize(("text", "expected"), [("abc123", True), ("abc123x", False), ("", False)])
def test_regex_full_match_requires_the_whole_string(text: str, expected: bool) -> None:
    (out,) = kernel("RegexFullMatch", pattern=r"[a-z]+\d+").run(strings(text))
    assert out.dtype == np.bool_ and bool(out) is expected


def test_string_normalizer_drops_stopwords_case_insensitively_then_changes_case() -> None:
    k = kernel("StringNormalizer", stopwords=["the"], case_change_action="UPPER")
    assert k.run(strings("The", "cat", "THE"))[0].tolist() == ["CAT"]
    sensitive = kernel("StringNormalizer", stopwords=["the"], is_case_sensitive=1, case_change_action="LOWER")
    assert sensitive.run(strings(["The", "the"]))[0].tolist() == [["the"]]


def test_string_normalizer_returns_one_empty_string_when_everything_is_dropped() -> None:
    (out,) = kernel("StringNormalizer", stopwords=["x"]).run(strings(["x", "X"]))
    assert out.shape == (1, 1) and out.tolist() == [[""]]


def test_string_normalizer_rejects_a_batch_of_rows() -> None:
    with pytest.raises(Exception, match=r"\[C\] or \[1, C\]"):
        kernel("StringNormalizer").run(strings(["a"], ["b"]))
