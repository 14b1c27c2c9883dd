"""Layout priors: how much of the device's reachable speed a memory layout keeps.

Sources: NVIDIA's Deep Learning Performance Guide (tensor-core kernels want NHWC; NCHW inputs pay transposes) and
onnxruntime's measured gain from its blocked NCHWc layout on CPUs (1.3× on ResNets, 1.9× on MobileNetV2; see
shared/notes/performance-anchors.md). Refined by benchmark data where it exists.
"""

from __future__ import annotations

_GPU_REDUCED = {"NHWC": 1.0, "NCHW": 0.8, "NCHWc": 0.8}
_GPU_FP32 = {"NHWC": 1.0, "NCHW": 0.97, "NCHWc": 0.9}
_CPU = {"NCHWc": 1.0, "NHWC": 0.85, "NCHW": 0.77}


def layout_factor(device_kind: str, layout: str, precision: str) -> float:
    """Multiplier (≤ 1) on achieved FLOP/s for running ``layout`` at ``precision`` on a ``device_kind``."""
    if device_kind != "gpu":
        return _CPU.get(layout, 0.8)
    table = _GPU_REDUCED if precision in ("fp16", "bf16", "int8") else _GPU_FP32
    return table.get(layout, 0.8)
