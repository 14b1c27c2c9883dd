"""``appopt validate``: everything ``plan`` checks before ranking, without ranking."""

from __future__ import annotations

from pathlib import Path

from optimiser.catalog import load_catalog
from optimiser.planner import check_spec_ids
from optimiser.spec import load_spec
from optimiser.target import resolve_target
from optimiser.workload import workload_for


def validate_spec(path: Path) -> str:
    """Validate fields, catalog ids, target hardware and the model; return a one-line summary."""
    spec = load_spec(path)
    catalog = load_catalog()
    check_spec_ids(spec, catalog)
    target = resolve_target(spec.target, catalog)
    workload = workload_for(spec, catalog)
    return (
        f"{spec.name}: {spec.application.type} of {workload.model_name} "
        f"({workload.flops_per_sample / 1e9:.2f} GFLOP/sample, {workload.params / 1e6:.1f} M params), "
        f"batch {spec.application.batch_size}, on {spec.target.nodes} × {target.hardware.id}"
    )
