"""Which container runtime a rendered script uses, and what Python it needs when it uses none.

The scripts (``run.sh``, ``job.slurm``, ``job.pbs``) take the first runtime of an order that is installed where they
run, and say which one they took; ``APPOPT_CONTAINER`` overrides the order with one name or a list
(``APPOPT_CONTAINER="podman apptainer"``). ``none`` runs the application with a Python found on the host
(``APPOPT_PYTHON``, the active virtualenv, ``.venv`` next to the script, ``python3``), checked first to import the
packages the image would have installed, so a missing one is a line naming it rather than a traceback.

>>> python_modules(("onnxruntime-gpu==1.19.2", "scikit-learn==1.5.0", "mkl==2024.1.0", "numpy==2.4.6"))
('onnxruntime', 'sklearn', 'numpy')
"""

from __future__ import annotations

import re
from typing import Any

from builders.deployment import Deployment
from builders.names import squashfs_name
from builders.quoting import shell_join, shell_quote

#: Every runtime the scripts know, as ``APPOPT_CONTAINER`` spells it.
RUNTIMES = ("podman", "docker", "apptainer", "singularity", "charliecloud", "none")
#: Defaults: on a workstation (run.sh) the OCI engines first; on cluster nodes (batch jobs) Apptainer/Singularity.
#: ``none`` comes last: with nothing installed the script runs the application directly (and says so).
LOCAL_ORDER = ("podman", "docker", "apptainer", "singularity", "charliecloud", "none")
HPC_ORDER = ("apptainer", "singularity", "podman", "charliecloud", "none")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: pip projects whose import name differs from the project name; None: nothing to import (shared libraries only).
_IMPORT_NAMES: dict[str, str | None] = {
    "scikit-learn": "sklearn",
    "onnxruntime-gpu": "onnxruntime",
    "onnxruntime-openvino": "onnxruntime",
    "apache-tvm": "tvm",
    "tensorflow-cpu": "tensorflow",
    "pillow": "PIL",
    "opencv-python": "cv2",
    "opencv-python-headless": "cv2",
    "mkl": None,
    "intel-openmp": None,
    "tbb": None,
}


def _project(requirement: str) -> str:
    name = requirement.split(";")[0]
    for mark in ("==", ">=", "<=", "~=", "!=", ">", "<", "[", " "):
        name = name.split(mark)[0]
    return name.strip().lower().replace("_", "-")


def python_modules(requirements: tuple[str, ...]) -> tuple[str, ...]:
    """The top-level modules the pip ``requirements`` provide (what a host Python must import instead)."""
    modules: list[str] = []
    for requirement in requirements:
        project = _project(requirement)
        module = _IMPORT_NAMES.get(project, project.replace("-", "_").replace(".", "_"))
        if module and _IDENTIFIER.match(module) and module not in modules:
            modules.append(module)
    return tuple(modules)


def runtime_values(dep: Deployment, *, batch_job: bool) -> dict[str, Any]:
    """Template values for ``_pick_container.sh.j2`` and the ``none`` branch."""
    modules = python_modules(dep.pip_packages)
    return {
        "container_order": " ".join(HPC_ORDER if batch_job else LOCAL_ORDER),
        "known_runtimes": " ".join(RUNTIMES),
        "script_name": "job" if batch_job else "run.sh",
        "sqfs_image": shell_quote(squashfs_name(dep)),
        "python_imports": ", ".join(modules),
        "python_requirements": shell_join(dep.pip_packages) if dep.pip_packages else "",
    }
