"""The job for the deployment's scheduler: a Slurm or PBS/Torque batch script, a Kubernetes Job, or a plain run.sh.

Every spec string reaches a script through :func:`builders.quoting.shell_quote`; directive lines (``#SBATCH``,
``#PBS``), which no shell quotes, only carry checked numbers, tokens and the DNS-label job name. The Kubernetes Job
is a dict written with ``yaml.safe_dump`` rather than a template: YAML quoting then comes from the emitter, and no
spec text is ever pasted into YAML by hand.

The scripts share one shape: ``IMAGE``/``CONTAINER`` defaults (overridable at submission with ``APPOPT_IMAGE`` and
``APPOPT_CONTAINER``; ``APPOPT_CONTAINER=none`` runs the application directly, for nodes without a container
runtime), the deployment's environment exported, ``APP=(argv)``, then one launch line that appends ``"$@"``.
"""

from __future__ import annotations

from typing import Any

import yaml

from builders.container_choice import runtime_values
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.names import dns_label, image_name, sif_name, squashfs_name
from builders.quoting import LINE_BREAKS, shell_join, shell_quote
from builders.recipe import image_labels
from builders.templating import render_template
from builders.validate import check_deployment, uses_gpus, walltime_seconds

JOB_FILES = {
    "slurm": "job.slurm",
    "pbs": "job.pbs",
    "torque": "job.pbs",
    "kubernetes": "job.k8s.yaml",
    "none": "run.sh",
}
#: Flags that hand the node's GPUs to a Singularity/Apptainer container, per vendor.
SINGULARITY_GPU_FLAGS = {"nvidia": ["--nv"], "amd": ["--rocm"]}
#: The same for ``docker run`` / ``podman run`` (podman uses CDI names for NVIDIA GPUs).
DOCKER_GPU_FLAGS = {"nvidia": ["--gpus", "all"], "amd": ["--device", "/dev/kfd", "--device", "/dev/dri"]}
PODMAN_GPU_FLAGS = {"nvidia": ["--device", "nvidia.com/gpu=all"], "amd": DOCKER_GPU_FLAGS["amd"]}
#: Kubernetes extended-resource names of the device plugins, per vendor.
K8S_GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel": "gpu.intel.com/i915"}
K8S_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le"}
DEFAULT_LAUNCHER = {"slurm": "srun", "pbs": "mpirun", "torque": "mpirun"}


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
        return JOB_FILES["kubernetes"], render_kubernetes(dep)
    if dep.scheduler == "none":
        values = _script_values(dep) | _local_values(dep) | runtime_values(dep, batch_job=False)
        return JOB_FILES["none"], render_template("run.sh.j2", **values)
    template = "job.slurm.j2" if dep.scheduler == "slurm" else "job.pbs.j2"
    values = _script_values(dep) | _hpc_values(dep) | runtime_values(dep, batch_job=True)
    return JOB_FILES[dep.scheduler], render_template(template, **values)


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
    cores = dep.tasks_per_node * dep.cpus_per_task
    gpus = dep.gpus_per_node if uses_gpus(dep) else 0
    if dep.scheduler == "slurm":
        directives = _slurm_directives(dep, gpus)
        workdir = "${SLURM_SUBMIT_DIR:-$PWD}"
    else:
        directives = _pbs_directives(dep, cores, gpus)
        workdir = "${PBS_O_WORKDIR:-$PWD}"
    return {
        "directives": directives,
        "image": shell_quote(_singularity_image(dep)),
        "oci_image": shell_quote(image_name(dep)),
        "sqfs_image": shell_quote(squashfs_name(dep)),
        "workdir": workdir,
        "host_app_dir": '"$WORKDIR"',
        "container_flags": _gpu_flags(dep, SINGULARITY_GPU_FLAGS),
        "podman_flags": _gpu_flags(dep, PODMAN_GPU_FLAGS),
        "launch": _launch(dep),
    }


def _slurm_directives(dep: Deployment, gpus: int) -> list[str]:
    directives = [
        f"--job-name={dns_label(dep.app_name)}",
        f"--nodes={dep.nodes}",
        f"--ntasks-per-node={dep.tasks_per_node}",
        f"--cpus-per-task={dep.cpus_per_task}",
    ]
    if gpus:
        directives.append(f"--gres=gpu:{gpus}")
    directives.append(f"--time={_slurm_time(walltime_seconds(dep.walltime))}")
    if dep.partition:
        directives.append(f"--partition={dep.partition}")
    if dep.account:
        directives.append(f"--account={dep.account}")
    directives.append(f"--output={dns_label(dep.app_name)}-%j.out")
    return directives


