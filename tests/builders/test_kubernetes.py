"""The Kubernetes Job: pod sizing against the node's allocatable share, the plan's contents, and the API schemas."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from builders.deployment import Deployment
from builders.errors import RenderError
from builders.jobs import render_job
from builders.kubernetes import (
    DAEMONSET_CPU_MILLICORES,
    GIB,
    KUBERNETES_VERSIONS,
    MIB,
    SchemaCheckUnavailable,
    check_manifest,
    kubernetes_job,
    kubernetes_notes,
    pod_size,
    reserved_cpu_millicores,
    reserved_memory_bytes,
    schema_problems,
)
from optimiser.artifacts import deployment_from_plan
from optimiser.catalog import load_catalog
from optimiser.errors import PlanError
from optimiser.planner import make_plan
from optimiser.spec import load_spec
from tests.builders.cases import kubernetes_gpu

#: Presets no route supports in a container (so nothing is rendered for them).
NO_ROUTE = {"power9"}
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _node(cores: int, memory_gib: float | None = None, **overrides: object) -> Deployment:
    memory = int(memory_gib * GIB) if memory_gib else None
    return dataclasses.replace(kubernetes_gpu(), cpus_per_task=cores, node_memory_bytes=memory, **overrides)


@pytest.mark.parametrize(("cores", "millicores"), [(1, 60), (2, 70), (4, 80), (8, 90), (56, 210), (96, 310)])
def test_cpu_reservation_is_gkes_rule(cores: int, millicores: int) -> None:
    assert reserved_cpu_millicores(cores) == millicores


@pytest.mark.parametrize(("gib", "reserved_gib"), [(4, 1.0), (8, 1.8), (16, 2.6), (128, 9.32), (256, 11.88)])
def test_memory_reservation_is_gkes_rule_plus_eviction_threshold(gib: int, reserved_gib: float) -> None:
    assert reserved_memory_bytes(gib * GIB) == pytest.approx(reserved_gib * GIB + 100 * MIB, abs=1)


def test_the_bert_example_no_longer_asks_for_every_core() -> None:
    """The issue's case: a 56-core node's Job requested and limited all 56 CPUs, so it never scheduled."""
    dep = deployment_from_plan(make_plan(load_spec(EXAMPLES / "bert-inference-k8s.yaml")))
    container = kubernetes_job(dep)["spec"]["template"]["spec"]["containers"][0]
    assert dep.tasks_per_node * dep.cpus_per_task == 56
    assert container["resources"]["requests"] == container["resources"]["limits"] == {"cpu": "55"}
    assert {"name": "OMP_NUM_THREADS", "value": "55"} in container["env"]


@given(cores=st.integers(1, 512), memory_gib=st.one_of(st.none(), st.floats(1, 4096)))
def test_no_default_request_exceeds_the_allocatable_share(cores: int, memory_gib: float | None) -> None:
    size = pod_size(_node(cores, memory_gib))
    assert 0 < size.cpu_millicores <= size.allocatable_cpu_millicores - DAEMONSET_CPU_MILLICORES
    if memory_gib is not None and size.memory_bytes is not None:
        assert size.allocatable_memory_bytes is not None and 0 < size.memory_bytes < size.allocatable_memory_bytes


def test_memory_is_requested_when_the_node_memory_is_known() -> None:
    resources = kubernetes_job(_node(16, 64))["spec"]["template"]["spec"]["containers"][0]["resources"]
    # 64 GiB less 5.48 GiB (GKE) less 100 MiB eviction less 512 MiB for DaemonSets
    assert resources["requests"] == {"cpu": "15", "memory": f"{(64 * 1024 - 5712 - 512)}Mi"}
    assert resources["limits"] == {"cpu": "15", "memory": resources["requests"]["memory"], "nvidia.com/gpu": 1}


def test_the_spec_overrides_the_requests_up_to_the_allocatable_share() -> None:
    size = pod_size(_node(56, 256, pod_cpu=40.5, pod_memory_bytes=200 * GIB))
    assert (size.cpu, size.memory, size.threads) == ("40500m", "204800Mi", 40)
    with pytest.raises(RenderError, match=r"target\.kubernetes\.cpu: 56 does not fit a 56-core node's allocatable"):
        pod_size(_node(56, pod_cpu=56))
    with pytest.raises(RenderError, match=r"target\.kubernetes\.memory_gib: 256 GiB does not fit"):
        pod_size(_node(56, 256, pod_memory_bytes=256 * GIB))


def test_registry_credentials_are_referenced_never_inlined() -> None:
    text = render_job(_node(8, image_pull_secret="regcred"))[1]
    pod = yaml.safe_load(text)["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert "auth" not in text.lower() and "password" not in text.lower() and "dockerconfigjson" not in text
    assert "imagePullSecrets" not in render_job(_node(8))[1]


def test_job_carries_the_plans_image_command_and_environment() -> None:
    dep = deployment_from_plan(make_plan(load_spec(EXAMPLES / "bert-inference-k8s.yaml")))
    pod = kubernetes_job(dep)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == f"{dep.image_ref}"
    assert container["command"] == list(dep.run_argv)
    threads = pod_size(dep).threads
    expected_env = {key: (str(threads) if key == "OMP_NUM_THREADS" else value) for key, value in dep.env}
    assert {item["name"]: item["value"] for item in container["env"]} == expected_env
    # the plan names no volumes for a Kubernetes Job, and the manifest mounts none (no hostPath onto the node)
    assert "volumes" not in pod and "volumeMounts" not in container


# --- the API schemas (the test extra's kubernetes-validate) ---------------------------------------------------------


def _specs_rendering_kubernetes(tmp_path: Path) -> list[Path]:
    """Every example whose target is Kubernetes, and one Kubernetes spec per catalog hardware preset."""
    examples = [path for path in sorted(EXAMPLES.glob("*.yaml"))
                if yaml.safe_load(path.read_text())["target"].get("scheduler") == "kubernetes"]
    assert examples, "no example renders a Kubernetes Job"
    presets = []
    for hw in load_catalog().hardware.values():
        if hw.kind == "cpu":
            target = f"cpu: {{arch: {hw.arch}, model: {hw.id}}}"
        else:
            target = f"accelerator: {{vendor: {hw.vendor}, model: {hw.id}, count: 2}}"
        path = tmp_path / f"{hw.id}.yaml"
        path.write_text(f"name: preset-{hw.id}\napplication: {{type: inference, model: {{architecture: resnet18}}}}\n"
                        f"target: {{platform: cloud, scheduler: kubernetes, nodes: 2, {target}}}\n"
                        "container: {formats: [docker]}\n")
        presets.append(path)
    return examples + presets


def test_every_example_and_preset_renders_a_valid_job_within_the_node(tmp_path: Path) -> None:
    pytest.importorskip("kubernetes_validate", reason="extra not installed")
    specs = _specs_rendering_kubernetes(tmp_path)
    assert len(specs) > len(load_catalog().hardware)
    unplannable = set()
    for spec in specs:
        try:
            plan = make_plan(load_spec(spec))
        except PlanError as exc:
            assert exc.lines[0] == "no route satisfies the spec:", exc.lines
            unplannable.add(spec.stem)
            continue
        dep = deployment_from_plan(plan)
        name, text = render_job(dep)
        assert name == "job.k8s.yaml"
        manifest = yaml.safe_load(text)
        assert schema_problems(manifest) == [], spec.name
        size = pod_size(dep)
        assert size.cpu_millicores < size.allocatable_cpu_millicores, spec.name
        if size.memory_bytes is not None:
            assert size.allocatable_memory_bytes is not None and size.memory_bytes < size.allocatable_memory_bytes
    assert unplannable == NO_ROUTE  # renders no manifest at all; a new route there must be checked too


def test_schema_problems_name_the_version_and_field() -> None:
    pytest.importorskip("kubernetes_validate", reason="extra not installed")
    manifest = kubernetes_job(kubernetes_gpu())
    manifest["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] = 8  # an int where a string must be
    problems = schema_problems(manifest)
    assert len(problems) == len(KUBERNETES_VERSIONS)
    assert problems[0] == (f"v{KUBERNETES_VERSIONS[0]}: spec.template.spec.containers.0.env.0.value: "
                           "8 is not of type 'string', 'null'")
    with pytest.raises(RenderError, match=r"job\.k8s\.yaml: v1\.30: spec: Additional properties are not allowed"):
        check_manifest(render_job(kubernetes_gpu())[1] + "  surprise: 1\n")


def test_without_the_extra_the_check_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes_validate", None)
    with pytest.raises(SchemaCheckUnavailable, match="extra not installed"):
        schema_problems(kubernetes_job(kubernetes_gpu()))


def test_validate_strict_checks_the_rendered_job() -> None:
    pytest.importorskip("kubernetes_validate", reason="extra not installed")
    from cli.main import app

    result = CliRunner().invoke(app, ["validate", "--strict", str(EXAMPLES / "bert-inference-k8s.yaml")])
    assert result.exit_code == 0, result.output
    assert f"ok: job.k8s.yaml: valid batch/v1 Job for Kubernetes {', '.join(KUBERNETES_VERSIONS)}" in result.output


def test_validate_strict_without_the_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.main import app

    monkeypatch.setitem(sys.modules, "kubernetes_validate", None)
    result = CliRunner().invoke(app, ["validate", "--strict", str(EXAMPLES / "bert-inference-k8s.yaml")])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == ["error: kubernetes schema check: extra not installed "
                      "(pip install 'appopt[test]' brings kubernetes-validate)"]


SPEC = """\
name: bert-serving
application: {type: inference, model: {architecture: bert_base}}
target:
  platform: cloud
  cpu: {arch: x86_64, model: xeon-8480, cores: 56, memory_gib: 256}
  scheduler: kubernetes
  kubernetes: %s
