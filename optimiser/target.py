"""Turn the spec's target into concrete hardware: the preset (or this machine), device counts and links."""

from __future__ import annotations

import platform
from dataclasses import dataclass

from optimiser.catalog.models import Catalog, DeviceKey, Hardware
from optimiser.errors import SpecError
from optimiser.spec import Target
from optimiser.suggest import unknown_id_message
from perfmodels import Device

#: Default node-to-node bandwidth (Gbit/s) when the spec does not say: InfiniBand HDR-class vs a cloud VPC.
DEFAULT_INTERCONNECT_GBPS = {"hpc": 100.0, "cloud": 25.0}


@dataclass(frozen=True)
class ResolvedTarget:
    hardware: Hardware
    device: Device
    #: "cpu" or the accelerator vendor: the key for framework/library/compiler support.
    device_key: DeviceKey
    arch: str
    #: Key into a component's ``install.base_images``: ``cpu-<arch>`` or the vendor.
    image_key: str
    notes: tuple[str, ...] = ()


def resolve_target(target: Target, catalog: Catalog) -> ResolvedTarget:
    """Pick the hardware preset the spec names (``local`` detects this machine) and scale it to the spec."""
    gbps = target.interconnect_gbps or DEFAULT_INTERCONNECT_GBPS[target.platform]
    gpu = target.gpu
    notes: list[str] = []
    if gpu is not None:
        if gpu.model is None:
            gpus = _gpu_ids(catalog, gpu.vendor)
            raise SpecError(f"target.accelerator.model: required for a {gpu.vendor} target (known: {', '.join(gpus)})")
        if gpu.model == "local":
            raise SpecError(
                "target.accelerator.model: 'local' detects this machine's CPU only and never assumes an accelerator; "
                f"name a {gpu.vendor} GPU preset (known: {', '.join(_gpu_ids(catalog, gpu.vendor))})"
            )
        hw = _preset(catalog, gpu.model, "target.accelerator.model", _gpu_ids(catalog, gpu.vendor))
        if hw.kind != "gpu" or hw.vendor != gpu.vendor:
            raise SpecError(f"target.accelerator.model: {hw.id} is a {hw.vendor} {hw.kind}, not a {gpu.vendor} GPU")
        device = gpu_device(hw, per_node=gpu.count, nodes=target.nodes, interconnect=gbps * 1e9 / 8)
        vendor: DeviceKey = gpu.vendor  # type: ignore[assignment]  # "none" was ruled out by target.gpu
        return ResolvedTarget(hw, device, vendor, target.cpu.arch, vendor, tuple(notes))
    hw = _cpu_hardware(target, catalog, notes)
    scale = 1.0
    if target.cpu.cores and hw.cores:
        scale = target.cpu.cores / hw.cores
        if scale != 1.0:
            notes.append(f"{hw.id} peaks scaled from {hw.cores} to {target.cpu.cores} cores")
    device = Device(
        name=hw.id, kind="cpu", peak_flops={k: v * scale for k, v in hw.peak_flops.items()},
        mem_bandwidth=hw.mem_bandwidth * max(1.0, round(scale)), per_node=1, nodes=target.nodes,
        interconnect=gbps * 1e9 / 8, arch=target.cpu.arch,
    )
    arch = target.cpu.arch
    return ResolvedTarget(hw, device, "cpu", arch, f"cpu-{arch}", tuple(notes))


def gpu_device(hw: Hardware, per_node: int = 1, nodes: int = 1, interconnect: float = 12.5e9) -> Device:
    """A GPU preset as a performance-model device: its data-sheet peaks, TF32 among them where it has it."""
    peaks = {str(k): v for k, v in hw.peak_flops.items()}
    if hw.tf32_flops:  # fp32 layers run on TF32 tensor cores by default in most frameworks (perfmodels.priors)
        peaks["tf32"] = hw.tf32_flops
    return Device(
        name=hw.id, kind="gpu", peak_flops=peaks, mem_bandwidth=hw.mem_bandwidth, per_node=per_node, nodes=nodes,
        interconnect=interconnect,
    )


def gpu_presets(catalog: Catalog) -> dict[str, Device]:
    """Every GPU preset by id and by alias: what names the GPUs measured rows were taken on
    (``perfmodels.gpu_fit.match_source``)."""
    out: dict[str, Device] = {}
    for hw in catalog.hardware.values():
        if hw.kind == "gpu":
            device = gpu_device(hw)
            for key in (hw.id, *hw.aliases):
                out[key] = device
    return out


def _cpu_hardware(target: Target, catalog: Catalog, notes: list[str]) -> Hardware:
    name = target.cpu.model
    if name is None:
        if platform.machine() != target.cpu.arch:
            presets = [h.id for h in catalog.hardware.values() if h.kind == "cpu" and h.arch == target.cpu.arch]
            raise SpecError(f"target.cpu.model: required for a {target.cpu.arch} target (known: {', '.join(presets)})")
        name = "local"
        notes.append("target.cpu.model not given: using this machine ('local')")
    if name == "local":
        from optimiser.catalog.local import detect_local_hardware

        hw = detect_local_hardware()
    else:
        hw = _preset(catalog, name, "target.cpu.model")
    if hw.kind != "cpu":
        raise SpecError(f"target.cpu.model: {hw.id} is a {hw.kind}, not a CPU")
    if hw.arch != target.cpu.arch:
        raise SpecError(f"target.cpu.model: {hw.id} is {hw.arch} but target.cpu.arch is {target.cpu.arch}")
    return hw


def _gpu_ids(catalog: Catalog, vendor: str) -> list[str]:
    return [h.id for h in catalog.hardware.values() if h.kind == "gpu" and h.vendor == vendor]


def _preset(catalog: Catalog, name: str, field: str, known: list[str] | None = None) -> Hardware:
    try:
        return catalog.hardware[name]
    except KeyError:
        choices = known if known is not None else [*catalog.hardware, "local"]
        raise SpecError(unknown_id_message(field, name, choices)) from None
