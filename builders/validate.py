"""Up-front checks of a Deployment: every problem as one ``field: message`` line, before anything is rendered.

Free text (names, env and label values, argv words, package specs) is always quoted, so it is only checked for NUL,
which no file format or shell word can hold. Fields that land where nothing can quote them are checked against a
strict grammar instead: image references (``FROM``/``From:``), file paths (Singularity ``%files`` lines are globbed
by a shell on the build host), env names, label keys, and the scheduler directives (``#SBATCH``/``#PBS`` lines).
What depends on the scheduler (its name, launchers, the container format it runs) is checked against its module
when the job is rendered (:func:`builders.jobs.job_scheduler`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from builders.deployment import ARCHES, FORMATS, Deployment
from builders.errors import RenderError

DEBIAN_FAMILY = ("debian", "ubuntu")
#: Vendors the job renderers know how to hand GPUs to (container flags, Kubernetes resource names).
GPU_VENDORS = ("nvidia", "amd", "intel")

# docker/distribution reference grammar, simplified: [host[:port]/]path[:tag][@digest]; \Z, not $ (which would
# accept a trailing newline)
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REF = re.compile(
    rf"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{32,})?\Z"
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
#: OCI label keys that are also valid Kubernetes annotation names (reverse-DNS, lower case, at most 63 chars).
LABEL_KEY = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,61}[a-z0-9])?\Z")
#: Paths safe unquoted in COPY, %files (shell-globbed on the host) and scripts: no spaces, quotes, globs or $.
SAFE_PATH = re.compile(r"^[A-Za-z0-9._+@/-]+\Z")
#: Scheduler partition / queue / account names: they go on #SBATCH / #PBS lines, which no shell quotes.
SCHEDULER_TOKEN = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+@-]*(?:,[A-Za-z0-9_][A-Za-z0-9_.+@-]*)*\Z")
WALLTIME = re.compile(r"^(?:(\d+)-)?(\d{1,3}):([0-5]\d):([0-5]\d)\Z")


def walltime_seconds(walltime: str) -> int:
    """``[D-]HH:MM:SS`` as seconds (raises RenderError naming ``walltime`` otherwise).

    >>> walltime_seconds("1-02:00:30")
    93630
    """
    match = WALLTIME.match(walltime)
    if match is None:
        raise RenderError(f"walltime: {walltime!r} is not [D-]HH:MM:SS")
    days, hours, minutes, seconds = (int(part or 0) for part in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def uses_gpus(dep: Deployment) -> bool:
    """True when the job asks for accelerators (a vendor and at least one per node)."""
    return dep.accelerator not in (None, "", "none", "cpu") and dep.gpus_per_node > 0


def check_deployment(dep: Deployment) -> None:
    """Raise one RenderError listing every field that cannot be rendered safely (nothing when all is well)."""
    problems = deployment_problems(dep)
    if problems:
        raise RenderError(*problems)


def deployment_problems(dep: Deployment) -> list[str]:
    """Every field that cannot be rendered safely, one ``field: message`` line each."""
    return list(_problems(dep))


def _problems(dep: Deployment) -> Iterator[str]:
    yield from _text_problems(dep)
    if not dep.app_name.strip():
        yield "app_name: must not be empty"
    for name, ref in (
        ("base_image", dep.base_image),
        ("runtime_image", dep.runtime_image),
        ("image_ref", dep.image_ref),
    ):
        if ref is not None and not IMAGE_REF.match(ref):
            yield f"{name}: {ref!r} is not an image reference like registry.example.org/team/app:tag"
    if dep.arch not in ARCHES:
        yield f"arch: {dep.arch!r} is not one of {', '.join(ARCHES)}"
    if dep.apt_packages and dep.distro not in DEBIAN_FAMILY:
        yield f"apt_packages: need a Debian-family base image, but distro is {dep.distro!r}"
    for key, _ in dep.env:
        if not ENV_NAME.match(key):
            yield f"env.{key}: not a valid environment variable name ([A-Za-z_][A-Za-z0-9_]*)"
    for key, _ in dep.labels:
        if not LABEL_KEY.match(key):
            yield f"labels.{key}: label keys must be lower-case reverse-DNS names of at most 63 characters"
    yield from _path_problems(dep)
    if dep.compile_argv is not None and not dep.compile_argv:
        yield "compile_argv: must not be empty (use None for no compile step)"
    yield from _job_problems(dep)


def _text_problems(dep: Deployment) -> Iterator[str]:
    """NUL cannot be written into a shell word, a Dockerfile or a C string: reject it wherever it hides."""
    texts: list[tuple[str, str | None]] = [
        ("app_name", dep.app_name),
        ("accelerator", dep.accelerator),
        ("distro", dep.distro),
    ]
    texts += [(f"apt_packages[{i}]", v) for i, v in enumerate(dep.apt_packages)]
    texts += [(f"pip_packages[{i}]", v) for i, v in enumerate(dep.pip_packages)]
    texts += [(f"pip_index_urls[{i}]", v) for i, v in enumerate(dep.pip_index_urls)]
    texts += [(f"run_steps[{i}]", v) for i, v in enumerate(dep.run_steps)]
    texts += [(f"env.{k}", v) for k, v in dep.env] + [(f"labels.{k}", v) for k, v in dep.labels]
    texts += [(f"compile_argv[{i}]", v) for i, v in enumerate(dep.compile_argv or ())]
    texts += [(f"run_argv[{i}]", v) for i, v in enumerate(dep.run_argv)]
    for field_name, value in texts:
        if value is not None and "\x00" in value:
            yield f"{field_name}: contains a NUL character"


def _path_problems(dep: Deployment) -> Iterator[str]:
    relative = [("model_file", dep.model_file), ("wheelhouse", dep.wheelhouse)]
    relative += [(f"app_files[{i}]", path) for i, path in enumerate(dep.app_files)]
    for field_name, path in relative:
        if path is None:
            continue
        if not SAFE_PATH.match(path) or path.startswith(("/", "-")) or ".." in path.split("/"):
            yield (
                f"{field_name}: {path!r} must be a relative path inside the build context using only "
                "letters, digits and ._+@/- (no '..')"
            )
    if not SAFE_PATH.match(dep.app_dir) or not dep.app_dir.startswith("/") or ".." in dep.app_dir.split("/"):
        yield f"app_dir: {dep.app_dir!r} must be an absolute path using only letters, digits and ._+@/-"


def _job_problems(dep: Deployment) -> Iterator[str]:
    if not dep.formats:
        yield "formats: need at least one of docker, singularity"
    for fmt in dep.formats:
        if fmt not in FORMATS:
            yield f"formats: {fmt!r} is not one of {', '.join(FORMATS)}"
    for name in ("nodes", "tasks_per_node", "cpus_per_task"):
        if getattr(dep, name) < 1:
            yield f"{name}: must be at least 1"
    if dep.gpus_per_node < 0:
        yield "gpus_per_node: must not be negative"
    if dep.gpus_per_node > 0 and dep.accelerator in (None, "", "none", "cpu"):
        yield "gpus_per_node: GPUs requested but accelerator is not set"
    if uses_gpus(dep) and dep.accelerator not in GPU_VENDORS:
        yield f"accelerator: {dep.accelerator!r} is not one of {', '.join(GPU_VENDORS)}"
    if not WALLTIME.match(dep.walltime):
        yield f"walltime: {dep.walltime!r} is not [D-]HH:MM:SS"
    for name in ("partition", "account"):
        value = getattr(dep, name)
        if value is not None and not SCHEDULER_TOKEN.match(value):
            yield f"{name}: {value!r} may only use letters, digits and _.+@- (comma-separated)"
