"""Typed catalog entries: frameworks, graph compilers, primitive libraries, hardware and model architectures.

The data lives in ``optimiser/catalog/data/*.yaml``; these models validate it on load. Every fact that came from a paper
or vendor page carries a ``Source`` so plans can cite it.

Conventions the data follows (the planner relies on them):

* ``cpu_archs`` / ``accelerators`` list where the catalog can *deploy* a component (an install route exists), not every
  platform it ever ran on; history goes in ``description``.
* Install keys are ``cpu-<arch>`` (``cpu-x86_64``, ``cpu-aarch64``, ``cpu-ppc64le``) or an accelerator vendor
  (``nvidia``); see ``install_key``.
* Efficiency priors are fractions in (0, 1]: ``Library.efficiency`` is the share of the hardware peak its kernels reach
  on large GEMM/convolution problems; ``Framework.efficiency`` is the share of its libraries' rate the framework keeps
  end to end (dispatch, unfused ops, layout changes). Their product scales the roofline. They are priors, replaced by
  fitted models where benchmark data exists.
"""

from __future__ import annotations

import difflib
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from optimiser.errors import CatalogError

Mode = Literal["training", "inference"]
Arch = Literal["x86_64", "aarch64", "ppc64le"]
Vendor = Literal["nvidia", "amd", "intel"]
Precision = Literal["fp32", "fp16", "bf16", "int8"]
Layout = Literal["NCHW", "NHWC", "NCHWc"]
#: Where a route runs: CPU of an arch, or an accelerator vendor.
DeviceKey = Literal["cpu", "nvidia", "amd", "intel"]
_BOTH_MODES: list[Mode] = ["training", "inference"]
#: The catalog's sections, as named in YAML files and ``Catalog`` fields.
Section = Literal["frameworks", "compilers", "libraries", "hardware", "architectures"]


def install_key(device: DeviceKey, arch: Arch | None = None) -> str:
    """The ``Install.base_images`` key for a device: ``cpu-<arch>`` for CPUs, the vendor for accelerators."""
    if device == "cpu":
        if arch is None:
            raise ValueError("a CPU install key needs an arch")
        return f"cpu-{arch}"
    return device


