"""What the builders need to know to render a deployment; filled from a plan by ``optimiser.artifacts``.

Builders never import the optimiser: this frozen description is the whole contract. Every string in it may come from a
user's spec, so renderers quote it for the format they write (shell, YAML, Dockerfile JSON-array form).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, get_args

#: The CPU architectures and container formats appopt renders for: the one list of each (the spec and the checks
#: read them). The schedulers are a registry instead (:mod:`builders.schedulers`), one module each.
Arch = Literal["x86_64", "aarch64", "ppc64le"]
ContainerFormat = Literal["docker", "singularity"]
ARCHES: tuple[Arch, ...] = get_args(Arch)
FORMATS: tuple[ContainerFormat, ...] = get_args(ContainerFormat)


@dataclass(frozen=True)
class Deployment:
    """One chosen route, ready to render as images and a job."""

    #: Application name from the spec (free text; renderers sanitise it where a name must be a DNS label etc.).
    app_name: str
    #: Base image per container format (docker: an image ref; singularity: the same ref, bootstrapped from docker).
    base_image: str
    #: CPU architecture of the target (x86_64 | aarch64 | ppc64le).
    arch: str = "x86_64"
    #: Accelerator vendor ("nvidia", ...) or None for CPU only; ``gpus_per_node`` how many per node.
    accelerator: str | None = None
    gpus_per_node: int = 0
    #: Debian/Ubuntu packages and pip requirements to install in the build stage.
    apt_packages: tuple[str, ...] = ()
    pip_packages: tuple[str, ...] = ()
    #: Extra package indexes (URLs) pip searches besides PyPI in the build stage (PyTorch's CPU wheels); unused with
    #: a ``wheelhouse``.
    pip_index_urls: tuple[str, ...] = ()
    #: Extra shell commands from the catalog (trusted text, not from the spec).
    run_steps: tuple[str, ...] = ()
    #: Environment for the final image (thread counts, library switches, precision flags).
    env: tuple[tuple[str, str], ...] = ()
    #: OCI labels (spec hash, route, predicted figures, appopt version).
    labels: tuple[tuple[str, str], ...] = ()
    #: The model file to copy into the image (path relative to the build context) or None for a named architecture.
    model_file: str | None = None
    #: argv run in the build stage to compile the model (None when the framework needs no compile step).
    compile_argv: tuple[str, ...] | None = None
    #: argv of the container's entrypoint (the application run).
    run_argv: tuple[str, ...] = ()
    #: Container formats to render.
    formats: tuple[ContainerFormat, ...] = ("docker", "singularity")
    #: Image reference to tag/push (registry/name:tag); None means a local name derived from ``app_name``.
    image_ref: str | None = None
    # --- the job ---
    #: A name in :mod:`builders.schedulers`' registry (``slurm``, ``pbs``, ``torque``, ``kubernetes``, ``none``...).
    scheduler: str = "none"
    nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    walltime: str = "01:00:00"
    partition: str | None = None
    account: str | None = None
    #: Multi-node launcher, one of the scheduler module's (``srun``, ``mpirun``); None for single-task jobs.
    launcher: str | None = None
    #: Memory of one node in bytes (the spec's or the CPU preset's); None when unknown. Sizes Kubernetes pods.
    node_memory_bytes: int | None = None
    #: Kubernetes: the pod's CPU (cores) and memory (bytes) request and limit; None = the node's allocatable share
    #: less a DaemonSet allowance (``builders.kubernetes.pod_size``).
    pod_cpu: float | None = None
    pod_memory_bytes: int | None = None
    #: Kubernetes: the Secret holding the registry credentials, referenced by name in ``imagePullSecrets``.
    image_pull_secret: str | None = None
    #: Where the application reads its data (the spec's ``application.data.path``) and, for Kubernetes, the
    #: PersistentVolumeClaim that holds it (mounted read-only; without one the path is not mounted).
    data_path: str | None = None
    data_claim: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    # --- the images (added with the builders; all optional) ---
    #: A slimmer base for the final stage (e.g. ``python:3.11-slim`` after building on ``python:3.11``); None = same.
    #: It must have the same Python at the same path as ``base_image`` when ``pip_packages`` are installed.
    runtime_image: str | None = None
    #: Distro family of the base images; ``apt_packages`` need a Debian-family one (debian, ubuntu).
    distro: str = "debian"
    #: Directory inside the image that holds the model, ``app_files`` and what ``compile_argv`` writes; the build
    #: stage runs the compile there and the whole directory is carried to the final stage and put on PYTHONPATH.
    app_dir: str = "/opt/app"
    #: Files or directories (relative to the build context) copied into ``app_dir``, e.g. ``("runtime",)``.
    app_files: tuple[str, ...] = ()
    #: A directory of wheels in the build context: pip then installs with ``--no-index --find-links`` (air-gapped).
    wheelhouse: str | None = None
