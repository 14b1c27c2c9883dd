"""The analytic prior: a roofline over the workload's FLOPs and bytes, scaled by catalog priors.

time(step) = max(FLOPs / (peak[precision] × efficiency × layout), bytes / bandwidth) / compiler_speedup / devices
             + all-reduce time (training on more than one device)

Training costs three forward passes (forward, input-gradient, weight-gradient) plus reading and writing parameters,
gradients and optimiser state once per step.
"""

from __future__ import annotations

import math

from perfmodels.features import BYTES_PER_ELEMENT, Device, Route, Workload
from perfmodels.prediction import Prediction

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
        peak = device.peak_flops.get(route.precision) or device.peak_flops["fp32"]
        achieved = peak * route.efficiency * route.layout_factor
        compute_s = flops / achieved
        memory_s = (act_bytes + param_bytes * devices) / device.mem_bandwidth
        single = max(compute_s, memory_s) / route.compiler_speedup
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
                "compute_s": compute_s / route.compiler_speedup,
                "memory_s": memory_s / route.compiler_speedup,
                "communication_s": comm_s,
                "achieved_flops": achieved,
                "devices": float(devices),
            },
        )


def _log2(x: float) -> float:
    return math.log2(x) if x > 0 else 0.0
