"""String kernels over object arrays of Python ``str``.

RegexFullMatch uses Python's ``re`` engine, not RE2: the common syntax agrees, but RE2-only constructs (``\\C``,
``(?P=name)`` differences, possessive quantifiers) and Python-only ones (backreferences, lookarounds, which RE2
rejects) are where results could differ from other runtimes.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np

from runtime.kernels.base import Kernel, register


def _strings(x: np.ndarray) -> np.ndarray:
    """Object array of ``str`` (bytes are decoded as UTF-8)."""
    flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in np.asarray(x, dtype=object).flat]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(np.shape(x))


@register
class StringConcat(Kernel):
    """Elementwise ``x + y`` with NumPy broadcasting."""

    op_type = "StringConcat"
    since_version = 20

    def compute(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.asarray(np.add(_strings(x), _strings(y), dtype=object), dtype=object)  # 0-d stays an array


@register
class RegexFullMatch(Kernel):
    """Whether each string matches ``pattern`` in full (Python ``re``; see the module note on RE2)."""

    op_type = "RegexFullMatch"
    since_version = 20

    def setup(self) -> None:
        self.regex = re.compile(self.attrs["pattern"])

    def compute(self, x: np.ndarray) -> np.ndarray:
        strings = _strings(x)
        return np.array([self.regex.fullmatch(s) is not None for s in strings.flat], dtype=bool).reshape(strings.shape)


@register
class StringSplit(Kernel):
    """Split each string by ``delimiter`` (none or empty: runs of whitespace) at most ``maxsplit`` times.

    Outputs the parts, padded with ``""`` to the longest split along a new last axis, and the part counts.
    """

    op_type = "StringSplit"
    since_version = 20

    def compute(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        delimiter = self.attrs.get("delimiter") or None
        maxsplit = self.attrs.get("maxsplit")
        limit = -1 if maxsplit is None else int(maxsplit)
        strings = _strings(x)
        parts = [s.split(delimiter, limit) for s in strings.flat]
        width = max((len(p) for p in parts), default=0)
        out = np.full((len(parts), width), "", dtype=object)
        for i, p in enumerate(parts):
            out[i, : len(p)] = p
        counts = np.array([len(p) for p in parts], dtype=np.int64).reshape(strings.shape)
        return out.reshape((*strings.shape, width)), counts


@register
class StringNormalizer(Kernel):
    """Drop ``stopwords`` (case-insensitively unless ``is_case_sensitive``), then change case.

    Input is ``[C]`` or ``[1, C]``; if every string is dropped the output is a single ``""``.
    """

    op_type = "StringNormalizer"
    since_version = 10
    attr_defaults: ClassVar[dict[str, Any]] = {"case_change_action": "NONE", "is_case_sensitive": 0}

    def setup(self) -> None:
        stops = self.attrs.get("stopwords") or []
        self.case_sensitive = bool(self.attrs["is_case_sensitive"])
        self.stops = set(stops) if self.case_sensitive else {s.casefold() for s in stops}
        action = self.attrs["case_change_action"]
        if action not in ("NONE", "LOWER", "UPPER"):
            raise ValueError(f"unknown case_change_action {action!r}")
        self.action = action

    def _keep(self, s: str) -> bool:
        return (s if self.case_sensitive else s.casefold()) not in self.stops

    def _change_case(self, s: str) -> str:
        return s.lower() if self.action == "LOWER" else s.upper() if self.action == "UPPER" else s

    def compute(self, x: np.ndarray) -> np.ndarray:
        strings = _strings(x)
        if strings.ndim not in (1, 2) or (strings.ndim == 2 and strings.shape[0] != 1):
            raise ValueError(f"input must be [C] or [1, C], got shape {strings.shape}")
        kept = [self._change_case(s) for s in strings.reshape(-1) if self._keep(s)] or [""]
        out = np.empty(len(kept), dtype=object)
        out[:] = kept
        return out.reshape((1, -1)) if strings.ndim == 2 else out
