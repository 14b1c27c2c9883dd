"""Typed catalog entries: frameworks, graph compilers, primitive libraries, hardware and model architectures.

The data lives in ``optimiser/catalog/data/*.yaml``; these models validate it on load. Every fact that came from a paper
or vendor page carries a ``Source`` so plans can cite it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Mode = Literal["training", "inference"]
Arch = Literal["x86_64", "aarch64", "ppc64le"]
Vendor = Literal["nvidia", "amd", "intel"]
Precision = Literal["fp32", "fp16", "bf16", "int8"]
Layout = Literal["NCHW", "NHWC", "NCHWc"]
#: Where a route runs: CPU of an arch, or an accelerator vendor.
DeviceKey = Literal["cpu", "nvidia", "amd", "intel"]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Status(StrEnum):
    maintained = "maintained"
    legacy = "legacy"


class Source(_Entry):
    """Where a figure or rule comes from."""

    citation: str
    url: str | None = None


class Install(_Entry):
    """How to put a component into a container image.

    ``base_images`` maps ``cpu-<arch>`` or ``<vendor>`` (e.g. ``nvidia``) to an image reference; a component whose
    ``base_images`` is empty installs on top of whatever base the framework chose.
    """

    base_images: dict[str, str] = Field(default_factory=dict)
    apt: list[str] = Field(default_factory=list)
    pip: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    #: Extra shell steps, each a plain command line with no spec-derived text.
    run: list[str] = Field(default_factory=list)


class Speedup(_Entry):
    """A reported speedup, used as a prior until benchmarks say otherwise."""

    low: float
    high: float | None = None
    baseline: str
    workload: str = ""
    device: DeviceKey | None = None
    mode: Mode | None = None
    source: Source

    @property
    def typical(self) -> float:
        """Geometric mean of the reported range (the single figure the prior uses)."""
        return self.low if self.high is None else (self.low * self.high) ** 0.5


class Component(_Entry):
    """What frameworks, compilers and libraries share."""

    id: str
    name: str
    version: str
    status: Status = Status.maintained
    successor: str | None = None
    description: str = ""
    modes: list[Mode] = Field(default_factory=lambda: ["training", "inference"])
    cpu_archs: list[Arch] = Field(default_factory=list)
    accelerators: list[Vendor] = Field(default_factory=list)
    install: Install = Field(default_factory=Install)
    sources: list[Source] = Field(default_factory=list)


class Framework(Component):
    kind: Literal["framework"] = "framework"
    #: Precisions it can run, per device key.
    precisions: dict[DeviceKey, list[Precision]] = Field(default_factory=dict)
    #: Memory layouts it can run, per device key.
    layouts: dict[DeviceKey, list[Layout]] = Field(default_factory=dict)
    #: Library ids it can use, per device key; a route picks one of each ``library_roles`` entry.
    libraries: dict[DeviceKey, list[str]] = Field(default_factory=dict)
    #: Relative per-FLOP efficiency prior (1.0 = reaches the roofline); refined by benchmark data.
    efficiency: dict[DeviceKey, float] = Field(default_factory=dict)
    #: True if it reads ONNX directly (others need an exporter step or a native model definition).
    reads_onnx: bool = False


class Compiler(Component):
    kind: Literal["compiler"] = "compiler"
    #: The framework × compiler matrix: framework id -> modes it supports with that framework (T/I/N).
    support: dict[str, list[Mode]] = Field(default_factory=dict)
    speedups: list[Speedup] = Field(default_factory=list)


class Library(Component):
    kind: Literal["library"] = "library"
    #: ``dnn`` (convolution/normalisation primitives) or ``blas`` (GEMM).
    role: Literal["dnn", "blas"]
    #: CPU vendors it is restricted to ("intel" libraries may still run on AMD, see ``cpu_archs``).
    efficiency: dict[DeviceKey, float] = Field(default_factory=dict)


class Hardware(_Entry):
    """A CPU or accelerator preset with its peaks (per device, not per node)."""

    id: str
    name: str
    kind: Literal["cpu", "gpu"]
    vendor: str
    arch: Arch | None = None
    cores: int | None = None
    #: Peak FLOP/s (not TFLOP/s) per precision; a precision missing here is not supported by the hardware.
    peak_flops: dict[Precision, float]
    #: Memory bandwidth in bytes/s.
    mem_bandwidth: float
    memory_bytes: float | None = None
    #: Vector ISA features that matter for library rules (avx512, amx, sve, neon, tensor_cores…).
    features: list[str] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)


class Architecture(_Entry):
    """A named model architecture with its published cost."""

    id: str
    name: str
    task: Literal["vision", "nlp", "speech", "recommendation", "other"]
    #: Multiply-accumulates per sample at ``input_shape`` (forward pass).
    gmacs: float
    params_m: float
    input_shape: list[int]
    #: Bytes of activations written per sample in a forward pass (estimate; drives the memory-bound term).
    activation_mbytes: float | None = None
    aliases: list[str] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)


class Catalog(_Entry):
    """The whole catalog, keyed by id."""

    frameworks: dict[str, Framework]
    compilers: dict[str, Compiler]
    libraries: dict[str, Library]
    hardware: dict[str, Hardware]
    architectures: dict[str, Architecture]