def _pbs_directives(dep: Deployment, cores: int, gpus: int) -> list[str]:
    if dep.scheduler == "pbs":  # PBS Pro: chunks of ncpus/mpiprocs/ngpus
        chunk = f"select={dep.nodes}:ncpus={cores}:mpiprocs={dep.tasks_per_node}" + (f":ngpus={gpus}" if gpus else "")
    else:  # Torque: nodes and processors per node
        chunk = f"nodes={dep.nodes}:ppn={cores}" + (f":gpus={gpus}" if gpus else "")
    directives = [f"-N {dns_label(dep.app_name)}", f"-l {chunk}", f"-l walltime={_hms(walltime_seconds(dep.walltime))}"]
    if dep.partition:
        directives.append(f"-q {dep.partition}")
    if dep.account:
        directives.append(f"-A {dep.account}")
    directives.append("-j oe")
    return directives


def _launch(dep: Deployment) -> str:
    """The launcher prefix (with a trailing space) that starts every task on every node, or "" for one task."""
    tasks = dep.nodes * dep.tasks_per_node
    launcher = dep.launcher or (DEFAULT_LAUNCHER.get(dep.scheduler) if tasks > 1 else None)
    if launcher == "srun":
        # srun does not inherit --cpus-per-task from the batch allocation (Slurm >= 22.05), so pass it again.
        return f"srun --nodes={dep.nodes} --ntasks-per-node={dep.tasks_per_node} --cpus-per-task={dep.cpus_per_task} "
    if launcher == "mpirun":
        # PBS lists each node once per mpiprocs in $PBS_NODEFILE; Slurm-aware MPIs find the nodes themselves.
        hostfile = '-hostfile "$PBS_NODEFILE" ' if dep.scheduler in ("pbs", "torque") else ""
        return f"mpirun -np {tasks} {hostfile}"
    return ""


def _hms(seconds: int) -> str:
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _slurm_time(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    return f"{days}-{_hms(rest)}" if days else _hms(rest)


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


# --- Kubernetes -------------------------------------------------------------------------------------------------


def kubernetes_job(dep: Deployment) -> dict[str, Any]:
    """A ``batch/v1`` Job: one pod per node (an Indexed Job when there are several), GPUs as resource limits.

    Image labels become annotations: Kubernetes label values may not hold free text, annotations may.
    """
    name = dns_label(dep.app_name)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "appopt"}
    cpus = str(dep.tasks_per_node * dep.cpus_per_task)
    resources: dict[str, dict[str, Any]] = {"requests": {"cpu": cpus}, "limits": {"cpu": cpus}}
    if uses_gpus(dep):
        resources["limits"][K8S_GPU_RESOURCES[dep.accelerator or ""]] = dep.gpus_per_node
    container: dict[str, Any] = {"name": name, "image": image_name(dep), "command": list(dep.run_argv)}
    if dep.image_ref is None:  # a local image name: use what the node has rather than pull from Docker Hub
        container["imagePullPolicy"] = "IfNotPresent"
    if dep.env:
        container["env"] = [{"name": key, "value": value} for key, value in dep.env]
    container["resources"] = resources
    spec: dict[str, Any] = {"backoffLimit": 0, "activeDeadlineSeconds": walltime_seconds(dep.walltime)}
    if dep.nodes > 1:
        spec |= {"completions": dep.nodes, "parallelism": dep.nodes, "completionMode": "Indexed"}
    spec["template"] = {
        "metadata": {"labels": dict(labels)},  # a copy: a shared dict would come out as a YAML anchor
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/arch": K8S_ARCH[dep.arch]},
            "containers": [container],
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels, "annotations": dict(image_labels(dep))},
        "spec": spec,
    }


class _ManifestDumper(yaml.SafeDumper):
    """safe_dump, but strings holding a line break other than "\\n" are double-quoted: PyYAML would otherwise write
    U+0085/U+2028/U+2029 raw, and its own loader reads them back as line breaks (folded to spaces)."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if any(ch in LINE_BREAKS for ch in value.replace("\n", "")) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _represent_str)


def render_kubernetes(dep: Deployment) -> str:
    """The Job manifest as YAML (``kubectl apply -f job.k8s.yaml``)."""
    header = "# Kubernetes Job rendered by appopt: kubectl apply -f job.k8s.yaml\n"
    body = yaml.dump(kubernetes_job(dep), Dumper=_ManifestDumper, sort_keys=False, allow_unicode=True, width=120)
    return header + body
