"""Plans for GPU targets on the shipped database: PyTorch's routes stand on the GPU rows (benchmarks/gpu_bench.py,
measured on an H200) carried to the target's data sheet; frameworks no GPU row measured keep the prior and say so."""

from __future__ import annotations

from pathlib import Path

import yaml

from optimiser.planner import make_plan
from optimiser.spec import load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resnet50-gpu-slurm.yaml"


def test_the_readme_gpu_example_ranks_measured_pytorch_routes_with_distinct_figures() -> None:
    plan = make_plan(load_spec(EXAMPLE))
    torch = [c for c in plan.candidates if c.route.framework == "pytorch"]
    assert torch and all(c.prediction.basis.startswith("transferred-gpu:NVIDIA H200 -> a100") for c in torch)
    assert all("8 devices, batch 32 each" in c.prediction.basis for c in torch)
    steps = [round(c.prediction.step_seconds, 6) for c in torch]
    assert len(set(steps)) == len(steps), "routes measured at different speeds must not tie"
    for c in torch:
        low, high = c.prediction.detail["p10_step_s"], c.prediction.detail["p90_step_s"]
        assert low < c.prediction.step_seconds < high


def test_an_h200_target_is_the_measuring_gpu_itself(tmp_path: Path) -> None:
    doc = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    for key in ("code", "command", "framework"):
        doc["application"].pop(key)
    doc["application"]["batch_size"] = 128
    doc["target"].update(accelerator={"vendor": "nvidia", "model": "h200", "count": 1}, nodes=1)
    spec = tmp_path / "h200.yaml"
    spec.write_text(yaml.safe_dump(doc), encoding="utf-8")
    plan = make_plan(load_spec(spec))
    assert plan.choice.prediction.basis.startswith("fitted-gpu:NVIDIA H200")
    other = [c for c in plan.candidates if c.route.framework != "pytorch"]
    assert other and all(not c.prediction.basis.startswith(("fitted-gpu", "transferred-gpu")) for c in other)
    torch = [c.prediction.step_seconds for c in plan.candidates if c.route.framework == "pytorch"]
    assert len(set(torch)) == len(torch), "routes measured at different speeds must not tie"


def test_the_gpu_evaluation_sets_the_fit_against_the_planners_prior_on_the_same_rows() -> None:
    from optimiser.catalog import load_catalog
    from optimiser.gpu_baseline import prior_on_rows
    from optimiser.target import gpu_presets
    from perfmodels.fitted import load_default_model
    from perfmodels.gpu_fit import GpuFit, evaluation_lines

    catalog = load_catalog()
    fit = GpuFit(load_default_model().gpu_rows(), gpu_presets(catalog))  # type: ignore[attr-defined]
    baseline = prior_on_rows(fit, catalog)
    assert len(baseline) == len(fit.rows) and (baseline["predicted"] > 0).all()
    lines = evaluation_lines(fit, baseline)
    assert any(line.startswith("baseline training: RMSPE") for line in lines)
    assert any(line.startswith("baseline route choice:") and "sets with tied routes" in line for line in lines)
