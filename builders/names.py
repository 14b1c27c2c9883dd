"""Names derived from free-text spec fields: job names, Kubernetes names, default image and SIF names."""

from __future__ import annotations

import re
import unicodedata

from builders.deployment import Deployment

_NOT_LABEL_CHARS = re.compile(r"[^a-z0-9]+")


def dns_label(text: str, max_length: int = 63) -> str:
    """A DNS-1123 label (``[a-z0-9]([-a-z0-9]*[a-z0-9])?``) that starts with a letter, made from free text.

    It is also a valid Slurm/PBS job name and Docker repository name, so every scheduler gets the same name.

    >>> dns_label("ResNet-50 Training (v2)!")
    'resnet-50-training-v2'
    >>> dns_label("$(rm -rf /)")
    'rm-rf'
    >>> dns_label("42")
    'app-42'
    """
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    label = _NOT_LABEL_CHARS.sub("-", ascii_text.lower()).strip("-")
    if not label:
        label = "app"
    elif not label[0].isalpha():
        label = f"app-{label}"
    return label[:max_length].rstrip("-")


def image_name(dep: Deployment) -> str:
    """The image reference to build and run: ``dep.image_ref``, else a local ``<name>:latest``."""
    return dep.image_ref or f"{dns_label(dep.app_name)}:latest"


def sif_name(dep: Deployment) -> str:
    """The Singularity/Apptainer image file built from ``Singularity.def`` (next to the job script)."""
    return f"{dns_label(dep.app_name)}.sif"


def squashfs_name(dep: Deployment) -> str:
    """The Charliecloud squashfs image (``ch-convert`` output) the job runs with ``ch-run`` (next to the script)."""
    return f"{dns_label(dep.app_name)}.sqfs"
