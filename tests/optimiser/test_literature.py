"""``appopt models literature``: each seed compiler claim next to what the database measures, computed at run time."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from optimiser.catalog import load_catalog
from optimiser.literature import claim_checks, default_backends, format_checks, measure_compiler
from perfmodels.results_db import make_row, to_frame, write_rows

REGISTRY = [("onnxruntime", "onnxruntime", "none"), ("onnxruntime-extended", "onnxruntime", "none"),
            ("openvino", "onnxruntime", "openvino"), ("torch", "pytorch", "none")]


def _row(backend: str, compiler: str, model: str, ms: float, batch: int = 1, host: str = "h") -> dict:
    return make_row(source="measured", target="t", host=host, backend=backend, framework="onnxruntime",
                    compiler=compiler, model=model, batch=batch, threads=1, precision="fp32", mode="inference",
                    scenario="SingleStream", metric="p90_latency_ms", value=ms * 1.1, unit="ms", median_ms=ms)


def _rows() -> list[dict]:
    return [
        _row("onnxruntime", "none", "a", 10.0), _row("openvino", "openvino", "a", 5.0),  # a: 2x
        _row("onnxruntime", "none", "b", 4.0), _row("openvino", "openvino", "b", 8.0),  # b: 0.5x at batch 1
        _row("onnxruntime", "none", "b", 4.0, batch=8), _row("openvino", "openvino", "b", 16.0, batch=8),  # 0.25x
        _row("onnxruntime-extended", "none", "c", 1.0), _row("openvino", "openvino", "c", 1.0),  # not the default
        _row("onnxruntime", "none", "d", 1.0, host="other"), _row("openvino", "openvino", "d", 1.0),  # other host
        _row("onnxruntime", "none", "e", 1.0), {**_row("openvino", "openvino", "e", 9.0), "flags": "busy"},  # busy
    ]


def test_the_measured_speedup_is_a_geomean_over_models_against_the_frameworks_default() -> None:
    (measured,) = measure_compiler(to_frame(_rows()), "openvino", default_backends(REGISTRY))
    assert (measured.framework, measured.baseline_backend) == ("onnxruntime", "onnxruntime")
    assert (measured.models, measured.pairs) == (2, 3)  # c, d: no default baseline on the host; e: measured busy
    # per model: a 2x; b geomean(0.5, 0.25) = 0.354; over models: sqrt(2 * 0.354) = 0.841
    assert measured.geomean == pytest.approx((2 * (0.5 * 0.25) ** 0.5) ** 0.5)
    assert (measured.low, measured.high) == (pytest.approx(0.125**0.5), pytest.approx(2.0))


def test_every_seed_claim_is_listed_with_what_is_measured_or_why_it_cannot_be() -> None:
    checks = claim_checks(load_catalog(), to_frame(_rows()), default_backends(REGISTRY))
    by_id = {}
    for check in checks:
        by_id.setdefault(check.compiler.id, []).append(check)
    assert {"xla", "tvm", "glow", "ngraph", "tensorrt", "tensor-comprehensions", "plaidml"} <= set(by_id)
    ngraph = by_id["ngraph"][0]
    assert ngraph.claim_text().startswith("45x over") and ngraph.measured_as == "openvino"
    assert ngraph.measured_text().startswith("0.841x over onnxruntime (onnxruntime), geomean of 2 models")
    assert ngraph.measured_text().endswith("(through its successor openvino)")
    assert [c.claim_text().split(" over ")[0] for c in by_id["glow"]] == ["2.7x", "1.3x"]
    assert all("no installable package" in c.measured_text() for c in by_id["glow"] + by_id["plaidml"])
    assert "runs only on nvidia GPUs" in by_id["tensorrt"][-1].measured_text()
    assert by_id["tensorrt"][-1].claim_text().startswith("40x over CPU-only")
    assert by_id["xla"][0].measured_text().startswith("not measured")
    assert by_id["tvm-tuned"][0].claim_text().startswith("1.2-3.8x over")  # the claim is the tuned compiler's
    assert by_id["tvm"][0].speedup is None


def test_tvms_claim_shows_the_tuned_and_the_untuned_measurements() -> None:
    rows = [_row("onnxruntime", "none", m, 10.0) for m in ("a", "b")] + [
        _row("tvm-tuned", "tvm-tuned", "a", 5.0), _row("tvm-tuned", "tvm-tuned", "b", 20.0),  # 2x and 0.5x: 1x
        _row("tvm", "tvm", "a", 100.0),  # untuned: 0.1x, one model
    ]
    checks = claim_checks(load_catalog(), to_frame(rows), default_backends(REGISTRY))
    (tuned,) = [c for c in checks if c.compiler.id == "tvm-tuned"]
    assert tuned.measured_text() == (
        "1x over onnxruntime (onnxruntime), geomean of 2 models (2 pairs, per model 0.5-2x); untuned (tvm): 0.1x over "
        "onnxruntime (onnxruntime), geomean of 1 model (1 pairs, per model 0.1-0.1x)")
    (untuned,) = [c for c in checks if c.compiler.id == "tvm"]
    assert untuned.measured_text().startswith("0.1x over onnxruntime") and "untuned (" not in untuned.measured_text()
    empty = [c for c in claim_checks(load_catalog(), to_frame([]), {}) if c.compiler.id == "tvm-tuned"]
    assert empty[0].measured_text().startswith("not measured") and empty[0].measured_text().endswith(
        "; untuned (tvm): not measured")


def test_the_command_works_on_an_empty_database(tmp_path: Path) -> None:
    empty = tmp_path / "empty.csv"
    write_rows(empty, [])
    result = CliRunner().invoke(app, ["models", "literature", "--db", str(empty)])
    assert result.exit_code == 0, result.output
    assert "(0 rows;" in result.stdout
    assert "XLA (Accelerated Linear Algebra) [xla]: claimed 1.15x over tensorflow" in result.stdout
    assert result.stdout.count("here: not measured") >= 4  # xla, tvm, inductor, ngraph (via openvino), openvino


def test_the_command_reads_the_database_it_is_given(tmp_path: Path) -> None:
    db = tmp_path / "rows.csv"
    write_rows(db, _rows())
    result = CliRunner().invoke(app, ["models", "literature", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "here: 0.841x over onnxruntime (onnxruntime), geomean of 2 models" in result.stdout
    lines = format_checks(claim_checks(load_catalog(), to_frame(_rows()), default_backends(REGISTRY)), 12)
    assert lines[0].startswith("seed compiler claims against this database (12 rows;")
