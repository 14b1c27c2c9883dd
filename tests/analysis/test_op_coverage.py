"""The analysers' op tables against the runtime's kernels and their traits: a new kernel is told where it is missing.

``analysis`` cannot read the runtime's traits (the planner runs without the runtime), so these tests are the link:
a kernel added to ``runtime/kernels`` fails here until the cost model classes it (``analysis.modelinfo``), and a
trait that the analysers mirror (never folded, a free view) stays in step with theirs.
"""

from __future__ import annotations

from analysis import modelinfo, unitgraph
from runtime.autodiff import rules as _rules  # noqa: F401  (importing it registers every gradient rule)
from runtime.autodiff.registry import GRAD_RULES, NO_GRADIENT_OPS
from runtime.kernels.base import REGISTRY
from runtime.op_traits import NEVER_FOLD, VIEW_OPS

#: ONNX ops with a runtime kernel that the cost model counts as data movement: bytes moved, no FLOPs.
#: The last group has arithmetic but is costed as "other" until the analyser learns it; classing one changes the
#: features of rows already measured (refresh them with ``appopt bench refresh-features``).
COSTED_AS_DATA_MOVEMENT = frozenset(
    {
        # shapes, views, copies and indexing
        "BitCast", "CenterCropPad", "Compress", "Concat", "Constant", "ConstantOfShape", "DepthToSpace", "Expand",
        "EyeLike", "Flatten", "Gather", "GatherElements", "GatherND", "NonZero", "OneHot", "Pad", "Range",
        "Reshape", "ReverseSequence", "Scatter", "ScatterElements", "ScatterND", "Shape", "Size", "Slice",
        "SpaceToDepth", "Split", "Squeeze", "TensorScatter", "Tile", "Transpose", "Trilu", "Unique", "Unsqueeze",
        # sequences, optionals and strings
        "ConcatFromSequence", "Optional", "OptionalGetElement", "OptionalHasElement", "RegexFullMatch",
        "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
        "SplitToSequence", "StringConcat", "StringNormalizer", "StringSplit", "TfIdfVectorizer",
        # random draws (never folded; see NONDETERMINISTIC_OPS)
        "Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
        # resampling, image and signal ops
        "AffineGrid", "BlackmanWindow", "Col2Im", "DFT", "GridSample", "HammingWindow", "HannWindow",
        "ImageDecoder", "MaxUnpool", "MelWeightMatrix", "NonMaxSuppression", "Resize", "RoiAlign", "STFT",
        "Upsample",
        # arithmetic the analyser does not count yet
        "Attention", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor", "CausalConvWithState", "CumProd",
        "Det", "LinearAttention", "NegativeLogLikelihoodLoss", "RMSNormalization",
        "RotaryEmbedding", "SoftmaxCrossEntropyLoss", "SwiGLU", "Swish",
    }
)  # fmt: skip


def _onnx_kernel_ops() -> set[str]:
    return {op for (domain, op) in REGISTRY if domain == ""}


def test_every_onnx_kernel_is_costed_on_purpose() -> None:
    """A kernel whose op the cost model does not class is either data movement (listed above) or a gap to fix."""
    uncosted = {
        op
        for op in _onnx_kernel_ops()
        if modelinfo.op_class(op) == "other" and op not in modelinfo._REDUCE_OPS and op not in modelinfo._CONTROL_FLOW
    }
    unlisted = sorted(uncosted - COSTED_AS_DATA_MOVEMENT)
    assert not unlisted, (
        f"runtime kernels with no cost class: {unlisted}; class them in analysis/modelinfo.py (op_class's tables) "
        "or, if they only move data, add them to COSTED_AS_DATA_MOVEMENT here"
    )
    stale = sorted(COSTED_AS_DATA_MOVEMENT - uncosted)
    assert not stale, f"no longer data movement or no longer a kernel, remove from COSTED_AS_DATA_MOVEMENT: {stale}"


def test_never_folded_kernels_are_nondeterministic_for_the_analysers() -> None:
    """The runtime's ``never_fold`` trait and the analysers' set (modelinfo, the torch eager peer) agree; Dropout
    is never folded by the runtime (training draws a mask) but is the identity the analysers cost at inference."""
    assert {op for op in NEVER_FOLD if op != "Dropout"} == modelinfo.NONDETERMINISTIC_OPS


def test_view_kernels_are_free_in_the_unit_graph() -> None:
    """A view costs no kernel; Transpose is a view in our runtime but a copy (a ``permute`` unit) in the others."""
    assert VIEW_OPS - {"Transpose"} <= unitgraph.FREE


def test_gradient_rules_name_registered_kernels() -> None:
    """Every gradient rule, and every op declared gradient-free, is an op the runtime has a kernel for."""
    assert not sorted(key for key in GRAD_RULES if key not in REGISTRY)
    assert not sorted(op for op in NO_GRADIENT_OPS if ("", op) not in REGISTRY)
