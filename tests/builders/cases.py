"""Named deployments the golden and property tests render: one per scheduler, covering GPU/CPU, x86/ARM, both
formats, a wheelhouse with a slimmer runtime base, and an image with nothing to build."""

from __future__ import annotations

from builders.deployment import Deployment

NGC_PYTORCH = "nvcr.io/nvidia/pytorch:24.01-py3"
COMPILE = ("python3", "-m", "runtime", "compile", "/opt/app/model.onnx", "-o", "/opt/app/compiled")
RUN = ("python3", "-m", "runtime", "run", "/opt/app/compiled", "--random", "--repeat", "20")
LABELS = (
    ("org.opencontainers.image.version", "1.0"),
    ("io.appopt.route", "appopt-runtime+none+onednn/fp32/nchw"),
    ("io.appopt.predicted-step-seconds", "0.0123"),
)


def gpu_training() -> Deployment:
    """ResNet-50 training on a GPU Slurm cluster: 2 nodes x 4 GPUs, both image formats."""
    return Deployment(
        app_name="resnet50-train",
        base_image=NGC_PYTORCH,
        accelerator="nvidia",
        gpus_per_node=4,
        apt_packages=("libgomp1",),
        pip_packages=("onnx>=1.16", "numpy"),
        env=(("OMP_NUM_THREADS", "8"), ("APPOPT_PRECISION", "fp16")),
        labels=LABELS,
        model_file="model.onnx",
        app_files=("runtime",),
        compile_argv=COMPILE,
        run_argv=RUN,
        scheduler="slurm",
        nodes=2,
        tasks_per_node=4,
        cpus_per_task=8,
        walltime="1-12:00:00",
        partition="gpu",
        account="proj42",
        launcher="srun",
    )


def cpu_slurm() -> Deployment:
    """One CPU task on one Slurm node, Singularity only, no build stage work beyond apt."""
    return Deployment(
        app_name="Digits MLP (CPU)",
        base_image="python:3.11-slim",
        apt_packages=("libgomp1",),
        env=(("OMP_NUM_THREADS", "16"),),
        run_argv=("python3", "/work/train.py", "--epochs", "3"),
        formats=("singularity",),
        scheduler="slurm",
        cpus_per_task=16,
        walltime="00:30:00",
        partition="cpu",
    )


def pbs_arm() -> Deployment:
    """An A64FX-like ARM CPU cluster with PBS Pro: air-gapped (wheelhouse), slim runtime base, mpirun over 4 nodes."""
    return Deployment(
        app_name="bert-a64fx",
        base_image="python:3.11",
        runtime_image="python:3.11-slim",
        arch="aarch64",
        pip_packages=("onnx", "numpy"),
        wheelhouse="wheelhouse",
        env=(("OMP_NUM_THREADS", "12"), ("XOS_MMM_L_HPAGE_TYPE", "none")),
        labels=LABELS,
        model_file="model.onnx",
        app_files=("runtime",),
        compile_argv=COMPILE,
        run_argv=RUN,
        scheduler="pbs",
        nodes=4,
        tasks_per_node=4,
        cpus_per_task=12,
        walltime="02:00:00",
        partition="a64fx",
        launcher="mpirun",
    )


def torque_gpu() -> Deployment:
    """Torque with 2 GPUs per node on 2 nodes, launcher left to the default, Docker image only."""
    return Deployment(
        app_name="inception-v3",
        base_image=NGC_PYTORCH,
        accelerator="nvidia",
        gpus_per_node=2,
        run_argv=("python3", "train.py"),
        formats=("docker",),
        scheduler="torque",
        nodes=2,
        tasks_per_node=2,
        cpus_per_task=4,
        account="ml-team",
    )


def kubernetes_gpu() -> Deployment:
    """BERT inference as a Kubernetes Job with one NVIDIA GPU, pushed to a registry."""
    return Deployment(
        app_name="bert-inference",
        base_image=NGC_PYTORCH,
        accelerator="nvidia",
        gpus_per_node=1,
        env=(("OMP_NUM_THREADS", "8"),),
        labels=LABELS,
        run_argv=("python3", "-m", "runtime", "run", "/opt/app/compiled"),
        formats=("docker",),
        image_ref="registry.example.org/team/bert-inference:1.0",
        scheduler="kubernetes",
        cpus_per_task=8,
        walltime="02:30:00",
    )


def local_plain() -> Deployment:
    """Nothing to build (a busybox-like base): one stage, run here with run.sh."""
    return Deployment(
        app_name="hello",
        base_image="localhost/base:busybox",
        run_argv=("echo", "hello"),
        formats=("docker",),
    )


CONTAINER_CASES = {"gpu_training": gpu_training, "pbs_arm": pbs_arm, "local_plain": local_plain}
JOB_CASES = {
    "slurm_gpu_multinode": gpu_training,
    "slurm_cpu": cpu_slurm,
    "pbs": pbs_arm,
    "torque": torque_gpu,
    "kubernetes_gpu": kubernetes_gpu,
    "none": local_plain,
}
