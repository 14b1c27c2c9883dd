"""Planner mechanics on a hand-made catalog: compatibility rules, pins, allow/deny, explanations."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from optimiser.errors import PlanError, SpecError
from optimiser.planner import Plan, compiler_speedup, make_plan, measured_basis
from optimiser.spec import parse_spec
from tests.optimiser.fake_catalog import fake_catalog


def plan_for(application: dict[str, Any] | None = None, target: dict[str, Any] | None = None,
             optimisation: dict[str, Any] | None = None) -> Plan:
    doc: dict[str, Any] = {
        "name": "t",
        "application": {"type": "training", "model": {"architecture": "net"}, "batch_size": 32, **(application or {})},
        "target": target or {"cpu": {"arch": "x86_64", "model": "cpu1"}},
        "optimisation": optimisation or {},
    }
    return make_plan(parse_spec(yaml.safe_dump(doc)), catalog=fake_catalog())


def reasons(plan: Plan, **what: str) -> list[str]:
    return [e.reason for e in plan.excluded if all(e.what.get(k) == v for k, v in what.items())]


def test_gpu_training_uses_gpu_libraries_and_reduced_precision() -> None:
    plan = plan_for(target={"accelerator": {"vendor": "nvidia", "model": "gpu1", "count": 4}})
    route = plan.choice.route
    assert route.framework == "fast"
    assert set(route.libraries) == {"cudnn", "cublas"}
    assert route.precision in ("fp16", "bf16") and route.layout == "NHWC"
    assert plan.choice.base_image == "img/gpu"
    assert all(c.route.compiler != "infer" for c in plan.candidates)
    assert reasons(plan, framework="fast", compiler="infer") == [
        "InferOnly has inference support for Fast; training needs it"
    ]
    assert reasons(plan, framework="onnxonly") == ["does not support training (supports inference)"]


def test_aarch64_cpu_never_gets_mkl_and_says_why() -> None:
    plan = plan_for(target={"cpu": {"arch": "aarch64", "model": "arm1"}})
    assert all("mkl" not in c.route.libraries for c in plan.candidates)
    assert reasons(plan, framework="fast", library="mkl") == ["MKL does not run on aarch64 CPUs"]
    assert plan.choice.base_image == "img/cpu-arm"


def test_legacy_is_excluded_unless_pinned() -> None:
    plan = plan_for()
    assert reasons(plan, framework="old") == ["legacy (successor: fast); pin application.framework to use it anyway"]
    pinned = plan_for(application={"framework": "old"})
    assert {c.route.framework for c in pinned.candidates} == {"old"}
    assert "Old is legacy (successor: fast) (pinned by the spec)" in pinned.choice.notes


def test_deny_and_allow_lists_apply_per_category() -> None:
    plan = plan_for(optimisation={"deny": {"libraries": ["mkl"]}, "allow": {"compilers": ["jit"]}})
    assert all("mkl" not in c.route.libraries for c in plan.candidates)
    assert {c.route.compiler for c in plan.candidates} == {"none", "jit"}
    assert "denied by optimisation.deny.libraries" in reasons(plan, library="mkl")
    # The allow list acts as a whitelist: every other compiler that would have run is removed, and the report names
    # each one (and only those: a compiler the rules exclude anyway keeps that reason).
    inference = {"type": "inference"}
    would_run = {c.route.compiler for c in plan_for(application=inference).candidates} - {"none", "jit"}
    allowed = plan_for(application=inference, optimisation={"allow": {"compilers": ["jit"]}})
    removed = {e.what.get("compiler") for e in allowed.removed_by_selection if "compiler" in e.what}
    assert would_run == {"infer"} and removed == would_run
    assert all(e.reason == "not in optimisation.allow.compilers" for e in allowed.removed_by_selection
               if "compiler" in e.what)
    # In a training plan the inference-only compiler is excluded by its support rule, not by the list.
    assert not any("compiler" in e.what for e in plan.removed_by_selection)


def test_ranking_follows_the_goal_and_predictions_are_ordered() -> None:
    plan = plan_for(application={"data": {"samples": 100000, "epochs": 2}})
    totals = [c.prediction.total_seconds for c in plan.candidates]
    # Past the band of routes within the model's error of the fastest, the figures decide.
    assert plan.band >= 1 and totals[plan.band - 1:] == sorted(totals[plan.band - 1:])  # type: ignore[type-var]
    # Within it, a route whose figure stands on measurements comes before one on a prior, then the figures decide.
    band = plan.candidates[: plan.band]
    keys = [(not measured_basis(c.prediction), c.prediction.total_seconds) for c in band]
    assert keys == sorted(keys)  # type: ignore[type-var]
    fastest = min(totals)  # type: ignore[type-var]
    assert all(abs(t - fastest) <= 0.25 * fastest * (1 + 1e-9) for t in totals[: plan.band])  # type: ignore[operator]
    latency = plan_for(optimisation={"goal": "latency"})
    steps = [c.prediction.step_seconds for c in latency.candidates]
    assert steps[latency.band - 1:] == sorted(steps[latency.band - 1:])


def test_pinned_precision_the_hardware_or_framework_lacks_is_explained() -> None:
    with pytest.raises(PlanError) as info:
        plan_for(application={"precision": "bf16"}, target={"cpu": {"arch": "aarch64", "model": "arm1"}})
    assert "  framework=fast, precision=bf16: arm1 has no bf16 support" in info.value.lines
    with pytest.raises(PlanError) as info:
        plan_for(application={"precision": "fp16"})
    assert "  framework=fast, precision=fp16: fast does not run fp16 on cpu" in info.value.lines


def test_infeasible_spec_lists_why_each_route_failed() -> None:
    with pytest.raises(PlanError) as info:
        plan_for(application={"framework": "onnxonly"})
    text = "\n".join(info.value.lines)
    assert info.value.exit_code == 3
    assert "framework=onnxonly: does not support training" in text
    assert "framework=fast: application.framework pins onnxonly" in text


def test_unknown_ids_in_the_spec_get_suggestions() -> None:
    with pytest.raises(SpecError) as info:
        plan_for(application={"framework": "fats"}, optimisation={"deny": {"compilers": ["jjt"]}})
    assert info.value.lines == (
        "application.framework: unknown 'fats' (did you mean 'fast'?)",
        "optimisation.deny.compilers.0: unknown 'jjt' (did you mean 'jit'?)",
    )


def test_compiler_prior_ignores_figures_measured_against_another_device() -> None:
    infer = fake_catalog().compilers["infer"]
    assert compiler_speedup(infer, "nvidia", "inference") == pytest.approx(2.0)


def test_unknown_hardware_preset_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"target.cpu.model: unknown 'cpu2' \(did you mean 'cpu1'\?\)"):
        plan_for(target={"cpu": {"arch": "x86_64", "model": "cpu2"}})
    with pytest.raises(SpecError, match=r"arm1 is aarch64 but target\.cpu\.arch is x86_64"):
        plan_for(target={"cpu": {"arch": "x86_64", "model": "arm1"}})


def test_denying_none_requires_a_compiler_and_is_reported() -> None:
    plan = plan_for(optimisation={"deny": {"compilers": ["none"]}})
    assert plan.candidates and all(c.route.compiler != "none" for c in plan.candidates)
    assert any(e.what.get("compiler") == "none" and e.reason == "denied by optimisation.deny.compilers"
               for e in plan.removed_by_selection)
