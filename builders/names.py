"""Names derived from free-text spec fields: job names, Kubernetes names, default image and SIF names."""

from __future__ import annotations

import re
import unicodedata

from builders.deployment import Deployment
from builders.errors import RenderError
from builders.validate import IMAGE_REF

_NOT_LABEL_CHARS = re.compile(r"[^a-z0-9]+")
_MAX_REFERENCE_LENGTH = 512


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


def checked_image_reference(text: str, field: str) -> str:
    """``text`` when the whole of it is one image reference (``validate.IMAGE_REF``), else a one-line RenderError.

    Every reference that enters a Dockerfile or definition from outside a checked Deployment (``--base-image``) goes
    through here: a newline in it would add instructions (``debian:12\\nRUN ...``).

    >>> checked_image_reference("localhost/base:py311", "--base-image")
    'localhost/base:py311'
    >>> checked_image_reference("debian:12\\nRUN id", "--base-image")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    builders.errors.RenderError: --base-image: 'debian:12\\nRUN id' is not an image reference like ...
    """
    if len(text) > _MAX_REFERENCE_LENGTH or not IMAGE_REF.fullmatch(text):
        shown = repr(text) if len(text) <= 120 else f"{text[:120]!r}... ({len(text)} characters)"
        raise RenderError(f"{field}: {shown} is not an image reference like registry.example.org/team/app:tag")
    return text


def image_name(dep: Deployment) -> str:
    """The image reference to build and run: ``dep.image_ref``, else a local ``<name>:latest``."""
    return dep.image_ref or f"{dns_label(dep.app_name)}:latest"


def sif_name(dep: Deployment) -> str:
    """The Singularity/Apptainer image file built from ``Singularity.def`` (next to the job script)."""
    return f"{dns_label(dep.app_name)}.sif"


def squashfs_name(dep: Deployment) -> str:
    """The Charliecloud squashfs image (``ch-convert`` output) the job runs with ``ch-run`` (next to the script)."""
    return f"{dns_label(dep.app_name)}.sqfs"
