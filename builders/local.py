"""No scheduler (``target.scheduler: none``): a plain ``run.sh`` that runs the application on this machine.

It picks the first container runtime installed here (or none, with the host's Python); ``mpirun`` starts several
tasks when the deployment asks for them. There is nothing to submit: the user runs the script.
"""

from __future__ import annotations

from builders.batch import SchedulerModule
from builders.deployment import Deployment
from builders.job_script import launch_prefix, mpirun, render_local_script

JOB_FILE = "run.sh"
TEMPLATE = "run.sh.j2"
LAUNCHERS = {"mpirun": mpirun}


def render(dep: Deployment) -> str:
    """``run.sh`` (``templates/run.sh.j2``)."""
    return render_local_script(dep, TEMPLATE, launch_prefix(dep, LAUNCHERS, None))


#: No scheduler: listed last.
LOCAL = SchedulerModule(
    name="none", job_file=JOB_FILE, render=render, launchers=LAUNCHERS, template=TEMPLATE,
    run_hint="the plan has no scheduler (target.scheduler: none); run {path} directly", order=50,
)
SCHEDULERS = (LOCAL,)
