"""The plan as data (``plan.json``), as a human report (``plan.md``) and as a short terminal table."""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from importlib import metadata
from typing import Any

from optimiser.intervals import overlapping_intervals
from optimiser.stages import Candidate, Plan
from optimiser.ties import explain_ties
from perfmodels import Prediction


def appopt_version() -> str:
    try:
        return metadata.version("appopt")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def spec_digest(plan: Plan) -> str:
    """sha256 of the validated spec in canonical JSON: the same spec always gives the same digest."""
    canonical = json.dumps(plan.spec.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _predicted(p: Prediction) -> dict[str, Any]:
    return {
        "step_seconds": p.step_seconds,
        "samples_per_second": p.samples_per_second,
        "total_seconds": p.total_seconds,
        "bound": p.bound,
        "basis": p.basis,
        "interval_s": [p.detail["p10_step_s"], p.detail["p90_step_s"]] if "p10_step_s" in p.detail else None,
        "detail": p.detail,
    }


def _route(c: Candidate) -> dict[str, Any]:
    r = c.route
    return {
        "framework": r.framework,
        "compiler": r.compiler,
        "tuning_trials": r.tuning_trials,
        "libraries": list(r.libraries),
        "precision": r.precision,
        "layout": r.layout,
        "base_image": c.base_image,
    }


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    """The machine-readable plan (the contract of ``plan.json``)."""
    t = plan.target
    w = plan.workload
    return {
        "appopt_version": appopt_version(),
        "name": plan.spec.name,
        "spec_sha256": spec_digest(plan),
        "goal": plan.spec.optimisation.goal,
        "mode": plan.spec.application.type,
        "target": {
            "hardware": t.hardware.id,
            "device_key": t.device_key,
            "arch": t.arch,
            "devices_per_node": t.device.per_node,
            "nodes": t.device.nodes,
            "scheduler": plan.spec.target.scheduler,
        },
        "workload": {
            "model": w.model_name,
            "flops_per_sample": w.flops_per_sample,
            "params": w.params,
            "activation_bytes_per_sample": w.activation_bytes_per_sample,
            "batch_size": w.batch_size,
            "total_samples": w.total_samples,
        },
        "model": plan.model_name,
        "choice": _route(plan.choice),
        "predicted": _predicted(plan.choice.prediction),
        "candidates": [
            {"rank": i + 1, **_route(c), "predicted": _predicted(c.prediction), "notes": list(c.notes)}
            for i, c in enumerate(plan.candidates)
        ],
        "excluded": [{**e.what, "reason": e.reason} for e in plan.excluded],
        "removed_by_allow_deny": [{**e.what, "reason": e.reason} for e in plan.removed_by_selection],
        "layout_applies": plan.layout_applies,
        "ties": explain_ties(plan),
        "interval_overlaps": overlapping_intervals(plan),
        "notes": list(plan.notes),
    }


def render_markdown(plan: Plan) -> str:
    """``plan.md``: the choice, the top candidates with predicted times, and every exclusion grouped by reason."""
    from jinja2 import Environment, PackageLoader, StrictUndefined  # (only plan.md needs it: not at start-up)

    env = Environment(
        loader=PackageLoader("templates", ""), undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True
    )
    env.filters["seconds"] = format_seconds
    grouped: dict[str, list[str]] = defaultdict(list)
    for e in plan.excluded:
        grouped[e.reason].append(", ".join(f"{k}={v}" for k, v in e.what.items()))
    top = plan.candidates[: plan.spec.optimisation.top]
    return env.get_template("plan.md.j2").render(
        plan=plan, data=plan_to_dict(plan), top=top, excluded=sorted(grouped.items()),
        best=plan.choice.prediction, removed=describe_removed(plan),
        layout=lambda c: c.route.layout if plan.layout_applies else "-",
    )


def describe_removed(plan: Plan) -> list[str]:
    """One line per allow/deny entry that removed something: ``not in optimisation.allow.compilers: tvm, openvino``."""
    by_reason: dict[str, list[str]] = defaultdict(list)
    for e in plan.removed_by_selection:
        item = next(reversed(e.what.values()))  # the component the list names (after its framework)
        if item not in by_reason[e.reason]:
            by_reason[e.reason].append(item)
    return [f"{reason}: {', '.join(items)}" for reason, items in sorted(by_reason.items())]


def render_table(plan: Plan) -> str:
    """A short fixed-width ranking for the terminal."""
    rows = [("#", "framework", "compiler", "libraries", "prec", "layout", "step", "samples/s", "total")]
    for i, c in enumerate(plan.candidates[: plan.spec.optimisation.top]):
        r, p = c.route, c.prediction
        rows.append((
            str(i + 1), r.framework, r.compiler_label, "+".join(r.libraries) or "-", r.precision,
            r.layout if plan.layout_applies else "-",
            format_seconds(p.step_seconds), f"{p.samples_per_second:,.1f}",
            format_seconds(p.total_seconds) if p.total_seconds is not None else "-",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.append(
        f"{len(plan.candidates)} candidates ranked by {plan.spec.optimisation.goal} with {plan.model_name}; "
        f"{len(plan.excluded)} excluded (see plan.md)"
    )
    if not plan.layout_applies:
        lines.append("layout: - (the model has no convolutions, so the memory layout changes nothing)")
    lines += [f"tie: {line}" for line in explain_ties(plan)]
    lines += [f"interval: {line}" for line in overlapping_intervals(plan)]
    lines += [f"removed by {line}" for line in describe_removed(plan)]
    return "\n".join(lines)


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