container: {formats: [docker], registry: registry.example.org/nlp/bert}
"""


def test_spec_sizes_and_overrides_reach_the_manifest(tmp_path: Path) -> None:
    from cli.main import app

    (tmp_path / "default.yaml").write_text(SPEC % "{image_pull_secret: regcred}")
    (tmp_path / "override.yaml").write_text(SPEC % "{cpu: 30, memory_gib: 100, image_pull_secret: regcred}")
    jobs, outputs = {}, {}
    for name in ("default", "override"):
        result = CliRunner().invoke(app, ["plan", str(tmp_path / f"{name}.yaml"), "-o", str(tmp_path / name)])
        assert result.exit_code == 0, result.output
        outputs[name] = result.output
        jobs[name] = yaml.safe_load((tmp_path / name / "job.k8s.yaml").read_text())["spec"]["template"]["spec"]
    # 256 GiB less GKE's 11.88 GiB and the 100 MiB eviction threshold, less 512 MiB for DaemonSets
    assert jobs["default"]["containers"][0]["resources"]["requests"] == {"cpu": "55", "memory": "249366Mi"}
    assert jobs["override"]["containers"][0]["resources"]["limits"] == {"cpu": "30", "memory": "102400Mi"}
    assert jobs["override"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert ("note: Kubernetes pod requests 55 of 56 cores (55.79 allocatable, GKE's reservation rule) and 249366Mi "
            "of 256 GiB memory; override with target.kubernetes") in outputs["default"]


def test_an_override_beyond_the_node_is_one_error_line(tmp_path: Path) -> None:
    from cli.main import app

    (tmp_path / "app.yaml").write_text(SPEC % "{cpu: 56}")
    result = CliRunner().invoke(app, ["plan", str(tmp_path / "app.yaml"), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert errors == ["error: target.kubernetes.cpu: 56 does not fit a 56-core node's allocatable 55790m "
                      "(its cores less GKE's reservation rule)"]
    assert not (tmp_path / "out" / "job.k8s.yaml").exists()


def test_the_data_claim_is_mounted_read_only_at_the_data_path(tmp_path: Path) -> None:
    spec = SPEC.replace("application: {type: inference, model: {architecture: bert_base}}",
                        "application: {type: inference, model: {architecture: bert_base}, "
                        "data: {path: /datasets/squad/dev.npz}}")
    (tmp_path / "app.yaml").write_text(spec % "{data_claim: squad-data}")
    dep = deployment_from_plan(make_plan(load_spec(tmp_path / "app.yaml")))
    pod = kubernetes_job(dep)["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "squad-data", "readOnly": True}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/datasets/squad", "readOnly": True}]
    if _has_validator():
        assert schema_problems(kubernetes_job(dep)) == []
    without_claim = dataclasses.replace(dep, data_claim=None)
    assert "volumes" not in kubernetes_job(without_claim)["spec"]["template"]["spec"]
    assert ("application.data.path '/datasets/squad/dev.npz' is not mounted into the Kubernetes pod: name the "
            "PersistentVolumeClaim that holds it in target.kubernetes.data_claim") in kubernetes_notes(without_claim)
    with pytest.raises(RenderError, match=r"application\.data\.path: 'squad' must be absolute"):
        kubernetes_job(dataclasses.replace(dep, data_path="squad"))


def _has_validator() -> bool:
    try:
        import kubernetes_validate  # noqa: F401
    except ImportError:
        return False
    return True


def test_too_little_memory_names_the_field() -> None:
    with pytest.raises(RenderError, match=r"^target\.cpu\.memory_gib: leaves 0 MiB for the pod"):
        pod_size(_node(4, 0.5))
    with pytest.raises(RenderError, match=r"^target\.kubernetes\.memory_gib: leaves 10 MiB for the pod"):
        pod_size(_node(4, 64, pod_memory_bytes=10 * MIB))
