"""Priors the roofline applies where nothing is measured, each with the source it rests on.

* Layouts: NVIDIA's Deep Learning Performance Guide (tensor-core kernels want NHWC; NCHW inputs pay transposes) and
  onnxruntime's measured gain from its blocked NCHWc layout on CPUs (1.3× on ResNets, 1.9× on MobileNetV2; measured
  here, shared/notes/performance-anchors.md). A layout only changes convolutions: a model without them gets 1.0.
* Tensor cores: the data sheets' tensor-core peaks (fp16/bf16/int8, TF32 on Ampere and later) are reached far less
  often than the CUDA-core fp32 peak; NVIDIA's DeepLearningExamples report ResNet-50 mixed precision at about 3× the
  fp32 throughput on a V100 whose fp16 tensor peak is 8× its fp32 peak, so tensor-core FLOPs count at 3/8.
* TF32: frameworks that run fp32 convolutions (and matmuls) on TF32 tensor cores by default, per op class.
* Compilers: a compiler's reported speed-up applies to the compute-bound part, and at most up to a kernel ceiling of
  0.85 of peak (the best kernel measured here, OpenBLAS's GEMM, reaches 0.84 of a core's peak; onnxruntime already
  runs convnets at that rate, so a compiler gains little over it); the memory-bound part gains at most 7%
  (onnxruntime's fusions alone, measured here; "on the BERT-like encoder, optimisation buys almost nothing").
"""

from __future__ import annotations

_GPU_REDUCED = {"NHWC": 1.0, "NCHW": 0.8, "NCHWc": 0.8}
_GPU_FP32 = {"NHWC": 1.0, "NCHW": 0.97, "NCHWc": 0.9}
_CPU = {"NCHWc": 1.0, "NHWC": 0.85, "NCHW": 0.77}
LAYOUT_SOURCE = (
    "NVIDIA Deep Learning Performance Guide (NHWC for tensor cores); onnxruntime NCHWc 1.3-1.9x measured here"
)

#: Share of a tensor-core peak reached, relative to the CUDA-core fp32 efficiency (about 3x end to end for 8x peak).
TENSOR_CORE_EFFICIENCY = 3.0 / 8.0
TENSOR_CORE_SOURCE = (
    "NVIDIA DeepLearningExamples ResNet-50 v1.5: mixed precision about 3x fp32 on V100 (8x the peak): seed table"
)
#: Precisions a GPU runs on tensor cores (fp32 may run as TF32, see ``TF32_BY_DEFAULT``).
TENSOR_CORE_PRECISIONS = ("fp16", "bf16", "int8", "tf32")

#: Op classes a framework runs on TF32 tensor cores at fp32 by default (on hardware with TF32).
TF32_BY_DEFAULT: dict[str, tuple[str, ...]] = {
    # tf.config.experimental.enable_tensor_float_32_execution: on by default since TensorFlow 2.4
    "tensorflow": ("conv", "gemm"),
    # torch.backends.cudnn.allow_tf32 defaults to True; torch.backends.cuda.matmul.allow_tf32 to False since 1.12
    "pytorch": ("conv",),
    # the CUDA execution provider's use_tf32 option defaults to 1
    "onnxruntime": ("conv", "gemm"),
}
TF32_SOURCE = (
    "framework defaults: TensorFlow >= 2.4 TF32 on; PyTorch cuDNN convs TF32, matmuls fp32 (>= 1.12); "
    "onnxruntime CUDA EP use_tf32=1"
)

#: Most a compiler gains on the memory-bound part of a step (fusion saves some traffic, no more).
MEMORY_BOUND_COMPILER_GAIN = 1.07
#: The most of a peak (after the layout and tensor-core factors) any compiled route is assumed to reach.
KERNEL_CEILING = 0.85
COMPILER_SOURCE = (
    "compute part only, up to 0.85 of peak (OpenBLAS GEMM reaches 0.84 here); memory-bound part at most 1.07x "
    "(onnxruntime fusions, measured here)"
)


def layout_factor(device_kind: str, layout: str, precision: str, has_convolutions: bool = True) -> float:
    """Multiplier (≤ 1) on achieved FLOP/s for running ``layout`` at ``precision`` on a ``device_kind``
    (1.0 for a model without convolutions: the layout changes nothing there)."""
    if not has_convolutions:
        return 1.0
    if device_kind != "gpu":
        return _CPU.get(layout, 0.8)
    table = _GPU_REDUCED if precision in ("fp16", "bf16", "int8") else _GPU_FP32
    return table.get(layout, 0.8)


def tf32_share(framework: str, flops_by_class: dict[str, float]) -> float:
    """Share of the model's FLOPs ``framework`` runs on TF32 tensor cores at fp32 by default."""
    classes = TF32_BY_DEFAULT.get(framework, ())
    total = sum(flops_by_class.values())
    if not classes or total <= 0:
        return 0.0
    return sum(flops_by_class.get(c, 0.0) for c in classes) / total


def capped_compiler_speedup(reported: float, route_efficiency: float) -> float:
    """The compute speed-up a compiler's reported figure stands for on a route that reaches ``route_efficiency`` of
    peak without it: at most what lifts the route to ``KERNEL_CEILING``."""
    if reported <= 1.0:
        return reported
    return max(1.0, min(reported, KERNEL_CEILING / max(route_efficiency, 1e-6)))
