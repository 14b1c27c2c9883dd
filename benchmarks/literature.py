"""The seeds' reported compiler speedups as result rows (``source: literature``), each with its citation.

They sit in the same database as measurements so a reader sees published figures next to ours; the performance
models do not fit on them (they are per-compiler priors the catalog already applies).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from perfmodels.results_db import make_row


def literature_rows(compilers: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per reported speedup of each compiler (plain dicts shaped like ``compilers.yaml`` entries)."""
    rows = []
    for compiler in compilers:
        for speedup in compiler.get("speedups") or []:
            low, high = float(speedup["low"]), speedup.get("high")
            typical = low if high is None else (low * float(high)) ** 0.5
            source = speedup.get("source") or {}
            citation = source.get("citation", "")
            if source.get("url"):
                citation += f" <{source['url']}>"
            device = speedup.get("device") or "any"
            reported = f"{low:g}x" if high is None else f"{low:g}x to {float(high):g}x"
            rows.append(
                make_row(
                    source="literature",
                    citation=citation,
                    target=f"literature:{device}",
                    backend=str(compiler["id"]),
                    framework="",
                    compiler=str(compiler["id"]),
                    mode=speedup.get("mode") or "",
                    model=speedup.get("workload") or "unspecified workload",
                    scenario="speedup",
                    settings=json.dumps(
                        {"baseline": speedup.get("baseline", ""), "low": low, "high": high, "device": device},
                        sort_keys=True,
                    ),
                    metric="speedup",
                    value=typical,
                    unit=f"x over {speedup.get('baseline', 'baseline')}",
                    notes=f"reported {reported} over {speedup.get('baseline', 'baseline')}; value is the geometric "
                    "mean of the range",
                )
            )
    return rows
