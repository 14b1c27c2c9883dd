"""ONNX backend conformance of the tensor, index, creation, sequence, optional, string, signal, ml, image and
resize kernels, run through ``compile_model`` with the conformance harness's own judge.

Only the onnx generator modules of these ops are imported (well under the ~8 s of collecting all 1,884 cases);
each op's ``_expanded`` function-body cases come along with it. Sequence and optional kernels have no single-node
cases of their own, so the control-flow cases that build and consume sequences/optionals stand in for them.
"""

from __future__ import annotations

import functools
import importlib
import re
import warnings
from typing import Any

import numpy as np
import pytest

from benchmarks.conformance import run_case

#: op -> the onnx generator module (under onnx.backend.test.case.node) that holds its cases.
OP_MODULES = {
    "ArrayFeatureExtractor": "ai_onnx_ml.array_feature_extractor",
    "Bernoulli": "bernoulli",
    "Binarizer": "ai_onnx_ml.binarizer",
    "BlackmanWindow": "blackmanwindow",
    "CenterCropPad": "center_crop_pad",
    "Compress": "compress",
    "Concat": "concat",
    "Constant": "constant",
    "ConstantOfShape": "constantofshape",
    "DFT": "dft",
    "DepthToSpace": "depthtospace",
    "Expand": "expand",
    "EyeLike": "eyelike",
    "Flatten": "flatten",
    "Gather": "gather",
    "GatherElements": "gatherelements",
    "GatherND": "gathernd",
    "HammingWindow": "hammingwindow",
    "HannWindow": "hannwindow",
    "Identity": "identity",
    "ImageDecoder": "image_decoder",
    "LabelEncoder": "ai_onnx_ml.label_encoder",
    "MelWeightMatrix": "melweightmatrix",
    "NonZero": "nonzero",
    "OneHot": "onehot",
    "OptionalGetElement": "optionalgetelement",
    "OptionalHasElement": "optionalhaselement",
    "Pad": "pad",
    "Range": "rangeop",
    "RegexFullMatch": "regex_full_match",
    "Reshape": "reshape",
    "Resize": "resize",
    "ReverseSequence": "reversesequence",
    "STFT": "stft",
    "Scatter": "scatter",
    "ScatterElements": "scatterelements",
    "ScatterND": "scatternd",
    "SequenceInsert": "sequenceinsert",
    "Shape": "shape",
    "Size": "size",
    "Slice": "slice",
    "SpaceToDepth": "spacetodepth",
    "Split": "split",
    "SplitToSequence": "splittosequence",
    "Squeeze": "squeeze",
    "StringConcat": "string_concat",
    "StringNormalizer": "stringnormalizer",
    "StringSplit": "string_split",
    "TfIdfVectorizer": "tfidfvectorizer",
    "Tile": "tile",
    "TopK": "topk",
    "Transpose": "transpose",
    "TreeEnsemble": "ai_onnx_ml.tree_ensemble",
    "Unique": "unique",
    "Unsqueeze": "unsqueeze",
    "Upsample": "upsample",
}

#: Control-flow cases whose graphs are mostly sequence/optional ops (SequenceConstruct/Empty/At/Length, Optional).
SEQUENCE_CASES = {
    "if_": ["test_if_seq", "test_if_opt"],
    "loop": ["test_loop13_seq", "test_loop16_seq_none"],
    "sequence_map": [
        "test_sequence_map_identity_1_sequence_expanded",
        "test_sequence_map_identity_2_sequences_expanded",
        "test_sequence_map_identity_1_sequence_1_tensor_expanded",
        "test_sequence_map_add_2_sequences_expanded",
        "test_sequence_map_add_1_sequence_1_tensor_expanded",
        "test_sequence_map_extract_shapes_expanded",
    ],
}

#: Cases we knowingly fail: no decoder for these formats without new dependencies.
UNSUPPORTED = {
    "test_image_decoder_decode_webp_rgb": "WebP",
    "test_image_decoder_decode_jpeg2k_rgb": "JPEG 2000",
}


@functools.cache
def _all_loaded_cases() -> list[Any]:
    """Import the generator modules (their exporters append cases to onnx's list on import)."""
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for module in {*OP_MODULES.values(), *SEQUENCE_CASES}:
            importlib.import_module(f"{node_cases.__name__}.{module}")
    return list(node_cases._NodeTestCases)


def cases_of(op: str) -> list[Any]:
    """The single-node cases of ``op`` plus the ``_expanded`` cases derived from them."""
    cases = _all_loaded_cases()
    own = {c.name for c in cases if len(c.model.graph.node) == 1 and c.model.graph.node[0].op_type == op}
    return [c for c in cases if re.sub(r"_expanded(_ver\d+)?$", "", c.name) in own]


def _failures(cases: list[Any], op: str) -> list[str]:
    results = [run_case(case, op) for case in cases if case.name not in UNSUPPORTED]
    return [f"{r.name}: {r.reason}" for r in results if not r.passed]


@pytest.mark.parametrize("op", sorted(OP_MODULES))
def test_every_backend_case_passes(op: str) -> None:
    cases = cases_of(op)
    assert cases, f"no backend cases found for {op}"
    failures = _failures(cases, op)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("module", sorted(SEQUENCE_CASES))
def test_control_flow_cases_over_sequences_and_optionals_pass(module: str) -> None:
    wanted = set(SEQUENCE_CASES[module])
    cases = [c for c in _all_loaded_cases() if c.name in wanted]
    assert {c.name for c in cases} == wanted
    failures = _failures(cases, module)
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("name", "fmt"), sorted(UNSUPPORTED.items()))
def test_unsupported_image_formats_fail_naming_the_format(name: str, fmt: str) -> None:
    (case,) = [c for c in _all_loaded_cases() if c.name == name]
    result = run_case(case, "ImageDecoder")
    assert not result.passed
    assert f"{fmt} images are not supported" in result.reason
