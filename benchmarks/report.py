"""Plain-text tables of benchmark outcomes (what ``appopt bench run`` prints at the end)."""

from __future__ import annotations

from collections.abc import Sequence

from benchmarks.runner import Outcome


def outcomes_table(outcomes: Sequence[Outcome]) -> str:
    """One line per measurement: model, backend, threads, batch, scenario, metric value, median latency, status."""
    header = ("model", "backend", "thr", "batch", "prec", "scenario", "result", "median ms", "status")
    lines: list[tuple[str, ...]] = [header]
    for o in outcomes:
        row = o.row or {}
        if o.row is not None:
            result = f"{row['metric']}={row['value']:.4g}"
            median = f"{row['median_ms']:.3f}" if row.get("median_ms") is not None else ""
            # what the row says about itself: accuracy, LoadGen's verdict, a busy machine (the fit skips INVALID/busy)
            marks = [str(row[k]) for k in ("accuracy", "verdict") if row.get(k)] + (["busy"] if o.warnings else [])
            status = f"ok ({', '.join(marks)})" if marks else "ok"
        else:
            result, median, status = "", "", f"{o.status}: {o.reason[:60]}"
        lines.append(
            (
                o.job.model.name,
                o.job.backend,
                str(o.job.threads),
                str(o.batch),
                o.job.precision,
                o.scenario,
                result,
                median,
                status,
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    skipped = sum(o.status == "skipped" for o in outcomes)
    failed = sum(o.status == "failed" for o in outcomes)
    text.append(f"{len(outcomes) - skipped - failed} measured, {skipped} skipped, {failed} failed")
    return "\n".join(text)
