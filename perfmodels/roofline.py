"""The analytic prior: a roofline over the workload's FLOPs and bytes, scaled by catalog priors.

time(step) = max(FLOPs / (peak[precision] × efficiency × layout × tensor-core share) / compiler_speedup,
                 bytes / bandwidth / min(compiler_speedup, 1.07)) / devices
             + all-reduce time (training on more than one device)

On a GPU, tensor-core precisions reach a smaller share of their peak (``priors.TENSOR_CORE_EFFICIENCY``); at fp32 the
share of FLOPs the framework runs as TF32 (``Route.tf32_share``) uses the TF32 tensor-core peak where the device has
one. Compilers speed up the compute-bound part; the memory-bound part gains little (``priors``).

Training costs three forward passes (forward, input-gradient, weight-gradient) plus reading and writing parameters,
gradients and optimiser state once per step.
"""

from __future__ import annotations

import math

from perfmodels.features import BYTES_PER_ELEMENT, Device, Route, Workload
from perfmodels.prediction import Prediction
from perfmodels.priors import MEMORY_BOUND_COMPILER_GAIN, TENSOR_CORE_EFFICIENCY, TENSOR_CORE_PRECISIONS

#: Training FLOPs relative to one forward pass.
TRAINING_FLOP_FACTOR = 3.0
#: Bytes touched per parameter per training step (weights, gradients, two Adam moments; read + write), at fp32.
TRAINING_BYTES_PER_PARAM = 4 * 4 * 2
#: Share of ideal data-parallel speed-up kept per doubling of devices (communication overlap is imperfect).
SCALING_EFFICIENCY_PER_DOUBLING = 0.95
#: Fixed per-step overhead in seconds (launches, Python, synchronisation).
STEP_OVERHEAD_S = {"cpu": 2e-4, "gpu": 1e-3}


class RooflinePrior:
    """Predicts from first principles; the fallback whenever no fitted model covers a route."""

    name = "roofline-prior"

    def predict(self, workload: Workload, route: Route, device: Device) -> Prediction:
        batch = workload.batch_size
        devices = max(device.count, 1)
        flop_factor = TRAINING_FLOP_FACTOR if workload.mode == "training" else 1.0
        flops = workload.flops_per_sample * batch * flop_factor
        scale = BYTES_PER_ELEMENT.get(route.precision, 4) / 4
        act_bytes = workload.activation_bytes_per_sample * batch * scale * (2 * flop_factor)
        param_bytes = workload.params * 4 * scale
        if workload.mode == "training":
            param_bytes = workload.params * TRAINING_BYTES_PER_PARAM
        compute_s, achieved = _compute_seconds(flops, route, device)
        memory_s = (act_bytes + param_bytes * devices) / device.mem_bandwidth
        compute_s /= route.compiler_speedup
        memory_s /= min(route.compiler_speedup, MEMORY_BOUND_COMPILER_GAIN)
        single = max(compute_s, memory_s)
        parallel_eff = SCALING_EFFICIENCY_PER_DOUBLING ** max(0.0, _log2(devices))
        step = single / (devices * parallel_eff) + STEP_OVERHEAD_S[device.kind]
        comm_s = 0.0
        if workload.mode == "training" and devices > 1:
            # Ring all-reduce moves 2(n-1)/n of the gradients; across nodes the interconnect is the bottleneck.
            grad_bytes = workload.params * 4 * scale
            link = device.interconnect if device.nodes > 1 else device.mem_bandwidth
            comm_s = 2 * (devices - 1) / devices * grad_bytes / link
        step += comm_s
        steps = None if workload.total_samples is None else workload.total_samples / batch
        return Prediction(
            step_seconds=step,
            samples_per_second=batch / step,
            total_seconds=None if steps is None else steps * step,
            bound="compute" if compute_s >= memory_s else "memory",
            basis=self.name,
            detail={
                "compute_s": compute_s,
                "memory_s": memory_s,
                "communication_s": comm_s,
                "achieved_flops": achieved,
                "devices": float(devices),
            },
        )


def _compute_seconds(flops: float, route: Route, device: Device) -> tuple[float, float]:
    """Seconds for ``flops`` at the route's precision on one device, and the FLOP/s achieved."""
    base = route.efficiency * route.layout_factor
    fp32 = device.peak_flops["fp32"] * base
    if device.kind != "gpu":
        achieved = (device.peak_flops.get(route.precision) or device.peak_flops["fp32"]) * base
        return flops / achieved, achieved
    if route.precision in TENSOR_CORE_PRECISIONS and route.precision in device.peak_flops:
        achieved = device.peak_flops[route.precision] * base * TENSOR_CORE_EFFICIENCY
        return flops / achieved, achieved
    tf32 = device.peak_flops.get("tf32", 0.0) * base * TENSOR_CORE_EFFICIENCY
    share = route.tf32_share if route.precision == "fp32" and tf32 > 0 else 0.0
    seconds = flops * share / tf32 if share else 0.0
    seconds += flops * (1 - share) / fp32
    return seconds, flops / seconds if seconds > 0 else fp32


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0
