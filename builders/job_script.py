"""What the schedulers' shell scripts share: a batch script (``job.slurm``, ``job.pbs``) or a plain ``run.sh``.

Every spec string reaches a script through :func:`builders.quoting.shell_quote`; directive lines (``#SBATCH``,
``#PBS``), which no shell quotes, only carry checked numbers, tokens and the DNS-label job name.

The scripts share one shape: ``IMAGE``/``CONTAINER`` defaults (overridable at submission with ``APPOPT_IMAGE`` and
``APPOPT_CONTAINER``; ``APPOPT_CONTAINER=none`` runs the application directly, for nodes without a container
runtime), the deployment's environment exported, ``APP=(argv)``, then one launch line that appends ``"$@"``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from builders.batch import Launcher, Scheduler, SchedulerModule
from builders.container_choice import runtime_values
from builders.deployment import Deployment
from builders.names import dns_label, image_name, sif_name, squashfs_name
from builders.quoting import shell_join, shell_quote
from builders.templating import render_template
from builders.validate import uses_gpus

#: Flags that hand the node's GPUs to a Singularity/Apptainer container, per vendor.
SINGULARITY_GPU_FLAGS = {"nvidia": ["--nv"], "amd": ["--rocm"]}
#: The same for ``docker run`` / ``podman run`` (podman uses CDI names for NVIDIA GPUs).
DOCKER_GPU_FLAGS = {"nvidia": ["--gpus", "all"], "amd": ["--device", "/dev/kfd", "--device", "/dev/dri"]}
PODMAN_GPU_FLAGS = {"nvidia": ["--device", "nvidia.com/gpu=all"], "amd": DOCKER_GPU_FLAGS["amd"]}


def mpirun(dep: Deployment, hostfile: str = "") -> str:
    """``mpirun -np TASKS`` (Slurm-aware MPIs find the nodes themselves; PBS passes its node file as ``hostfile``)."""
    return f"mpirun -np {dep.nodes * dep.tasks_per_node} {hostfile}"


def launch_prefix(dep: Deployment, launchers: Mapping[str, Launcher], default: str | None) -> str:
    """The launcher prefix (with a trailing space) that starts every task on every node, or "" for one task."""
    tasks = dep.nodes * dep.tasks_per_node
    launcher = dep.launcher or (default if tasks > 1 else None)
    return launchers[launcher](dep) if launcher is not None and launcher in launchers else ""


def render_batch_script(dep: Deployment, template: str, directives: list[str], workdir: str, launch: str) -> str:
    """A batch script from ``templates/<template>``: the scheduler's directive lines, then the shared HPC run."""
    values = _script_values(dep) | {
        "directives": directives,
        "image": shell_quote(_singularity_image(dep)),
        "oci_image": shell_quote(image_name(dep)),
        "sqfs_image": shell_quote(squashfs_name(dep)),
        "workdir": workdir,
        "host_app_dir": '"$WORKDIR"',
        "container_flags": _gpu_flags(dep, SINGULARITY_GPU_FLAGS),
        "podman_flags": _gpu_flags(dep, PODMAN_GPU_FLAGS),
        "launch": launch,
    }
    return render_template(template, **values | runtime_values(dep, batch_job=True))


def batch_scheduler(
    name: str, *, job_file: str, template: str, directives: Callable[[Deployment], list[str]], workdir: str,
    launchers: Mapping[str, Launcher], default_launcher: str, client: type[Scheduler], order: int = 100,
) -> SchedulerModule:
    """A batch scheduler whose job file is ``template`` with ``directives(dep)`` on top, run from ``workdir``."""

    def render(dep: Deployment) -> str:
        launch = launch_prefix(dep, launchers, default_launcher)
        return render_batch_script(dep, template, directives(dep), workdir, launch)

    return SchedulerModule(name=name, job_file=job_file, render=render, launchers=launchers,
                           default_launcher=default_launcher, template=template, client=client, order=order)


def render_local_script(dep: Deployment, template: str, launch: str) -> str:
    """``run.sh``: the application in the first container runtime installed here, from the script's directory."""
    values = _script_values(dep) | {
        "host_app_dir": '"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        "oci_image": shell_quote(image_name(dep)),
        "sif_image": shell_quote(_singularity_image(dep)),
        "docker_flags": _gpu_flags(dep, DOCKER_GPU_FLAGS),
        "podman_flags": _gpu_flags(dep, PODMAN_GPU_FLAGS),
        "container_flags": _gpu_flags(dep, SINGULARITY_GPU_FLAGS),
        "launch": launch,
    }
    return render_template(template, **values | runtime_values(dep, batch_job=False))


def _script_values(dep: Deployment) -> dict[str, Any]:
    """What every script shows: the job name, the exports, the application's argv."""
    return {
        "job_name": dns_label(dep.app_name),
        "exports": [f"{key}={shell_quote(value)}" for key, value in dep.env],
        "app": shell_join(dep.run_argv),
        # without a container (APPOPT_CONTAINER=none) words under the image's app directory point into the host's
        # copy of it, and the build-stage compile runs first
        "app_dir": dep.app_dir,
        "app_dir_prefix": dep.app_dir.rstrip("/") + "/",  # a SAFE_PATH (builders.validate): no quoting needed
        "compile": shell_join(dep.compile_argv) if dep.compile_argv else "",
    }


def _singularity_image(dep: Deployment) -> str:
    """The SIF built from Singularity.def, or (docker-only deployments) the image pulled from its registry."""
    return sif_name(dep) if "singularity" in dep.formats else f"docker://{image_name(dep)}"


def _gpu_flags(dep: Deployment, table: dict[str, list[str]]) -> str:
    """Flags (each quoted, plus a trailing space) for a GPU job; empty on CPU."""
    flags = table.get(dep.accelerator or "", []) if uses_gpus(dep) else []
    return "".join(f"{shell_quote(flag)} " for flag in flags)
