"""``appopt validate``: everything ``plan`` checks before ranking, without ranking."""

from __future__ import annotations

from pathlib import Path

from builders import RenderError
from optimiser.catalog import load_catalog
from optimiser.errors import AppoptError
from optimiser.planner import check_spec_ids
from optimiser.spec import check_spec_files, load_spec
from optimiser.target import resolve_target
from optimiser.workload import workload_for


def validate_spec(path: Path) -> str:
    """Validate fields, catalog ids, target hardware and the model; return a one-line summary."""
    spec = load_spec(path)
    catalog = load_catalog()
    check_spec_ids(spec, catalog)
    check_spec_files(spec)
    target = resolve_target(spec.target, catalog)
    workload = workload_for(spec, catalog)
    return (
        f"{spec.name}: {spec.application.type} of {workload.model_name} "
        f"({_si(workload.flops_per_sample)}FLOP/sample, {_si(workload.params)} params), "
        f"batch {spec.application.batch_size}, on {spec.target.nodes} × {target.hardware.id}"
    )


def check_rendered_job(path: Path) -> str:
    """``appopt validate --strict``: plan the spec and render its job, then let its scheduler check the text more
    deeply where it can (a Kubernetes Job against the API schema of every version we claim, which needs the ``test``
    extra's kubernetes-validate). Returns a one-line summary."""
    from builders.jobs import job_scheduler
    from optimiser.artifacts import deployment_from_plan
    from optimiser.planner import make_plan

    dep = deployment_from_plan(make_plan(load_spec(path)))
    try:
        scheduler = job_scheduler(dep)
        text = scheduler.render(dep)
        summary = scheduler.check_rendered(text) if scheduler.check_rendered else "rendered"
    except RenderError as exc:
        raise AppoptError(*exc.lines, exit_code=2) from None
    return f"{scheduler.job_file}: {summary}"


def _si(value: float) -> str:
    """3 significant digits with an SI prefix: 8.18 G, 36.4 k."""
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}"
    return f"{value:.3g} "
