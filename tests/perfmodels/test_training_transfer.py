"""The README's ResNet-50 training example against a database with measured training rows: its CPU routes name a
fitted or transferred training basis, its GPU routes keep the prior and the report says why."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from perfmodels.features import Device, Route, Workload
from perfmodels.fitted import fit_model
from perfmodels.results_db import make_row, read_results, write_rows
from perfmodels.targets import local_target_key
from perfmodels.training_fit import feature_row

EXAMPLES = Path(__file__).parents[2] / "examples"
COEF = np.array([0.0, 1.5, 0.0, 2.0, 1.0, 30.0])  # ``FEATURES`` order (these rows have matrix products only)
MODELS = {  # name: family, forward flops/sample, activation bytes/sample, params, nodes
    "mlp": ("mlp", 2e5, 4e3, 1e5, 8),
    "cnn": ("cnn", 3e6, 2e5, 2e5, 20),
    "resnet": ("resnet", 4e7, 2e6, 1e6, 80),
    "transformer": ("transformer", 2e7, 9e5, 1.5e6, 110),
}


def _training_db(path: Path) -> Path:
    """Step-time rows of PyTorch (backend ``torch``) and of our runtime, measured on this host at 1 and 2 threads."""
    rows = []
    for backend, framework in (("torch", "pytorch"), ("appopt-runtime", "appopt-runtime")):
        for name, (family, flops, act, params, nodes) in MODELS.items():
            for batch in (8, 32):
                for threads, peak, gbs in ((1, 50.0, 10.0), (2, 95.0, 14.0)):
                    x = feature_row(flops, act, params, batch, peak, gbs, {"gemm": flops}, {"gemm": nodes}, threads)
                    rows.append(
                        make_row(
                            source="measured", target=local_target_key(), backend=backend, framework=framework,
                            mode="training", precision="fp32", model=name, family=family, batch=batch,
                            threads=threads, scenario="training", flops_per_sample=flops,
                            activation_bytes_per_sample=act, params=params, ops_by_class={"gemm": nodes},
                            peak_gflops=peak, bandwidth_gbs=gbs, other_cpu=0.0, metric="ms_per_step",
                            value=float(COEF @ x) * 1e3,
                        )
                    )  # fmt: skip
    write_rows(path, rows)
    return path


def _example(tmp_path: Path, *, cpu_only: bool, local: bool = False) -> Path:
    """The ResNet-50 example next to a copy of its code; ``cpu_only`` drops the GPUs (the same nodes' CPUs)."""
    text = (EXAMPLES / "resnet50-gpu-slurm.yaml").read_text()
    if cpu_only:
        text = text.replace("  accelerator: {vendor: nvidia, model: a100, count: 4}\n", "")
        assert "accelerator" not in text
    if local:
        text = text.replace("cpu: {arch: x86_64, model: xeon-8380, cores: 80}", "cpu: {arch: x86_64, model: local}")
        text = text.replace("  nodes: 2\n", "  nodes: 1\n")
    shutil.copytree(EXAMPLES / "apps", tmp_path / "apps")
    spec = tmp_path / "resnet50.yaml"
    spec.write_text(text)
    return spec


def _plan(spec: Path, db: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, str]:
    from cli.main import app

    monkeypatch.setenv("APPOPT_RESULTS_DB", str(db))
    out = spec.parent / "out"
    result = CliRunner().invoke(app, ["plan", str(spec), "-o", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "plan.json").read_text()), (out / "plan.md").read_text()


def _bases(plan: dict, framework: str) -> set[str]:
    return {c["predicted"]["basis"] for c in plan["candidates"] if c["framework"] == framework}


def test_the_gpu_routes_keep_the_prior_and_the_report_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan, report = _plan(_example(tmp_path, cpu_only=False), _training_db(tmp_path / "t.csv"), monkeypatch)
    assert plan["target"]["device_key"] == "nvidia"
    bases = {c["predicted"]["basis"] for c in plan["candidates"]}
    assert bases and all(b.startswith("roofline-prior") and "(no GPU training measured for " in b for b in bases)
    assert "no GPU training rows measure this route's framework and precision, so it keeps the prior" in report


def test_the_cpu_routes_of_the_example_transfer_the_training_fit(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Two Xeon 8380 nodes, never measured: the fit carries over through its ratio to the prior on this host."""
    plan, report = _plan(_example(tmp_path, cpu_only=True), _training_db(tmp_path / "t.csv"), monkeypatch)
    assert plan["target"]["device_key"] == "cpu" and plan["target"]["nodes"] == 2
    pattern = (
        rf"transferred-training:{re.escape(local_target_key())} -> xeon-8380 \(torch fp32, 16 rows; "
        r"x[\d.e+-]+ of the roofline prior, as measured at 2 thread\(s\)\)(; \w+ not measured)?; 2 devices scaled"
    )
    assert _bases(plan, "pytorch") and all(re.match(pattern, b) for b in _bases(plan, "pytorch"))
    # a framework with no training rows keeps the prior, and says so
    unmeasured = [c for c in plan["candidates"] if c["framework"] not in ("pytorch", "appopt-runtime")]
    assert all("no training rows for" in c["predicted"]["basis"] for c in unmeasured)
    if plan["choice"]["framework"] == "pytorch":
        assert "carried to this target through the roofline prior" in report


def test_on_the_measured_host_the_cpu_route_is_fitted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plan, _ = _plan(_example(tmp_path, cpu_only=True, local=True), _training_db(tmp_path / "t.csv"), monkeypatch)
    assert all(b.startswith(f"fitted-training:{local_target_key()} (torch fp32") for b in _bases(plan, "pytorch"))
    assert _bases(plan, "pytorch")


def test_transfer_scales_the_fit_by_its_ratio_to_the_prior_where_it_was_measured(tmp_path: Path) -> None:
    model = fit_model(read_results(_training_db(tmp_path / "t.csv")), source="t.csv")
    workload = Workload(4e9, 1e8, 2.5e7, "training", 64, ops_by_class={"conv": 160})
    route = Route("pytorch", "none", (), "fp32", "NCHW", 0.65)
    big = Device("xeon-8380", "cpu", {"fp32": 2.6e12}, 2.0e11)
    moved = model.predict(workload, route, big)
    assert moved.basis.startswith("transferred-training:")
    measured = Device(local_target_key(), "cpu", {"fp32": 95e9}, 14e9)
    fitted = model.predict(workload, route, Device("local", "cpu", {"fp32": 1e11}, 2e10))
    there = model.prior.predict(workload, route, measured)
    here = model.prior.predict(workload, route, big)
    expected = here.step_seconds * fitted.step_seconds / there.step_seconds
    if fitted.detail["threads"] == 2.0:  # (this host's usable cores pick the thread count the fit reads)
        assert moved.step_seconds == pytest.approx(expected, rel=1e-6)
    assert moved.detail["transfer_factor"] > 0
