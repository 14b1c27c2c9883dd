"""Window geometry (Conv, ConvTranspose, the pools) checked before any kernel loops over it.

A stride, pad, dilation or kernel size is a 64-bit attribute; the compiled kernels multiply them with sizes and
positions, so a value near ``INT64_MAX`` overflows into wild reads, and a huge window turns into a loop that runs
for hours. Every value is held to ``MAX_WINDOW_VALUE`` (so products of two stay inside int64), sizes must be
consistent with the kernel and weight shapes, and a pool's work (output elements times taps) is capped.

Each function returns a problem (one line, without the node) or None; callers raise their own error class with
the node's label: ``ModelCheckError`` at compile time, ``KernelError`` at run time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Largest stride, dilation, pad or kernel size accepted (int32's maximum: products of two fit in int64).
MAX_WINDOW_VALUE = 2**31 - 1
#: Most window taps a pool may visit in one run (output elements times kernel taps); ~10 s of compiled work.
MAX_POOL_WORK = 2**34
#: Most multiply-adds one convolution may take (ResNet-50's largest is ~2**28; this is hours on a small CPU).
MAX_CONV_MACS = 2**42
#: Most output elements one convolution may produce (the default max_alloc_bytes of float32 values).
MAX_CONV_OUTPUT_ELEMENTS = 2**31
AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")
#: ONNX ops whose attributes describe a sliding window (the ``Conv``-like ones also have a weight input 1).
CONV_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv"})
POOL_OPS = frozenset({"MaxPool", "AveragePool", "LpPool"})


def _ints(attrs: Mapping[str, Any], name: str) -> list[int] | None:
    value = attrs.get(name)
    if value is None:
        return None
    return [int(v) for v in value]


def window_attr_problem(
    op_type: str, attrs: Mapping[str, Any], nd: int | None, weight_kernel: Sequence[int] | None = None
) -> str | None:
    """What is wrong with the window attributes of ``op_type`` for ``nd`` spatial dims (None when unknown), or
    None. ``weight_kernel`` is the weight's spatial shape where it is known (Conv-like ops)."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode("utf-8", "replace")
    if auto_pad not in AUTO_PADS:
        return f"auto_pad {str(auto_pad)[:40]!r} is not one of {', '.join(AUTO_PADS)}"
    kernel = _ints(attrs, "kernel_shape")
    if op_type in POOL_OPS and kernel is None:
        return "kernel_shape is required"
    if nd is None:
        nd = len(kernel) if kernel is not None else len(weight_kernel) if weight_kernel is not None else None
    if nd is None:
        return None
    pool = op_type in POOL_OPS
    if kernel is not None:
        if len(kernel) != nd:
            return f"kernel_shape {kernel} has {len(kernel)} dims, the input has {nd} spatial dims"
        if any(not 1 <= k <= MAX_WINDOW_VALUE for k in kernel):
            return f"kernel_shape {kernel} must hold sizes from 1 to {MAX_WINDOW_VALUE}"
        if weight_kernel is not None and list(weight_kernel) != kernel:
            return f"kernel_shape {kernel} does not match the weight's spatial shape {list(weight_kernel)}"
    for name, low in (("strides", 1), ("dilations", 1)):
        values = _ints(attrs, name)
        if values is None:
            continue
        if len(values) != nd:
            return f"{name} {values} has {len(values)} values for {nd} spatial dims"
        if any(not low <= v <= MAX_WINDOW_VALUE for v in values):
            return f"{name} {values} must hold values from {low} to {MAX_WINDOW_VALUE}"
    pads = _ints(attrs, "pads")
    if pads is not None:
        if len(pads) != 2 * nd:
            return f"pads {pads} has {len(pads)} values for {nd} spatial dims (want {2 * nd})"
        low = 0 if pool else -MAX_WINDOW_VALUE
        if any(not low <= p <= MAX_WINDOW_VALUE for p in pads):
            return f"pads {pads} must hold values from {low} to {MAX_WINDOW_VALUE}"
    for name in ("output_padding", "output_shape"):
        values = _ints(attrs, name)
        if values is not None and any(not 0 <= v <= MAX_WINDOW_VALUE for v in values):
            return f"{name} {values} must hold values from 0 to {MAX_WINDOW_VALUE}"
    group = attrs.get("group")
    if group is not None and not 1 <= int(group) <= MAX_WINDOW_VALUE:
        return f"group {int(group)} must be from 1 to {MAX_WINDOW_VALUE}"
    return None


def window_output_problem(
    in_spatial: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
) -> str | None:
    """What is wrong with a window that slides over ``in_spatial`` (output dims below 1), or None."""
    nd = len(kernel)
    for i in range(nd):
        span = (kernel[i] - 1) * dilations[i] + 1
        padded = in_spatial[i] + pads[i] + pads[i + nd]
        if span > padded:
            return (
                f"the window ({span} wide in spatial dim {i}, dilations included) is larger than the padded input "
                f"({padded})"
            )
    return None


def pool_work_problem(batch_channels: int, out_spatial: Sequence[int], kernel: Sequence[int]) -> str | None:
    """A pool that would visit more than ``MAX_POOL_WORK`` taps, or None."""
    work = batch_channels
    for d in (*out_spatial, *kernel):
        work *= max(int(d), 0)
    if work > MAX_POOL_WORK:
        return f"the pool would visit {work} window taps, above the limit of {MAX_POOL_WORK}"
    return None


def conv_work_problem(
    batch: int, out_channels: int, in_channels_per_group: int, out_spatial: Sequence[int], kernel: Sequence[int]
) -> str | None:
    """A convolution whose output or multiply-adds exceed the caps (huge pads or kernels), or None."""
    elements = batch * out_channels
    for d in out_spatial:
        elements *= max(int(d), 0)
    if elements > MAX_CONV_OUTPUT_ELEMENTS:
        return f"the output would have {elements} elements, above the limit of {MAX_CONV_OUTPUT_ELEMENTS}"
    macs = elements * in_channels_per_group
    for k in kernel:
        macs *= max(int(k), 0)
    if macs > MAX_CONV_MACS:
        return f"the convolution would take {macs} multiply-adds, above the limit of {MAX_CONV_MACS}"
    return None
