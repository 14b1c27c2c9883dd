"""benchmarks.gpu_bench: the GPU side's records (measured here on the CPU, which is what a machine without a GPU
does), pooled repeats, and their rows in the result database."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from benchmarks import gpu_bench
from perfmodels.results_db import read_results

needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch: extra not installed")


def _head(**extra: object) -> dict[str, object]:
    return {"kind": "header", "gpu": "NVIDIA H200", "driver": "580", "torch": "2.11", "cuda": "13.0", "cudnn": 91,
            "host": "h", "cpu_model": "Some CPU", "cpu_flags": "avx2 fma", "cores": 16,
            "timestamp": "2026-11-26T09:00:00+00:00", "probes": {"bf16_tflops": 800.0, "copy_gbs": 4000.0}, **extra}


def _run(step: float, blocks: list[float], **extra: object) -> dict[str, object]:
    return {"kind": "run", "model": "digits_mlp", "family": "mlp", "mode": "training", "compiler": "none",
            "precision": "bf16", "layout": "NCHW", "batch": 128, "first_step_s": 0.5, "block_ms": blocks,
            "step_ms": step, "peak_memory_bytes": 2**20, **extra}


def _write(path: Path, *items: dict[str, object], torn: bool = False) -> Path:
    text = "".join(json.dumps(i) + "\n" for i in items)
    path.write_text(text + ('{"kind": "run", "mod' if torn else ""), encoding="utf-8")
    return path


def test_a_torn_last_line_is_dropped_but_a_broken_middle_line_is_an_error(tmp_path: Path) -> None:
    head, runs = gpu_bench.read_runs(_write(tmp_path / "a.jsonl", _head(), _run(1.0, [1.0]), torn=True))
    assert head["gpu"] == "NVIDIA H200" and len(runs) == 1
    bad = tmp_path / "b.jsonl"
    bad.write_text(json.dumps(_head()) + "\nnot json\n" + json.dumps(_run(1.0, [1.0])) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"b\.jsonl:2: not a JSON line"):
        gpu_bench.read_runs(bad)
    with pytest.raises(ValueError, match="no header line"):
        gpu_bench.read_runs(_write(tmp_path / "c.jsonl", _run(1.0, [1.0])))


def test_repeats_pool_their_blocks_and_another_gpu_is_refused(tmp_path: Path) -> None:
    failed = {k: v for k, v in _run(0, []).items() if k not in ("step_ms", "block_ms")} | {"error": "OutOfMemory"}
    a = _write(tmp_path / "a.jsonl", _head(), _run(2.0, [1.0, 2.0, 3.0]), failed)
    b = _write(tmp_path / "b.jsonl", _head(), _run(10.0, [10.0, 11.0, 9.0]))
    _, runs = gpu_bench.merged_runs([a, b])
    assert len(runs) == 1 and runs[0]["repeats"] == 2 and runs[0]["step_ms"] == pytest.approx(6.0)
    other = _write(tmp_path / "c.jsonl", _head(gpu="NVIDIA A100"), _run(1.0, [1.0]))
    with pytest.raises(ValueError, match="record each GPU apart"):
        gpu_bench.merged_runs([a, other])


def test_gpu_target_key_is_a_slug_of_the_name_and_count() -> None:
    assert gpu_bench.gpu_target_key("NVIDIA H200", 1) == "nvidia-h200-1g"


@needs_torch
def test_measure_then_rows_round_trip_through_the_database(tmp_path: Path) -> None:
    """The quick plan on this machine's CPU (no GPU here): every configuration gets a record, and the rows carry the
    model's features, the GPU provenance and the training/inference metrics the GPU fit reads."""
    path = gpu_bench.measure(tmp_path / "out", budget_s=60, quick=True, echo=lambda _: None,
                             only=("digits_mlp",), compiled=None)
    head, runs = gpu_bench.read_runs(path)
    assert {r["mode"] for r in runs} == {"training", "inference"} and all("step_ms" in r for r in runs)
    db = tmp_path / "db.csv"
    rows = gpu_bench.rows_of({**head, "gpu": "NVIDIA H200"}, runs)
    from perfmodels.results_db import append_rows

    append_rows(db, rows)
    frame = read_results(db)
    assert set(frame["metric"]) == {"ms_per_step", "compile_s", "peak_rss_mib", "p90_latency_ms"}
    assert (frame["accelerator"] == "NVIDIA H200").all() and (frame["target"] == "nvidia-h200-1g").all()
    assert (frame["flops_per_sample"] > 0).all() and frame["cpu_flags"].notna().all()
    from perfmodels.gpu_fit import gpu_rows

    assert len(gpu_rows(frame)) == len(runs)
