"""Plain-number descriptions of a workload and a route: what every performance model sees.

``perfmodels`` knows nothing of the optimiser's catalog or spec; the planner turns those into these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from analysis.units import Unit

Mode = Literal["training", "inference"]

BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}


@dataclass(frozen=True)
class Workload:
    """Cost of one sample through the model, and how many samples a job runs."""

    #: Forward-pass FLOPs per sample.
    flops_per_sample: float
    #: Bytes of activations written per sample in the forward pass at fp32.
    activation_bytes_per_sample: float
    #: Parameter count.
    params: float
    mode: Mode
    batch_size: int
    #: Samples processed in the whole job (epochs × samples); None when the spec gives no data size.
    total_samples: float | None = None
    #: FLOPs per sample by op class (conv, gemm, elementwise, norm, pool, other), when known.
    flops_by_class: dict[str, float] = field(default_factory=dict)
    #: Number of graph nodes per op class (drives per-node overheads), when known.
    ops_by_class: dict[str, int] = field(default_factory=dict)
    #: Model name (architecture id or file stem): the key for fitted corrections.
    model_name: str = ""
    #: The model's kernel units for one sample (``analysis.units``), when it has a graph.
    units: tuple[Unit, ...] = ()


@dataclass(frozen=True)
class Device:
    """One device of the target (a CPU socket set or one accelerator) with its peaks."""

    name: str
    kind: Literal["cpu", "gpu"]
    #: Peak FLOP/s per precision.
    peak_flops: dict[str, float]
    #: Memory bandwidth in bytes/s.
    mem_bandwidth: float
    #: Devices per node and nodes.
    per_node: int = 1
    nodes: int = 1
    #: Node-to-node bandwidth in bytes/s (for gradient all-reduce).
    interconnect: float = 12.5e9
    #: A CPU's instruction set (``x86_64``, ``aarch64``; "" when unknown).
    arch: str = ""

    @property
    def count(self) -> int:
        return self.per_node * self.nodes


@dataclass(frozen=True)
class Route:
    """A candidate's choices with the prior factors the catalog gives for them."""

    framework: str
    compiler: str
    libraries: tuple[str, ...]
    precision: str
    layout: str
    #: Fraction of peak the framework + libraries reach on this device kind (catalog prior).
    efficiency: float
    #: Speed-up the compiler is reported to give over the framework alone (1.0 for none).
    compiler_speedup: float = 1.0
    #: Multiplier for the layout on this device (1.0 = the device's preferred layout).
    layout_factor: float = 1.0
    #: One-off seconds before the job can run (a compiler's tuning search); part of the time to solution.
    setup_seconds: float = 0.0
    #: The trial budget of a tuned compiler's search (0 for a compiler that does not search).
    tuning_trials: int = 0
    #: Share of the FLOPs run on TF32 tensor cores at fp32 (the framework's default on hardware with TF32).
    tf32_share: float = 0.0

    @property
    def compiler_label(self) -> str:
        """The compiler with its search budget where it searches: ``tvm-tuned (64 trials)``."""
        return f"{self.compiler} ({self.tuning_trials} trials)" if self.tuning_trials else self.compiler

    @property
    def key(self) -> str:
        libs = "+".join(self.libraries) or "-"
        return f"{self.framework}/{self.compiler}/{libs}/{self.precision}/{self.layout}"