def did_you_mean(name: str, choices: list[str] | tuple[str, ...] | set[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or ``''`` when nothing is close."""
    close = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6)
    if not close:
        lowered = {choice.lower(): choice for choice in choices}
        close = difflib.get_close_matches(name.lower(), sorted(lowered), n=1, cutoff=0.6)
        close = [lowered[c] for c in close]
    return f" (did you mean '{close[0]}'?)" if close else ""


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
    #: Extra package indexes pip searches (besides PyPI) in the build stage, e.g. PyTorch's CPU wheel index.
    pip_index: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    #: Extra shell steps, each a plain command line with no spec-derived text.
    run: list[str] = Field(default_factory=list)
    #: False when no packaged install exists (build from source only, or the project is gone): the component can be
    #: described and cited but not deployed.
    available: bool = True
    #: Per install key (``cpu-x86_64``, ``nvidia``…) steps that differ from the common ones. A field the variant sets
    #: replaces the common field (``pip: []`` on an NGC image that already ships the framework); unset fields inherit.
    variants: dict[str, Install] = Field(default_factory=dict)

    def base_image(self, key: str) -> str | None:
        """The base image for an install key, or None when the catalog has no route there."""
        return self.base_images.get(key)

    def for_key(self, key: str) -> Install:
        """The steps for one install key, with its variant applied (``variants`` and other keys dropped)."""
        variant = self.variants.get(key)
        steps = {name: getattr(self, name) for name in ("apt", "pip", "pip_index", "env", "run")}
        if variant is not None:
            steps.update({name: getattr(variant, name) for name in variant.model_fields_set if name in steps})
        image = self.base_images.get(key)
        return Install(base_images={key: image} if image else {}, available=self.available, **steps)


class Speedup(_Entry):
    """A reported speedup, used as a prior until benchmarks say otherwise."""

    low: float
    high: float | None = None
    baseline: str
    workload: str = ""
    device: DeviceKey | None = None
    mode: Mode | None = None
    #: The precisions the figure applies to (empty: any); a compiler's gain differs per precision.
    precisions: list[Precision] = Field(default_factory=list)
    source: Source
    #: False for claims whose baseline is another device or a best case (e.g. "up to 40× faster than CPU-only"):
    #: recorded and cited, but not multiplied into a route's prediction.
    use_as_prior: bool = True

    @property
    def typical(self) -> float:
        """Geometric mean of the reported range (the single figure the prior uses)."""
        return self.low if self.high is None else (self.low * self.high) ** 0.5


class Tuning(_Entry):
    """The search a tuned compiler runs per model before the job can run (TVM's MetaSchedule): its own route,
    beside the same compiler untuned, paying the search once per job."""

    #: Seconds the search is assumed to take per model before the job runs (the prior; measured rows replace it).
    seconds: float
    #: Trials (candidates measured over all tuning tasks) an image's build stage searches with.
    trials: int = Field(default=64, ge=1)
    #: The catalog id of the same compiler without the search (its measurements stand beside the tuned claim).
    untuned: str
    source: Source


class SpeedPrior(_Entry):
    """A compiler's speed relative to its framework alone where no reported speed-up applies (untuned TVM, far
    slower than a framework): the prior where its measurements do not reach."""

    factor: float = Field(gt=0)
    source: Source


class Component(_Entry):
    """What frameworks, compilers and libraries share."""

    id: str
    name: str
    version: str
    #: Other names users write for it (``keras`` → tensorflow, ``torch`` → pytorch); lookups accept them.
    aliases: list[str] = Field(default_factory=list)
    status: Status = Status.maintained
    successor: str | None = None
    description: str = ""
    modes: list[Mode] = Field(default_factory=lambda: _BOTH_MODES.copy())
    cpu_archs: list[Arch] = Field(default_factory=list)
    accelerators: list[Vendor] = Field(default_factory=list)
    install: Install = Field(default_factory=Install)
    sources: list[Source] = Field(default_factory=list)

    def runs_on(self, device: DeviceKey, arch: Arch | None = None) -> bool:
        """True if the catalog can deploy this component on ``device`` (a CPU of ``arch``, or an accelerator)."""
        if device == "cpu":
            return arch in self.cpu_archs
        return device in self.accelerators

    def supports_mode(self, mode: Mode) -> bool:
        return mode in self.modes


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
    #: ``python -m runtime train --engine`` value that trains an ONNX model in this framework (the runtime's sources
    #: carry the converter), so a training plan may pick it for ``application.model.onnx`` without a command.
    trains_onnx: str | None = None
    #: The precisions that trainer trains at (None: every precision the framework runs).
    trains_onnx_precisions: list[str] | None = None
    #: True if it only runs model files (no model definitions of its own): inference on it needs
    #: ``application.model.onnx``, or an ``application.command`` that brings its own model.
    model_files_only: bool = False
    #: False if it trains in one process only: a training plan on several nodes (or GPUs) would start independent
    #: copies of the same run.
    distributed_training: bool = True
    #: The kernel-unit kinds (``analysis.units.KINDS``) of the models it can build, where it cannot build others
    #: (scikit-learn's MLPClassifier: dense layers, their activations and a softmax); empty: any model.
    expresses: list[str] = Field(default_factory=list)

    @field_validator("expresses")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        from analysis.units import KINDS

        unknown = [k for k in kinds if k not in KINDS]
        if unknown:
            raise ValueError(f"unknown unit kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
        return kinds


class Compiler(Component):
    kind: Literal["compiler"] = "compiler"
    #: The framework × compiler matrix: framework id -> modes it supports with that framework (T/I/N).
    support: dict[str, list[Mode]] = Field(default_factory=dict)
    speedups: list[Speedup] = Field(default_factory=list)
    #: Set on a compiler that searches per model before the job (``tvm-tuned``): the search is the route's setup.
    tuning: Tuning | None = None
    #: Its speed over the framework alone when that is not a reported speed-up (``tvm``, untuned).
    speed_prior: SpeedPrior | None = None
    #: Extra steps when used with a given framework id (e.g. Torch-TensorRT for PyTorch), on top of ``install``.
    install_with: dict[str, Install] = Field(default_factory=dict)

    def modes_with(self, framework_id: str) -> list[Mode]:
        """What this compiler does for models of ``framework_id`` (empty list = N in the matrix)."""
        return list(self.support.get(framework_id, []))


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
    aliases: list[str] = Field(default_factory=list)
    kind: Literal["cpu", "gpu"]
    vendor: str
    arch: Arch | None = None
    cores: int | None = None
    #: Peak FLOP/s (not TFLOP/s) per precision; a precision missing here is not supported by the hardware.
    peak_flops: dict[Precision, float]
    #: Memory bandwidth in bytes/s.
    mem_bandwidth: float
    #: TF32 tensor-core peak in FLOP/s (Ampere and later), which frameworks use for fp32 by default.
    tf32_flops: float | None = None
    memory_bytes: float | None = None
    #: Vector ISA features that matter for library rules (avx512, amx, sve, neon, tensor_cores…).
    features: list[str] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)
    #: Clock the peaks were computed at (base/sustained for CPUs, boost for GPUs), for the record.
    frequency_ghz: float | None = None
    #: Free-text notes: how the peaks were derived, what is uncertain.
    notes: str = ""

    @property
    def device_key(self) -> DeviceKey:
        """``cpu`` for CPUs, else the vendor (``nvidia``…): the key frameworks index precisions and libraries by."""
        if self.kind == "cpu":
            return "cpu"
        if self.vendor not in ("nvidia", "amd", "intel"):
            raise CatalogError(f"hardware {self.id}: accelerator vendor '{self.vendor}' is not one of nvidia/amd/intel")
        return self.vendor  # type: ignore[return-value]

    def peak(self, precision: Precision) -> float | None:
        """Peak FLOP/s (or OP/s for int8) at ``precision``; None when the hardware has no such unit."""
        return self.peak_flops.get(precision)


class Architecture(_Entry):
    """A named model architecture with its published cost."""

    id: str
    name: str
    task: Literal["vision", "nlp", "speech", "recommendation", "other"]
    #: Multiply-accumulates per sample at ``input_shape`` (forward pass), in billions.
    gmacs: float
    #: Parameters in millions.
    params_m: float
    #: Shape of one sample, without the batch dimension (``[3, 224, 224]``; ``[128]`` tokens for NLP models).
    input_shape: list[int]
    #: Bytes of activations written per sample in a forward pass (estimate; drives the memory-bound term).
    activation_mbytes: float | None = None
    #: Graph nodes per op class of one forward pass (``conv``, ``gemm``, ``elementwise``…), where a graph of the
    #: architecture was analysed: per-node costs (kernel launches) need them; None leaves one node per model.
    ops_by_class: dict[str, int] | None = None
    aliases: list[str] = Field(default_factory=list)
    sources: list[Source] = Field(default_factory=list)


def _normalised(name: str) -> str:
    return name.lower().replace("-", "").replace("_", "").replace(" ", "")


class Catalog(_Entry):
    """The whole catalog, keyed by id.

    Look entries up with ``get_framework`` / ``get_compiler`` / ``get_library`` / ``get_hardware`` /
    ``get_architecture``: ids and aliases match ignoring case, ``-``, ``_`` and spaces; an unknown id raises
    ``CatalogError`` with a "did you mean". ``get_hardware("local")`` detects the running machine (see
    ``optimiser.catalog.local``).
    """

    frameworks: dict[str, Framework]
    compilers: dict[str, Compiler]
    libraries: dict[str, Library]
    hardware: dict[str, Hardware]
    architectures: dict[str, Architecture]

    def _lookup(self, section: Section, singular: str, entry_id: str) -> object:
        entries: dict[str, object] = getattr(self, section)
        if entry_id in entries:
            return entries[entry_id]
        wanted = _normalised(entry_id)
        for entry in entries.values():
            names = [getattr(entry, "id", ""), *getattr(entry, "aliases", [])]
            if wanted in map(_normalised, names):
                return entry
        choices = sorted(entries)
        raise CatalogError(
            f"unknown {singular} '{entry_id}'{did_you_mean(entry_id, choices)}; known: {', '.join(choices)}"
        )

    def get_framework(self, framework_id: str) -> Framework:
        return self._lookup("frameworks", "framework", framework_id)  # type: ignore[return-value]

    def get_compiler(self, compiler_id: str) -> Compiler:
        return self._lookup("compilers", "compiler", compiler_id)  # type: ignore[return-value]

    def get_library(self, library_id: str) -> Library:
        return self._lookup("libraries", "library", library_id)  # type: ignore[return-value]

    def get_hardware(self, hardware_id: str) -> Hardware:
        """A hardware preset; ``local`` is detected from the running machine (cached per process)."""
        if hardware_id == "local" and "local" not in self.hardware:
            from optimiser.catalog.local import detect_local_hardware

            return detect_local_hardware()
        return self._lookup("hardware", "hardware preset", hardware_id)  # type: ignore[return-value]

    def get_architecture(self, name: str) -> Architecture:
        """An architecture by id or alias, ignoring case, ``-``, ``_`` and spaces (``ResNet-50`` finds ``resnet50``)."""
        return self._lookup("architectures", "architecture", name)  # type: ignore[return-value]

    def libraries_for(self, framework: Framework, device: DeviceKey, arch: Arch | None = None) -> list[Library]:
        """The framework's libraries for ``device`` that can be deployed there (hardware rules applied)."""
        found = [self.libraries[i] for i in framework.libraries.get(device, []) if i in self.libraries]
        return [library for library in found if library.runs_on(device, arch)]

    def reference_problems(self) -> list[str]:
        """Cross-references that do not resolve (one line each); empty when the catalog is consistent."""
        problems: list[str] = []
        for section in ("frameworks", "compilers", "libraries"):
            entries: dict[str, Component] = getattr(self, section)
            for entry in entries.values():
                if entry.successor is not None and entry.successor not in entries:
                    problems.append(
                        f"{section}.{entry.id}.successor: unknown {section[:-1]} '{entry.successor}'"
                        f"{did_you_mean(entry.successor, list(entries))}"
                    )
        for framework in self.frameworks.values():
            for device, library_ids in framework.libraries.items():
                for library_id in library_ids:
                    if library_id not in self.libraries:
                        problems.append(
                            f"frameworks.{framework.id}.libraries.{device}: unknown library '{library_id}'"
                            f"{did_you_mean(library_id, list(self.libraries))}"
                        )
        for compiler in self.compilers.values():
            untuned = compiler.tuning.untuned if compiler.tuning is not None else None
            if untuned is not None and untuned not in self.compilers:
                problems.append(
                    f"compilers.{compiler.id}.tuning.untuned: unknown compiler '{untuned}'"
                    f"{did_you_mean(untuned, list(self.compilers))}"
                )
            for framework_id in compiler.support:
                if framework_id not in self.frameworks:
                    problems.append(
                        f"compilers.{compiler.id}.support: unknown framework '{framework_id}'"
                        f"{did_you_mean(framework_id, list(self.frameworks))}"
                    )
        for section in ("frameworks", "compilers", "libraries", "hardware", "architectures"):
            seen_names: dict[str, str] = {}
            named: dict[str, Component | Hardware | Architecture] = getattr(self, section)
            for entry_id, named_entry in named.items():
                for name in [entry_id, *named_entry.aliases]:
                    key = _normalised(name)
                    if key in seen_names and seen_names[key] != entry_id:
                        problems.append(f"{section}.{entry_id}.aliases: '{name}' also names '{seen_names[key]}'")
                    seen_names.setdefault(key, entry_id)
        for section in ("frameworks", "compilers", "libraries", "hardware", "architectures"):
            entries_by_key: dict[str, _Entry] = getattr(self, section)
            for key, keyed in entries_by_key.items():
                if getattr(keyed, "id", key) != key:
                    problems.append(f"{section}.{key}: keyed as '{key}' but its id is '{getattr(keyed, 'id', '')}'")
        if "local" in self.hardware:
            problems.append("hardware.local: 'local' is reserved for the detected machine")
        return problems
