"""The job for the deployment's scheduler: a Slurm or PBS/Torque batch script, a Kubernetes Job, or a plain run.sh.

Every spec string reaches a script through :func:`builders.quoting.shell_quote`; directive lines (``#SBATCH``,
``#PBS``), which no shell quotes, only carry checked numbers, tokens and the DNS-label job name. The Kubernetes Job
and its sizing live in :mod:`builders.kubernetes`.

The scripts share one shape: ``IMAGE``/``CONTAINER`` defaults (overridable at submission with ``APPOPT_IMAGE`` and
``APPOPT_CONTAINER``; ``APPOPT_CONTAINER=none`` runs the application directly, for nodes without a container
runtime), the deployment's environment exported, ``APP=(argv)``, then one launch line that appends ``"$@"``.
"""

from __future__ import annotations

from typing import Any

from builders import kubernetes, pbs, slurm
from builders.container_choice import runtime_values
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.kubernetes import K8S_GPU_RESOURCES, kubernetes_job, render_kubernetes
from builders.names import dns_label, image_name, sif_name, squashfs_name
from builders.quoting import shell_join, shell_quote
from builders.templating import render_template
from builders.validate import check_deployment, uses_gpus

#: The batch schedulers, one module each: directives, template, working directory, default launcher.
BATCH = {"slurm": slurm, "pbs": pbs, "torque": pbs}
#: The job file per scheduler (a plain ``run.sh`` without one), in ``Scheduler``'s order.
JOB_FILES = {name: module.JOB_FILE for name, module in BATCH.items()} | {"kubernetes": kubernetes.JOB_FILE,
                                                                        "none": "run.sh"}
#: Flags that hand the node's GPUs to a Singularity/Apptainer container, per vendor.
SINGULARITY_GPU_FLAGS = {"nvidia": ["--nv"], "amd": ["--rocm"]}
#: The same for ``docker run`` / ``podman run`` (podman uses CDI names for NVIDIA GPUs).
DOCKER_GPU_FLAGS = {"nvidia": ["--gpus", "all"], "amd": ["--device", "/dev/kfd", "--device", "/dev/dri"]}
PODMAN_GPU_FLAGS = {"nvidia": ["--device", "nvidia.com/gpu=all"], "amd": DOCKER_GPU_FLAGS["amd"]}
DEFAULT_LAUNCHER = {name: module.DEFAULT_LAUNCHER for name, module in BATCH.items()}
#: Re-exported: the Kubernetes renderer's public names (``builders.kubernetes`` owns them).
__all__ = ["JOB_FILES", "K8S_GPU_RESOURCES", "kubernetes_job", "render_job", "render_kubernetes"]


def render_job(dep: Deployment) -> tuple[str, str]:
    """(file name, text) of the job for ``dep.scheduler``.

    >>> name, text = render_job(Deployment(app_name="demo", base_image="debian:12", run_argv=("echo", "hi")))
    >>> name, text.splitlines()[0]
    ('run.sh', '#!/bin/bash')
    """
    check_deployment(dep)
    problems = []
    if not dep.run_argv:
        problems.append("run_argv: empty, so the job has nothing to run")
    if dep.scheduler == "kubernetes" and "docker" not in dep.formats:
        problems.append("formats: a Kubernetes Job runs an OCI image, so formats must include docker")
    if problems:
        raise RenderError(*problems)
    if dep.scheduler == "kubernetes":
        return kubernetes.JOB_FILE, render_kubernetes(dep)
    if dep.scheduler == "none":
        values = _script_values(dep) | _local_values(dep) | runtime_values(dep, batch_job=False)
        return JOB_FILES["none"], render_template("run.sh.j2", **values)
    values = _script_values(dep) | _hpc_values(dep) | runtime_values(dep, batch_job=True)
    return JOB_FILES[dep.scheduler], render_template(BATCH[dep.scheduler].TEMPLATE, **values)


# --- batch scripts ----------------------------------------------------------------------------------------------


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


def _hpc_values(dep: Deployment) -> dict[str, Any]:
    scheduler = BATCH[dep.scheduler]
    return {
        "directives": scheduler.directives(dep),
        "image": shell_quote(_singularity_image(dep)),
        "oci_image": shell_quote(image_name(dep)),
        "sqfs_image": shell_quote(squashfs_name(dep)),
        "workdir": scheduler.WORKDIR,
        "host_app_dir": '"$WORKDIR"',
        "container_flags": _gpu_flags(dep, SINGULARITY_GPU_FLAGS),
        "podman_flags": _gpu_flags(dep, PODMAN_GPU_FLAGS),
        "launch": _launch(dep),
    }


def _launch(dep: Deployment) -> str:
    """The launcher prefix (with a trailing space) that starts every task on every node, or "" for one task."""
    tasks = dep.nodes * dep.tasks_per_node
    launcher = dep.launcher or (DEFAULT_LAUNCHER.get(dep.scheduler) if tasks > 1 else None)
    if launcher == "srun":
        # srun does not inherit --cpus-per-task from the batch allocation (Slurm >= 22.05), so pass it again.
        return f"srun --nodes={dep.nodes} --ntasks-per-node={dep.tasks_per_node} --cpus-per-task={dep.cpus_per_task} "
    if launcher == "mpirun":
        # PBS lists each node once per mpiprocs in $PBS_NODEFILE; Slurm-aware MPIs find the nodes themselves.
        hostfile = pbs.MPIRUN_HOSTFILE if dep.scheduler in ("pbs", "torque") else ""
        return f"mpirun -np {tasks} {hostfile}"
    return ""


# --- run.sh -----------------------------------------------------------------------------------------------------


def _local_values(dep: Deployment) -> dict[str, Any]:
    return {
        "host_app_dir": '"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
        "oci_image": shell_quote(image_name(dep)),
        "sif_image": shell_quote(_singularity_image(dep)),
        "docker_flags": _gpu_flags(dep, DOCKER_GPU_FLAGS),
        "podman_flags": _gpu_flags(dep, PODMAN_GPU_FLAGS),
        "container_flags": _gpu_flags(dep, SINGULARITY_GPU_FLAGS),
        "launch": _launch(dep),
    }
