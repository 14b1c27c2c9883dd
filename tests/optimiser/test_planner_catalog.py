"""The seeds' rules hold on the shipped catalog, for every ranked route of every example-like target."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from analysis.units import Unit
from optimiser.catalog import load_catalog
from optimiser.planner import Plan, make_plan
from optimiser.spec import load_spec, parse_spec
from optimiser.workload import workload_for

EXAMPLES = Path(__file__).parents[2] / "examples"
INFERENCE_ONLY = {"tensorrt", "tvm", "openvino", "onnc"}


def plan_for(mode: str, target: dict[str, Any], **application: Any) -> Plan:
    doc = {
        "name": "t",
        "application": {"type": mode, "model": {"architecture": "resnet50"}, "batch_size": 32, **application},
        "target": target,
    }
    return make_plan(parse_spec(yaml.safe_dump(doc)))


ARM_CPU = {"cpu": {"arch": "aarch64", "model": "a64fx"}, "scheduler": "pbs"}
X86_CPU = {"cpu": {"arch": "x86_64", "model": "xeon-8380"}}
A100 = {
    "cpu": {"arch": "x86_64", "model": "xeon-8380"},
    "accelerator": {"vendor": "nvidia", "model": "a100", "count": 4},
}


@pytest.mark.parametrize("mode", ["training", "inference"])
def test_aarch64_cpu_only_never_gets_x86_or_nvidia_components(mode: str) -> None:
    plan = plan_for(mode, ARM_CPU)
    for c in plan.candidates:
        assert not {"mkl", "cudnn", "cublas"} & set(c.route.libraries), c.route.key
        assert c.route.compiler != "tensorrt"
    assert any(e.what.get("library") == "mkl" for e in plan.excluded)


@pytest.mark.parametrize("target", [X86_CPU, A100, ARM_CPU])
def test_training_never_gets_an_inference_only_compiler(target: dict[str, Any]) -> None:
    plan = plan_for("training", target)
    assert not {c.route.compiler for c in plan.candidates} & INFERENCE_ONLY
    assert all(c.route.framework != "onnxruntime" for c in plan.candidates)
    # the appopt runtime trains (runtime/training), on CPUs only
    ours = {c.route.framework for c in plan.candidates} & {"appopt-runtime"}
    assert bool(ours) == (target is not A100)


def test_cpu_targets_never_get_gpu_libraries_and_gpu_targets_use_cudnn() -> None:
    for c in plan_for("inference", X86_CPU).candidates:
        assert not {"cudnn", "cublas"} & set(c.route.libraries)
        assert c.route.compiler != "tensorrt"
    gpu = plan_for("training", A100)
    assert all("cudnn" in c.route.libraries for c in gpu.candidates if c.route.framework != "scikit-learn")


def test_xla_only_trains_with_tensorflow() -> None:
    plan = plan_for("training", A100)
    assert {c.route.framework for c in plan.candidates if c.route.compiler == "xla"} <= {"tensorflow"}


def test_gpu_inference_can_use_tensorrt_and_reduced_precision_wins() -> None:
    plan = plan_for("inference", A100)
    assert any(c.route.compiler == "tensorrt" for c in plan.candidates)
    assert plan.choice.route.precision in ("fp16", "bf16")


def test_legacy_frameworks_only_when_pinned() -> None:
    catalog = load_catalog()
    legacy = {f.id for f in catalog.frameworks.values() if f.status != "maintained"}
    assert {"mxnet", "theano", "cntk"} <= legacy
    plan = plan_for("training", X86_CPU)
    assert not legacy & {c.route.framework for c in plan.candidates}
    pinned = plan_for("training", X86_CPU, framework="mxnet")
    assert {c.route.framework for c in pinned.candidates} == {"mxnet"}


def test_onnx_model_only_goes_to_frameworks_that_read_onnx() -> None:
    plan = make_plan(load_spec(EXAMPLES / "onnx-mlp-local.yaml"))
    readers = {f.id for f in load_catalog().frameworks.values() if f.reads_onnx}
    assert {c.route.framework for c in plan.candidates} <= readers
    assert "appopt-runtime" in {c.route.framework for c in plan.candidates}


def test_int8_only_when_asked() -> None:
    assert all(c.route.precision != "int8" for c in plan_for("inference", X86_CPU).candidates)
    asked = plan_for("inference", X86_CPU, precision="int8")
    assert {c.route.precision for c in asked.candidates} == {"int8"}


def test_plans_are_deterministic() -> None:
    spec = load_spec(EXAMPLES / "bert-inference-k8s.yaml")
    first, second = make_plan(spec), make_plan(spec)
    assert [c.route.key for c in first.candidates] == [c.route.key for c in second.candidates]


def test_single_process_trainers_are_not_planned_across_nodes() -> None:
    one_node = plan_for("training", {**X86_CPU, "scheduler": "slurm"}, framework="appopt-runtime")
    assert one_node.choice.route.framework == "appopt-runtime"
    many = plan_for("training", {**X86_CPU, "scheduler": "slurm", "nodes": 2}, framework="auto")
    assert "appopt-runtime" not in {c.route.framework for c in many.candidates}
    assert [e.reason for e in many.excluded if e.what.get("framework") == "appopt-runtime"] == [
        "trains in one process; the spec asks for 2 (2 node(s) x 1 task(s))"
    ]
    # frameworks with distributed training stay, and inference on several nodes (replicas) stays open to all
    assert {c.route.framework for c in many.candidates} >= {"pytorch", "tensorflow"}
    replicas = plan_for(  # (with a command that brings its model: the runtime runs model files only)
        "inference", {**X86_CPU, "scheduler": "slurm", "nodes": 2}, framework="appopt-runtime",
        command=["python3", "serve.py"],
    )
    assert replicas.choice.route.framework == "appopt-runtime"


def test_scikit_learn_is_offered_only_models_it_can_build() -> None:
    """scikit-learn builds dense networks only (MLPClassifier): a MobileNet's training plan excludes it, naming the
    layers it cannot build, where before its bare prior ranked it first; a model of dense layers and a softmax keeps
    it."""
    spec = parse_spec(yaml.safe_dump({
        "name": "t", "application": {"type": "training", "model": {"architecture": "mobilenet_v2"}, "batch_size": 8},
        "target": X86_CPU,
    }))  # fmt: skip
    convnet = make_plan(spec)
    assert all(c.route.framework != "scikit-learn" for c in convnet.candidates)
    reasons = {e.reason for e in convnet.excluded if e.what.get("framework") == "scikit-learn"}
    lacks = "the model has conv, dwconv, pool layers"
    assert reasons == {f"builds models of gemm, eltwise, softmax, noop layers only; {lacks}"}
    layers = (Unit("gemm", {"m": 1, "k": 64, "n": 32, "act": 1, "init_w": 1}), Unit("softmax", {"rows": 1, "cols": 8}))
    dense = replace(workload_for(spec, load_catalog()), units=layers)
    assert any(c.route.framework == "scikit-learn" for c in make_plan(spec, workload=dense).candidates)
