"""The job for the deployment's scheduler: a Slurm or PBS/Torque batch script, a Kubernetes Job, or a plain run.sh.

Each scheduler's module renders its own job (:mod:`builders.schedulers` lists them); this module checks the
deployment against the scheduler it names first, so every problem is one ``field: message`` line.
"""

from __future__ import annotations

from collections.abc import Iterator

from builders.batch import SchedulerModule
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.schedulers import not_a_scheduler, scheduler_module, scheduler_names
from builders.validate import deployment_problems

__all__ = ["job_scheduler", "render_job"]


def render_job(dep: Deployment) -> tuple[str, str]:
    """(file name, text) of the job for ``dep.scheduler``.

    >>> name, text = render_job(Deployment(app_name="demo", base_image="debian:12", run_argv=("echo", "hi")))
    >>> name, text.splitlines()[0]
    ('run.sh', '#!/bin/bash')
    """
    module = job_scheduler(dep)
    return module.job_file, module.render(dep)


def job_scheduler(dep: Deployment) -> SchedulerModule:
    """The scheduler module of ``dep``, once the deployment is checked for it (RenderError lists every problem)."""
    problems = [*deployment_problems(dep), *_job_problems(dep)]
    if problems:
        raise RenderError(*problems)
    return scheduler_module(dep.scheduler)


def _job_problems(dep: Deployment) -> Iterator[str]:
    if not dep.run_argv:
        yield "run_argv: empty, so the job has nothing to run"
    if dep.scheduler not in scheduler_names():
        yield f"scheduler: {not_a_scheduler(dep.scheduler)}"
        return
    module = scheduler_module(dep.scheduler)
    format_problem = module.format_problem(dep.formats)
    if format_problem:
        yield f"formats: {format_problem}"
    if dep.launcher is not None and dep.launcher not in module.launchers:
        offered = ", ".join(module.launchers) or "none"
        yield f"launcher: {dep.launcher!r} does not run under the {module.name} scheduler (it offers: {offered})"
