"""A small hand-made catalog: planner mechanics tested independently of the shipped data."""

from __future__ import annotations

from optimiser.catalog.models import (
    Architecture,
    Catalog,
    Compiler,
    Framework,
    Hardware,
    Install,
    Library,
    Source,
    Speedup,
)

SRC = Source(citation="test fixture")
IMAGES = Install(base_images={"cpu-x86_64": "img/cpu-x86", "cpu-aarch64": "img/cpu-arm", "nvidia": "img/gpu"})


def fake_catalog() -> Catalog:
    frameworks = {
        "fast": Framework(
            id="fast", name="Fast", version="1", cpu_archs=["x86_64", "aarch64"], accelerators=["nvidia"],
            precisions={"cpu": ["fp32", "bf16"], "nvidia": ["fp32", "fp16", "bf16"]},
            layouts={"cpu": ["NCHW", "NCHWc"], "nvidia": ["NCHW", "NHWC"]},
            libraries={"cpu": ["mkl", "openblas", "onednn"], "nvidia": ["cudnn", "cublas"]},
            efficiency={"cpu": 0.6, "nvidia": 0.6}, install=IMAGES,
        ),
        "onnxonly": Framework(
            id="onnxonly", name="OnnxOnly", version="1", modes=["inference"], cpu_archs=["x86_64"],
            precisions={"cpu": ["fp32", "int8"]}, layouts={"cpu": ["NCHW"]}, libraries={"cpu": ["openblas"]},
            efficiency={"cpu": 0.4}, reads_onnx=True, install=IMAGES,
        ),
        "old": Framework(
            id="old", name="Old", version="0.9", status="legacy", successor="fast", cpu_archs=["x86_64"],
            precisions={"cpu": ["fp32"]}, layouts={"cpu": ["NCHW"]}, libraries={"cpu": ["openblas"]},
            efficiency={"cpu": 0.9}, install=IMAGES,
        ),
    }
    compilers = {
        "jit": Compiler(
            id="jit", name="JIT", version="1", cpu_archs=["x86_64", "aarch64"], accelerators=["nvidia"],
            support={"fast": ["training", "inference"]},
            speedups=[Speedup(low=1.2, high=1.2, baseline="Fast alone", source=SRC)],
        ),
        "infer": Compiler(
            id="infer", name="InferOnly", version="1", cpu_archs=["x86_64"], accelerators=["nvidia"],
            support={"fast": ["inference"], "onnxonly": ["inference"]},
            speedups=[
                Speedup(low=2.0, baseline="framework", source=SRC),
                Speedup(low=40.0, baseline="CPU", source=SRC, use_as_prior=False),
            ],
        ),
    }
    libraries = {
        "mkl": Library(id="mkl", name="MKL", version="1", role="blas", cpu_archs=["x86_64"], efficiency={"cpu": 1.0}),
        "openblas": Library(
            id="openblas", name="OpenBLAS", version="1", role="blas", cpu_archs=["x86_64", "aarch64"],
            efficiency={"cpu": 0.9},
        ),
        "onednn": Library(id="onednn", name="oneDNN", version="1", role="dnn", cpu_archs=["x86_64", "aarch64"]),
        "cudnn": Library(id="cudnn", name="cuDNN", version="1", role="dnn", accelerators=["nvidia"]),
        "cublas": Library(id="cublas", name="cuBLAS", version="1", role="blas", accelerators=["nvidia"]),
    }
    hardware = {
        "cpu1": Hardware(id="cpu1", name="CPU One", kind="cpu", vendor="intel", arch="x86_64", cores=32,
                         peak_flops={"fp32": 2e12, "bf16": 4e12, "int8": 8e12}, mem_bandwidth=200e9),
        "arm1": Hardware(id="arm1", name="ARM One", kind="cpu", vendor="fujitsu", arch="aarch64", cores=48,
                         peak_flops={"fp32": 3e12, "fp16": 6e12}, mem_bandwidth=1e12),
        "gpu1": Hardware(id="gpu1", name="GPU One", kind="gpu", vendor="nvidia",
                         peak_flops={"fp32": 20e12, "fp16": 300e12, "bf16": 300e12}, mem_bandwidth=2e12),
    }
    architectures = {
        "net": Architecture(id="net", name="Net", task="vision", gmacs=4.0, params_m=25.0, input_shape=[3, 224, 224],
                            activation_mbytes=100.0),
    }
    return Catalog(frameworks=frameworks, compilers=compilers, libraries=libraries, hardware=hardware,
                   architectures=architectures)
