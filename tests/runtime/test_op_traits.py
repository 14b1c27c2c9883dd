"""The op tables are derived from kernel traits: same content as the hand-written tables they replaced."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runtime import op_traits
from runtime.kernels.base import REGISTRY, Kernel, register

# The hand-written tables as they stood when they were replaced by traits (2026-11-25), copied verbatim from
# runtime/executor.py, runtime/shapes.py, runtime/passes/constant_folding.py and runtime/passes/amp.py.
# MultiHeadAttention was in BLAS_OPS but has no kernel, so no trait can carry it: it cannot reach the executor.
OLD_BLAS_OPS = {
    "MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "FusedMatMul", "FusedConv", "NhwcConv", "LSTM", "GRU",
    "RNN", "Attention", "MatMulInteger", "QLinearMatMul", "QLinearConv", "ConvInteger", "DeformConv", "Loop", "If",
    "Scan", "MultiHeadAttention", "Det", "DFT", "STFT",
}  # fmt: skip
OLD_VIEW_OPS = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity"}
OLD_SIZE_CREATING_OPS = {"ConstantOfShape", "Expand", "Tile", "Range", "Resize", "Upsample", "Pad", "OneHot"}
OLD_NEVER_FOLD = {
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial", "Bernoulli", "Dropout",
}  # fmt: skip
OLD_LOW_PRECISION_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul"}
OLD_FP32_OPS = {
    "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
    "RMSNormalization", "LpNormalization", "MeanVarianceNormalization", "LRN",
    "ReduceMean", "ReduceSum", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
    "ReduceProd", "GlobalAveragePool", "AveragePool", "GlobalLpPool", "LpPool",
    "Softmax", "LogSoftmax", "Softplus", "Exp", "Log", "Pow", "Sqrt", "Reciprocal", "Erf", "Gelu",
    "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss", "CumSum", "Einsum",
}  # fmt: skip
OLD_WIDEST_TYPE_OPS = {"Add", "Sub", "Mul", "Div", "Sum", "Mean", "Max", "Min", "Concat", "Where"}
#: Kernels added since, whose traits put them in a table: SqueezeExcite (its NumPy path runs its two layers through
#: conv_nd), the NHWC ConvTranspose (its NCHW fallback calls BLAS) and the NHWC Resize (its output size follows the
#: scales or sizes).
ADDED_BLAS_OPS = {"SqueezeExcite", "NhwcConvTranspose"}
#: Kernels that stopped calling BLAS: the recurrent layers (compiled GEMMs, and np.einsum on the NumPy path).
REMOVED_BLAS_OPS = {"LSTM", "GRU", "RNN"}
ADDED_SIZE_CREATING_OPS = {"NhwcResize"}
OLD_EITHER_OPS = {
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Sigmoid", "HardSigmoid", "Tanh", "HardSwish", "Abs", "Neg",
    "MaxPool", "GlobalMaxPool", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Gather",
    "Identity", "Dropout", "Split", "Expand", "Tile", "Shape", "Size", "DepthToSpace", "SpaceToDepth",
}  # fmt: skip


@pytest.mark.parametrize(
    ("derived", "old"),
    [
        # kernels added since declare their own traits: FusedAttention's NumPy path calls BLAS
        (
            op_traits.BLAS_OPS,
            (OLD_BLAS_OPS - {"MultiHeadAttention"} - REMOVED_BLAS_OPS) | ADDED_BLAS_OPS | {"FusedAttention"},
        ),
        (op_traits.VIEW_OPS, OLD_VIEW_OPS),
        (op_traits.SIZE_CREATING_OPS, OLD_SIZE_CREATING_OPS | ADDED_SIZE_CREATING_OPS),
        (op_traits.NEVER_FOLD, OLD_NEVER_FOLD),
        (op_traits.LOW_PRECISION_OPS, OLD_LOW_PRECISION_OPS),
        (op_traits.FP32_OPS, OLD_FP32_OPS),
        (op_traits.WIDEST_TYPE_OPS, OLD_WIDEST_TYPE_OPS),
        (op_traits.EITHER_OPS, OLD_EITHER_OPS),
    ],
    ids=["blas", "view", "size", "never_fold", "amp_low", "amp_fp32", "amp_widest", "amp_either"],
)
def test_derived_table_equals_the_hand_written_one(derived: frozenset[str], old: set[str]) -> None:
    assert set(derived) == old


def test_readers_use_the_derived_tables() -> None:
    from runtime import check, executor
    from runtime.passes import amp, constant_folding

    assert executor.BLAS_OPS is op_traits.BLAS_OPS and executor.VIEW_OPS is op_traits.VIEW_OPS
    assert executor.SIZE_CREATING_OPS is check.SIZE_CREATING_OPS is op_traits.SIZE_CREATING_OPS
    assert constant_folding.NEVER_FOLD is op_traits.NEVER_FOLD
    assert amp.FP32_OPS is op_traits.FP32_OPS and amp.EITHER_OPS is op_traits.EITHER_OPS


def test_every_version_of_an_op_declares_the_same_traits() -> None:
    traits = ("uses_blas", "is_view", "creates_size", "never_fold", "amp_class")
    for (domain, op), versions in REGISTRY.items():
        if domain:
            continue
        seen = {tuple(getattr(cls, t) for t in traits) for cls in versions.values()}
        assert len(seen) == 1, f"{op}: versions disagree on traits {traits}: {seen}"


@pytest.fixture
def scratch_op() -> Iterator[str]:
    op = "TraitProbeOp"
    yield op
    REGISTRY.pop(("", op), None)


def test_a_new_kernel_joins_the_tables_by_its_traits(scratch_op: str) -> None:
    @register
    class TraitProbe(Kernel):
        op_type = scratch_op
        uses_blas = True
        creates_size = True
        amp_class = "widest"

    assert scratch_op in op_traits.ops_where(lambda cls: cls.uses_blas)
    assert scratch_op in op_traits.ops_where(lambda cls: cls.creates_size)
    assert scratch_op in op_traits.ops_with_amp_class("widest")
    assert scratch_op not in op_traits.ops_where(lambda cls: cls.is_view)
    assert scratch_op not in op_traits.ops_with_amp_class("fp32")
