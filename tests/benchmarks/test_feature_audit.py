"""benchmarks.feature_audit: the analyser's counts against counts on shapes recorded by running the model."""

from __future__ import annotations

import pytest

from benchmarks.feature_audit import audit, main, recorded_shapes
from benchmarks.models import get_model

pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed")


def test_recorded_shapes_cover_the_inputs_and_every_node_output_at_the_fed_batch() -> None:
    model = get_model("tiny_lenet5")
    feeds = model.feeds(batch=3)
    recorded = recorded_shapes(model.model(), feeds)
    outputs = {name for node in model.model().graph.node for name in node.output if name}
    assert outputs <= set(recorded)
    assert recorded["input"][0] == feeds["input"].shape
    assert recorded[model.model().graph.output[0].name][0][0] == 3


def test_a_counted_model_matches_its_recorded_count_and_a_broken_shape_shows() -> None:
    model = get_model("tiny_bert")
    row = audit(model.model(), model.feeds(batch=1), model.name, "tiny")
    assert row.flops_ratio == 1.0 and row.classes_differ == [] and row.analysed.unresolved_nodes == []

    # the reference counts on what ran: a recorded shape that differs from the analysed one changes its count
    recorded = recorded_shapes(model.model(), model.feeds(batch=1))
    matmul = next(n for n in model.model().graph.node if n.op_type == "MatMul")
    shape, dtype = recorded[matmul.output[0]]
    recorded[matmul.output[0]] = ((*shape[:-1], shape[-1] * 2), dtype)
    from analysis.modelinfo import analyse_onnx

    doubled = analyse_onnx(model.model(), batch_size=1, recorded=recorded)
    assert doubled.by_class["gemm"].flops > row.analysed.by_class["gemm"].flops


def test_the_table_names_every_model_and_counts_the_wrong_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--suite", "tiny_lenet5,tiny_bert", "--no-training"]) == 0
    out = capsys.readouterr().out
    assert "tiny_lenet5" in out and "tiny_bert" in out
    assert "0 of 2 model(s) with features that differ" in out


@pytest.mark.slow
def test_every_suite_model_counts_what_it_runs() -> None:
    """Every inference-suite and training-suite model: the analyser's FLOPs and op classes equal the count on the
    shapes one onnxruntime run records. Only nodes behind control flow (EmbeddingBag's Loop) may stay unresolved."""
    pytest.importorskip("torch", reason="torch: extra not installed")
    from benchmarks.feature_audit import _inference_models, _training_models

    wrong = []
    for name, suite_name, model, feeds in [*_inference_models("all,breadth,heldout"), *_training_models()]:
        row = audit(model, feeds, name, suite_name)
        behind_loop = any(node.op_type == "Loop" for node in model.graph.node)
        if row.flops_ratio != pytest.approx(1.0, rel=1e-9) or row.classes_differ:
            wrong.append(f"{name}: FLOPs x{row.flops_ratio:.4f}, classes {row.classes_differ}")
        elif row.analysed.unresolved_nodes and not behind_loop:
            wrong.append(f"{name}: unresolved {row.analysed.unresolved_nodes[:3]}")
    assert wrong == []
