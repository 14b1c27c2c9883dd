"""Job files per scheduler: golden text, bash -n, the Kubernetes structure, and the scripts run for real (bash,
with stubbed launchers and container runtimes) to check what the application receives."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from builders.errors import RenderError
from builders.jobs import render_job
from tests.builders.cases import (
    JOB_CASES,
    RUN,
    cpu_slurm,
    gpu_training,
    kubernetes_gpu,
    local_plain,
    pbs_arm,
    torque_gpu,
)
from tests.builders.golden import assert_golden
from tests.builders.stubs import bash_syntax_ok, run_script

DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@pytest.mark.parametrize("case", sorted(JOB_CASES))
def test_job_matches_golden(case: str) -> None:
    name, text = render_job(JOB_CASES[case]())
    assert_golden(f"{case}.{name}", text)


@pytest.mark.parametrize("case", sorted(set(JOB_CASES) - {"kubernetes_gpu"}))
def test_job_scripts_pass_bash_n(case: str) -> None:
    bash_syntax_ok(render_job(JOB_CASES[case]())[1])


def _directives(text: str, prefix: str) -> list[str]:
    return [line[len(prefix) + 1 :] for line in text.splitlines() if line.startswith(prefix + " ")]


def test_slurm_gpu_directives_and_srun_across_nodes(tmp_path: Path) -> None:
    name, text = render_job(gpu_training())
    assert name == "job.slurm"
    assert _directives(text, "#SBATCH") == [
        "--job-name=resnet50-train",
        "--nodes=2",
        "--ntasks-per-node=4",
        "--cpus-per-task=8",
        "--gres=gpu:4",
        "--time=1-12:00:00",
        "--partition=gpu",
        "--account=proj42",
        "--output=resnet50-train-%j.out",
    ]
    assert "srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=8 " in text
    run = run_script(text, tmp_path, extra_args=("--steps", "5"), container="singularity")
    assert run.returncode == 0, run.stderr
    assert run.argv == [
        "exec",
        "--nv",
        "--bind",
        str(tmp_path),
        "--pwd",
        str(tmp_path),
        "resnet50-train.sif",
        *RUN,
        "--steps",
        "5",
    ]


def test_slurm_cpu_has_no_gpu_flags_and_no_launcher(tmp_path: Path) -> None:
    text = render_job(cpu_slurm())[1]
    assert not any("gres" in d for d in _directives(text, "#SBATCH"))
    assert "--nv" not in text and "srun" not in text
    run = run_script(text, tmp_path, check_env="OMP_NUM_THREADS", container="singularity")
    assert run.returncode == 0, run.stderr
    assert run.argv[:2] == ["exec", "--bind"] and run.argv[-4:] == list(cpu_slurm().run_argv)
    assert run.env_value == "16"


def test_container_none_runs_the_application_directly(tmp_path: Path) -> None:
    dep = dataclasses.replace(cpu_slurm(), run_argv=("singularity", "direct"))  # the stub records the argv
    text = render_job(dep)[1]
    (tmp_path / "stub-bin").mkdir()
    run = run_script(text, tmp_path, container="none")
    assert run.returncode == 0, run.stderr
    assert run.argv == ["direct"]


#: A python3 stand-in that appends its argv and PYTHONPATH, one line per call (a `-c` import check passes unlogged).
_PYTHON_STUB = (
    '[ "${1:-}" = -c ] && exit 0\n'
    'printf "%s|" "$@" >> "$WORKDIR_LOG"; printf "PYTHONPATH=%s\\n" "$PYTHONPATH" >> "$WORKDIR_LOG"\n'
)


@pytest.mark.parametrize("case", ["slurm_cpu", "pbs", "none"])
def test_without_a_container_the_plan_directory_stands_in_for_the_app_dir(case: str, tmp_path: Path) -> None:
    dep = dataclasses.replace(
        JOB_CASES[case](),
        run_argv=("python3", "/opt/app/serve.py", "--model=/opt/app/x", "/opt/application"),
        compile_argv=("python3", "-m", "runtime", "compile", "/opt/app/model.onnx", "-o", "/opt/app/compiled"),
    )
    text = render_job(dep)[1]
    (tmp_path / "stub-bin").mkdir()
    stub = tmp_path / "stub-bin" / "python3"
    stub.write_text("#!/bin/bash\n" + _PYTHON_STUB.replace("WORKDIR_LOG", "HOME/log"))
    stub.chmod(0o755)
    run = run_script(text, tmp_path, extra_args=("--extra",), container="none")
    assert run.returncode == 0, run.stderr
    calls = (tmp_path / "log").read_text().splitlines()
    here = str(tmp_path)
    assert calls[0] == f"-m|runtime|compile|{here}/model.onnx|-o|{here}/compiled|PYTHONPATH={here}"
    # only words that start with the app directory move: an option's value or a longer path stays as written
    app_call = f"{here}/serve.py|--model=/opt/app/x|/opt/application|--extra|PYTHONPATH={here}"
    assert calls[1:] == [app_call]


def test_pbs_pro_select_and_mpirun(tmp_path: Path) -> None:
    name, text = render_job(pbs_arm())
    assert name == "job.pbs"
    assert _directives(text, "#PBS") == [
        "-N bert-a64fx",
        "-l select=4:ncpus=48:mpiprocs=4",
        "-l walltime=02:00:00",
        "-q a64fx",
        "-j oe",
    ]
    assert 'mpirun -np 16 -hostfile "$PBS_NODEFILE" ' in text
    run = run_script(text, tmp_path, container="singularity")
    assert run.returncode == 0, run.stderr
    assert run.argv == ["exec", "--bind", str(tmp_path), "--pwd", str(tmp_path), "bert-a64fx.sif", *RUN]


def test_torque_nodes_ppn_gpus(tmp_path: Path) -> None:
    text = render_job(torque_gpu())[1]
    assert _directives(text, "#PBS") == [
        "-N inception-v3",
        "-l nodes=2:ppn=8:gpus=2",
        "-l walltime=01:00:00",
        "-A ml-team",
        "-j oe",
    ]
    assert "mpirun -np 4 " in text  # no launcher given: the default for a multi-task PBS job
    run = run_script(text, tmp_path, container="singularity")
    assert run.returncode == 0, run.stderr
    assert run.argv[:2] == ["exec", "--nv"]
    # a docker-only deployment runs its registry image through singularity's docker:// transport
    assert run.argv[-3] == "docker://inception-v3:latest"


def test_kubernetes_job_structure() -> None:
    name, text = render_job(kubernetes_gpu())
    assert name == "job.k8s.yaml"
    job = yaml.safe_load(text)
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert DNS_1123_LABEL.match(job["metadata"]["name"])
    assert job["metadata"]["annotations"]["io.appopt.route"] == "appopt-runtime+none+onednn/fp32/nchw"
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    (container,) = pod["containers"]
    assert container["image"] == "registry.example.org/team/bert-inference:1.0"
    assert container["command"] == list(kubernetes_gpu().run_argv)
    # 8 cores less the system reservation (90m) and the DaemonSet allowance (200m), in whole cores; threads follow
    assert container["resources"]["limits"] == {"cpu": "7", "nvidia.com/gpu": 1}
    assert container["resources"]["requests"] == {"cpu": "7"}
    assert container["env"] == [{"name": "OMP_NUM_THREADS", "value": "7"}]
    assert job["spec"]["activeDeadlineSeconds"] == 9000
    assert "completionMode" not in job["spec"]
    assert "&" not in text and "*" not in text  # no YAML anchors/aliases


def test_kubernetes_multi_node_is_an_indexed_job_on_arm() -> None:
    dep = dataclasses.replace(kubernetes_gpu(), nodes=3, arch="aarch64", image_ref=None, app_name="9 Lives!")
    job = yaml.safe_load(render_job(dep)[1])
    assert job["metadata"]["name"] == "app-9-lives"
    assert (job["spec"]["completions"], job["spec"]["parallelism"], job["spec"]["completionMode"]) == (3, 3, "Indexed")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert (container["image"], container["imagePullPolicy"]) == ("app-9-lives:latest", "IfNotPresent")
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}


def test_run_sh_uses_docker_with_the_image_entrypoint_replaced_by_the_argv(tmp_path: Path) -> None:
    name, text = render_job(local_plain())
    assert name == "run.sh"
    run = run_script(text, tmp_path, extra_args=("again",), container="docker")
    assert run.returncode == 0, run.stderr
    assert run.argv == [
        "run",
        "--rm",
        "-v",
        f"{tmp_path}:{tmp_path}",
        "-w",
        str(tmp_path),
        "--entrypoint",
        "echo",
        "hello:latest",
        "hello",
        "again",
    ]


def test_run_sh_rejects_an_unknown_container(tmp_path: Path) -> None:
    run = run_script(render_job(local_plain())[1], tmp_path, container="lxc")
    assert run.returncode == 2 and "APPOPT_CONTAINER: unknown runtime 'lxc'" in run.stderr
    assert run.argv == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"partition": "gpu\n#SBATCH --wrap=x"}, "partition"),
        ({"account": "a b"}, "account"),
        ({"walltime": "90 minutes"}, "walltime"),
        ({"launcher": "srun", "scheduler": "pbs"}, "launcher"),
        ({"run_argv": ()}, "run_argv"),
        ({"nodes": 0}, "nodes"),
        ({"accelerator": None}, "gpus_per_node"),
        ({"accelerator": "acme"}, "accelerator"),
        ({"scheduler": "kubernetes", "launcher": None, "formats": ("singularity",)}, "formats"),
    ],
)
def test_bad_job_fields_are_named(change: dict[str, object], field: str) -> None:
    with pytest.raises(RenderError) as info:
        render_job(dataclasses.replace(gpu_training(), **change))  # type: ignore[arg-type]
    assert [line.split(":")[0] for line in info.value.lines] == [field]
