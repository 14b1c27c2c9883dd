"""The Kubernetes scheduler: render a deployment as a ``batch/v1`` Job, size its pod, and check it against the API.

The Job is a dict written with ``yaml.safe_dump`` rather than a template: YAML quoting then comes from the emitter,
and no spec text is ever pasted into YAML by hand. Submission is ``kubectl apply -f job.k8s.yaml`` (appopt does not
talk to clusters).

Sizing. A pod can only use a node's *allocatable* resources: its capacity less what the kubelet and system reserve.
The reservation here is GKE's published rule (the EKS AMI uses the same CPU rule), applied to the target's cores and
memory; on top of it we leave a stated allowance for the per-node DaemonSets every cluster runs. The CPU request is
rounded down to whole cores (a Guaranteed pod with whole cores may be pinned by the static CPU manager, and threads
then match cores); ``OMP_NUM_THREADS`` and its siblings are capped at that count. A spec can override both numbers
(``target.kubernetes``), but never above the node's allocatable share.

>>> reserved_cpu_millicores(56)
210
>>> round(reserved_memory_bytes(64 * GIB) / MIB)
5712
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import yaml

from builders.batch import SchedulerModule
from builders.deployment import Deployment
from builders.errors import RenderError
from builders.names import dns_label, image_name
from builders.quoting import LINE_BREAKS
from builders.recipe import image_labels
from builders.validate import uses_gpus, walltime_seconds

#: The Kubernetes minor versions we claim: every rendered Job is checked against each one's ``batch/v1`` schema
#: (the ``test`` extra's kubernetes-validate bundles them). Indexed Jobs, the one newer feature we use, are GA
#: since 1.24.
KUBERNETES_VERSIONS = ("1.30", "1.31", "1.32", "1.33", "1.34", "1.35")
MIB = 1024**2
GIB = 1024**3
#: Where the reservation rule comes from: GKE's "node allocatable" figures,
#: https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes (memory and CPU reservations).
RESERVATION_SOURCE = "GKE's reservation rule"
#: GKE's CPU reservation: (cores up to, fraction of those cores) in order; the last band covers every core above 4.
_CPU_BANDS = ((1, 0.06), (2, 0.01), (4, 0.005), (math.inf, 0.0025))
#: GKE's memory reservation: (GiB up to, fraction of that band), plus the kubelet's 100 MiB eviction threshold.
_MEMORY_BANDS = ((4, 0.25), (8, 0.20), (16, 0.10), (128, 0.06), (math.inf, 0.02))
EVICTION_THRESHOLD_BYTES = 100 * MIB
#: Our allowance for per-node DaemonSets (kube-proxy, CNI, log and metrics agents): an estimate, not a provider
#: figure. The default request leaves it free; a spec override may use it.
DAEMONSET_CPU_MILLICORES = 200
DAEMONSET_MEMORY_BYTES = 512 * MIB
#: Environment variables that set a thread count: capped at the pod's whole CPUs.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
#: Kubernetes extended-resource names of the device plugins, per vendor.
K8S_GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu", "intel": "gpu.intel.com/i915"}
K8S_ARCH = {"x86_64": "amd64", "aarch64": "arm64", "ppc64le": "ppc64le"}
JOB_FILE = "job.k8s.yaml"


def _banded(amount: float, bands: tuple[tuple[float, float], ...]) -> float:
    reserved, lower = 0.0, 0.0
    for upper, fraction in bands:
        if amount <= lower:
            break
        reserved += (min(amount, upper) - lower) * fraction
        lower = upper
    return reserved


def reserved_cpu_millicores(cores: int) -> int:
    """What the kubelet and system reserve of a node with ``cores`` (GKE: 6% of the first core, 1% of the second,
    0.5% of the next two, 0.25% of each core above four), rounded up to a millicore."""
    return math.ceil(_banded(cores, _CPU_BANDS) * 1000 - 1e-9)


def reserved_memory_bytes(memory_bytes: int) -> int:
    """What the kubelet and system reserve of a node's memory (GKE: 25% of the first 4 GiB, 20% of the next 4, 10% of
    the next 8, 6% of the next 112, 2% above 128 GiB) plus the 100 MiB eviction threshold."""
    return math.ceil(_banded(memory_bytes / GIB, _MEMORY_BANDS) * GIB) + EVICTION_THRESHOLD_BYTES


@dataclass(frozen=True)
class PodSize:
    """The pod's CPU (millicores) and memory (bytes, None when the node's memory is unknown) requests and limits."""

    cpu_millicores: int
    memory_bytes: int | None
    #: The node's allocatable share the request must fit (same units).
    allocatable_cpu_millicores: int
    allocatable_memory_bytes: int | None

    @property
    def cpu(self) -> str:
        """Whole cores as ``"55"``, fractions as ``"740m"``."""
        whole, rest = divmod(self.cpu_millicores, 1000)
        return str(whole) if not rest else f"{self.cpu_millicores}m"

    @property
    def memory(self) -> str | None:
        return None if self.memory_bytes is None else f"{self.memory_bytes // MIB}Mi"

    @property
    def threads(self) -> int:
        """Threads that fit the CPU request (at least one)."""
        return max(1, self.cpu_millicores // 1000)


def pod_size(dep: Deployment) -> PodSize:
    """Requests for one pod on one node of the target (``dep.pod_cpu``/``dep.pod_memory_bytes`` override them).

    >>> pod_size(Deployment(app_name="x", base_image="debian:12", cpus_per_task=56)).cpu
    '55'
    """
    cores = dep.tasks_per_node * dep.cpus_per_task
    allocatable_cpu = cores * 1000 - reserved_cpu_millicores(cores)
    if dep.pod_cpu is not None:
        cpu = round(dep.pod_cpu * 1000)
        if cpu > allocatable_cpu or cpu < 1:
            raise RenderError(f"target.kubernetes.cpu: {dep.pod_cpu:g} does not fit a {cores}-core node's allocatable "
                              f"{allocatable_cpu}m (its cores less {RESERVATION_SOURCE})")
    else:
        spare = allocatable_cpu - DAEMONSET_CPU_MILLICORES
        cpu = spare // 1000 * 1000 if spare >= 1000 else spare  # a 1-core node: 740m
    allocatable_memory = None
    memory = None
    if dep.node_memory_bytes is not None:
        allocatable_memory = dep.node_memory_bytes - reserved_memory_bytes(dep.node_memory_bytes)
        memory = (allocatable_memory - DAEMONSET_MEMORY_BYTES) // MIB * MIB
    if dep.pod_memory_bytes is not None:
        memory = dep.pod_memory_bytes // MIB * MIB
        if allocatable_memory is not None and memory > allocatable_memory:
            raise RenderError(f"target.kubernetes.memory_gib: {dep.pod_memory_bytes / GIB:g} GiB does not fit the "
                              f"node's allocatable {allocatable_memory / GIB:.1f} GiB "
                              f"(its memory less {RESERVATION_SOURCE})")
    if memory is not None and memory < 64 * MIB:
        field = "target.kubernetes.memory_gib" if dep.pod_memory_bytes is not None else "target.cpu.memory_gib"
        raise RenderError(f"{field}: leaves {max(memory, 0) // MIB} MiB for the pod (at least 64 MiB needed)")
    return PodSize(cpu, memory, allocatable_cpu, allocatable_memory)


def sizing_note(dep: Deployment) -> str:
    """One line for the plan: what the pod requests of its node, and why.

    >>> sizing_note(Deployment(app_name="x", base_image="debian:12", cpus_per_task=56))[:78]
    "Kubernetes pod requests 55 of 56 cores (55.79 allocatable, GKE's reservation r"
    """
    size = pod_size(dep)
    cores = dep.tasks_per_node * dep.cpus_per_task
    allocatable = size.allocatable_cpu_millicores / 1000
    text = f"Kubernetes pod requests {size.cpu} of {cores} cores ({allocatable:g} allocatable, {RESERVATION_SOURCE})"
    if size.memory is not None and dep.node_memory_bytes is not None:
        text += f" and {size.memory} of {dep.node_memory_bytes / GIB:g} GiB memory"
    else:
        text += "; no memory request: the node's memory is unknown (set target.cpu.memory_gib)"
    return text + "; override with target.kubernetes"


def data_mount(dep: Deployment) -> str | None:
    """Where the data claim is mounted: the data path, or its directory when it names a file (``x.npz``).

    >>> data_mount(Deployment(app_name="x", base_image="debian:12", data_path="/data/x.npz", data_claim="d"))
    '/data'
    """
    if not (dep.data_path and dep.data_claim):
        return None
    path = PurePosixPath(dep.data_path)
    if not path.is_absolute():
        raise RenderError(f"application.data.path: {dep.data_path!r} must be absolute to mount "
                          "target.kubernetes.data_claim there")
    return str(path.parent if path.suffix else path)


def kubernetes_notes(dep: Deployment) -> list[str]:
    """The plan's notes about the Job: the pod's size, and data the pod cannot see."""
    notes = [sizing_note(dep)]
    if dep.data_path and not dep.data_claim:
        notes.append(f"application.data.path {dep.data_path!r} is not mounted into the Kubernetes pod: name the "
                     "PersistentVolumeClaim that holds it in target.kubernetes.data_claim")
    return notes


def _env(dep: Deployment, size: PodSize) -> list[dict[str, str]]:
    """The plan's environment, with thread counts capped at the pod's whole CPUs."""
    env = []
    for key, value in dep.env:
        if key in THREAD_ENV and value.isdigit() and int(value) > size.threads:
            value = str(size.threads)
        env.append({"name": key, "value": value})
    return env


def kubernetes_job(dep: Deployment) -> dict[str, Any]:
    """A ``batch/v1`` Job: one pod per node (an Indexed Job when there are several), GPUs as resource limits, the
    data's PersistentVolumeClaim (when the spec names one) mounted read-only at the data path.

    Image labels become annotations: Kubernetes label values may not hold free text, annotations may. Registry
    credentials are a Secret the cluster holds, named in ``imagePullSecrets``; no credential is ever written here.
    """
    name = dns_label(dep.app_name)
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": "appopt"}
    size = pod_size(dep)
    amounts: dict[str, Any] = {"cpu": size.cpu}
    if size.memory is not None:
        amounts["memory"] = size.memory
    resources: dict[str, dict[str, Any]] = {"requests": dict(amounts), "limits": dict(amounts)}
    if uses_gpus(dep):
        resources["limits"][K8S_GPU_RESOURCES[dep.accelerator or ""]] = dep.gpus_per_node
    container: dict[str, Any] = {"name": name, "image": image_name(dep), "command": list(dep.run_argv)}
    if dep.image_ref is None:  # a local image name: use what the node has rather than pull from Docker Hub
        container["imagePullPolicy"] = "IfNotPresent"
    if dep.env:
        container["env"] = _env(dep, size)
    container["resources"] = resources
    mount = data_mount(dep)
    if mount is not None:
        container["volumeMounts"] = [{"name": "data", "mountPath": mount, "readOnly": True}]
    spec: dict[str, Any] = {"backoffLimit": 0, "activeDeadlineSeconds": walltime_seconds(dep.walltime)}
    if dep.nodes > 1:
        spec |= {"completions": dep.nodes, "parallelism": dep.nodes, "completionMode": "Indexed"}
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/arch": K8S_ARCH[dep.arch]},
        "containers": [container],
    }
    if dep.image_pull_secret:
        pod["imagePullSecrets"] = [{"name": dep.image_pull_secret}]
    if mount is not None:
        pod["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": dep.data_claim, "readOnly": True}}]
    spec["template"] = {
        "metadata": {"labels": dict(labels)},  # a copy: a shared dict would come out as a YAML anchor
        "spec": pod,
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
    header = f"# Kubernetes Job rendered by appopt: kubectl apply -f {JOB_FILE}\n"
    body = yaml.dump(kubernetes_job(dep), Dumper=_ManifestDumper, sort_keys=False, allow_unicode=True, width=120)
    return header + body


class SchemaCheckUnavailable(RenderError):
    """kubernetes-validate (the ``test`` extra) is not installed."""


def schema_problems(manifest: dict[str, Any], versions: tuple[str, ...] = KUBERNETES_VERSIONS) -> list[str]:
    """Check ``manifest`` against the strict API schema of every version; one ``vX.Y: path: message`` per problem.

    Raises SchemaCheckUnavailable (one line) when kubernetes-validate is not installed.
    """
    try:
        import kubernetes_validate
    except ImportError:
        raise SchemaCheckUnavailable("kubernetes schema check: extra not installed "
                                     "(pip install 'appopt[test]' brings kubernetes-validate)") from None
    problems = []
    for version in versions:
        try:
            kubernetes_validate.validate(manifest, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(part) for part in exc.absolute_path) or "(top)"
            problems.append(f"v{version}: {where}: {exc.message}")
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.utils.VersionNotSupportedError) as exc:
            problems.append(f"v{version}: {exc.message}")
    return problems


def check_manifest(text: str) -> None:
    """Raise RenderError listing every schema problem of a rendered manifest (``job.k8s.yaml`` text)."""
    manifest = yaml.safe_load(text)
    if not isinstance(manifest, dict):
        raise RenderError(f"{JOB_FILE}: not a Kubernetes object")
    problems = schema_problems(manifest)
    if problems:
        raise RenderError(*(f"{JOB_FILE}: {problem}" for problem in problems))


def check_rendered(text: str) -> str:
    """``appopt validate --strict``: the manifest against every claimed version's schema; a one-line summary."""
    check_manifest(text)
    return f"valid batch/v1 Job for Kubernetes {', '.join(KUBERNETES_VERSIONS)}"


#: Kubernetes: a Job manifest that the user applies with kubectl.
KUBERNETES = SchedulerModule(
    name="kubernetes", job_file=JOB_FILE, render=render_kubernetes,
    run_hint="the plan targets Kubernetes; submit with `kubectl apply -f {path}`",
    needs_format="docker", needs_format_reason="a Kubernetes Job runs an OCI image",
    notes=kubernetes_notes, check_rendered=check_rendered, executable=False, order=40,
)
SCHEDULERS = (KUBERNETES,)
