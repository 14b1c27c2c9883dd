"""Golden-text comparison; ``APPOPT_UPDATE_GOLDEN=1 pytest tests/builders`` rewrites the files (review the diff)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN_DIR = Path(__file__).parent / "golden"


def assert_golden(name: str, text: str) -> None:
    """``text`` must equal ``golden/<name>`` byte for byte."""
    path = GOLDEN_DIR / name
    if os.environ.get("APPOPT_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8", newline="\n")
        return
    assert path.exists(), f"no golden file {path}; create it with APPOPT_UPDATE_GOLDEN=1 and review it"
    expected = path.read_text(encoding="utf-8")
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True), "golden", "rendered"))
        raise AssertionError(f"{name} differs from its golden file (APPOPT_UPDATE_GOLDEN=1 to accept):\n{diff}")
