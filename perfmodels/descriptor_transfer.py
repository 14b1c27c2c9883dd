"""Carry a shipped host's fitted prediction to a CPU that nothing measured, by hardware descriptors alone.

A catalog preset (``xeon-8380``, ``epyc-9654``, …) or a ``local`` host planned without its quick probe or a
calibration has no measurement of its own. The roofline prior alone predicts there, and it ties routes that run at
different speeds: it knows each route only by a catalog efficiency, and every small model by a fixed overhead.

Here the shipped host's fitted prediction of the route (measured, so routes keep the order and the gaps they were
measured at) is carried over by the prior's own ratio between the two machines (Paleo's idea: peak FLOP/s and
bandwidth set the scale)::

    step(device) = fitted step on the source × prior(device) / prior(source)

The source stands as the machine its rows measured: its GEMM peak and copy bandwidth at the fit's thread count
(``GroupFit.peak_flops``, ``bandwidth``). The prior's ratio moves compute-bound work by the peaks, memory-bound work
by the bandwidths, and leaves work that is mostly per-step overhead where it was. At another precision the source's
peak is its fp32 GEMM peak in the proportion its ISA flags give (AVX512_BF16 2x, AMX 16x): what the device's ISA
adds beyond the source's (AMX where the source had none) is carried as the peaks say, which no measurement checks.

The error of such a transfer is not measured on the device, so the interval widens the source's held-out band by
``DESCRIPTOR_BAND``, the spread this transfer showed on the one CPU the database never saw that was scored (AMD EPYC,
2 vCPU, 2026-11-28; docs/decisions.md, 2026-11-29), and the tie rule's model error by ``DESCRIPTOR_RMSPE``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from perfmodels.features import Device
from perfmodels.fit import GroupFit
from perfmodels.prediction import Prediction, widened
from perfmodels.targets import flags_arch, precision_rates

#: (p10, p90) of measured over carried step times: p10 as on the one unseen CPU scored (the AMD EPYC pair of
#: 2026-11-28, 160 ranked measured routes: 0.49, every route faster there than its peaks say), p90 its mirror (1 /
#: 0.49): one pair cannot show how far a slower CPU's routes lie above (docs/decisions.md, 2026-11-29).
DESCRIPTOR_BAND = (0.49, 2.04)
#: The RMSPE of the same predictions (68.8%; a second machine of that CPU, 69.0%): what the tie rule takes as this
#: transfer's own error.
DESCRIPTOR_RMSPE = 0.69


def descriptor_sources(groups: Sequence[GroupFit], arch: str) -> list[str]:
    """The measured targets a device of instruction set ``arch`` may be carried from, most rows (in usable groups)
    first: those whose rows say that instruction set (none where ``arch`` is unknown: "")."""
    rows: dict[str, int] = {}
    for g in groups:
        if arch and g.usable and flags_arch(g.cpu_flags) == arch:
            rows[g.target] = rows.get(g.target, 0) + g.rows
    return sorted(rows, key=lambda t: (-rows[t], t))


def source_device(group: GroupFit, device: Device) -> Device:
    """The source as the machine its rows measured: one device with the group's GEMM peak (fp32) and bandwidth, at
    other precisions in the proportions its own ISA flags give (``targets.precision_rates``), else ``device``'s."""
    arch = flags_arch(group.cpu_flags)
    own = precision_rates(arch, group.cpu_flags, 1.0) if arch else None
    fp32 = device.peak_flops.get("fp32") or 0.0
    proportions = own or {p: v / fp32 for p, v in device.peak_flops.items() if fp32 > 0}
    peaks = {p: group.peak_flops * v for p, v in proportions.items()}
    peaks["fp32"] = group.peak_flops
    return Device(group.target, "cpu", peaks, group.bandwidth, arch=device.arch)


def carried(fitted: Prediction, here: Prediction, there: Prediction, device: Device, group: GroupFit) -> Prediction:
    """``fitted`` (the prediction on ``group``'s target, ``there`` its prior) carried to ``device`` (``here`` its
    prior)."""
    factor = here.step_seconds / there.step_seconds
    step = fitted.step_seconds * factor
    low, high = widened(step, [fitted.band or (1.0, 1.0), DESCRIPTOR_BAND])
    rmspe = math.hypot(float(fitted.detail.get("heldout_rmspe", 0.0)), DESCRIPTOR_RMSPE)
    peak = device.peak_flops.get("fp32", 0.0)
    basis = (
        f"transferred:{group.target} via descriptors (x{factor:.3g}: fp32 peak {peak / 1e9:.0f} GFLOP/s and "
        f"{device.mem_bandwidth / 1e9:.0f} GB/s here, over those measured there at {group.threads} thread(s); "
        f"nothing measured here) of {fitted.basis}"
    )
    if device.count > 1:
        basis += f"; {device.count} devices scaled as the prior scales them"
    detail = {
        **fitted.detail,
        "prior_step_s": here.step_seconds,
        "descriptor_factor": factor,
        "source_step_s": fitted.step_seconds,
        "heldout_rmspe": rmspe,
        "p10_step_s": low,
        "p90_step_s": high,
    }
    return replace(fitted.scaled(factor, basis, detail), bound=here.bound)
