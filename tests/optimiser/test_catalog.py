"""The shipped catalog: it loads, its hardware rules and seed facts hold, user catalogs overlay it, and broken ones
fail with one clear line per problem. Also the detection of the local machine."""

from __future__ import annotations

import math
import os
import platform
import textwrap
import time
from pathlib import Path

import pytest

from optimiser.catalog import CatalogError, install_key, load_catalog, read_catalog
from optimiser.catalog.local import CpuInfo, detect_hardware, detect_local_hardware, flops_per_cycle, parse_cpuinfo
from optimiser.catalog.models import Catalog, DeviceKey

CPU_ARCHS = ("x86_64", "aarch64", "ppc64le")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


# --------------------------------------------------------------------------------------------------------------------
# Loading and contents
# --------------------------------------------------------------------------------------------------------------------


def test_every_entry_the_issue_names_is_present(catalog: Catalog) -> None:
    assert {
        "tensorflow",
        "pytorch",
        "mxnet",
        "cntk",
        "chainer",
        "caffe",
        "caffe2",
        "theano",
        "scikit-learn",
        "onnxruntime",
        "appopt-runtime",
    } <= set(catalog.frameworks)
    assert {"xla", "tvm", "tensor-comprehensions", "glow", "ngraph", "openvino", "plaidml", "onnc", "tensorrt"} <= set(
        catalog.compilers
    )
    assert {"cudnn", "cublas", "onednn", "mkl", "openblas", "atlas", "blis", "armcl", "armpl"} <= set(catalog.libraries)
    assert {
        "xeon-8380",
        "xeon-8480",
        "epyc-7763",
        "epyc-9654",
        "a64fx",
        "graviton3",
        "power9",
        "v100",
        "a100",
        "a100-80gb",
        "h100",
    } <= set(catalog.hardware)
    assert {
        "resnet50",
        "resnet152",
        "resnet18",
        "inception_v3",
        "inception_v4",
        "alexnet",
        "googlenet",
        "squeezenet",
        "vgg16",
        "vgg19",
        "mobilenet_v2",
        "densenet121",
        "bert_base",
        "bert_large",
        "transformer",
        "gpt2",
    } <= set(catalog.architectures)


def test_every_entry_cites_a_source(catalog: Catalog) -> None:
    for section in ("frameworks", "compilers", "libraries", "hardware", "architectures"):
        for entry_id, entry in getattr(catalog, section).items():
            assert entry.sources, f"{section}.{entry_id} has no source"
            assert all(source.citation.strip() for source in entry.sources)


def test_load_is_cached_and_consistent(catalog: Catalog) -> None:
    assert load_catalog() is catalog
    assert catalog.reference_problems() == []


def test_legacy_entries_name_a_successor_that_exists(catalog: Catalog) -> None:
    expected = {"mxnet": "pytorch", "chainer": "pytorch", "caffe2": "pytorch", "theano": "pytorch"}
    for framework_id, successor in expected.items():
        framework = catalog.get_framework(framework_id)
        assert framework.status == "legacy" and framework.successor == successor
    assert catalog.get_compiler("ngraph").successor == "openvino"
    for legacy in ("cntk", "caffe", "caffe2"):
        assert catalog.get_framework(legacy).status == "legacy"
    for legacy in ("tensor-comprehensions", "plaidml", "ngraph"):
        assert catalog.get_compiler(legacy).status == "legacy"
    for maintained in ("tensorflow", "pytorch", "onnxruntime", "scikit-learn", "appopt-runtime"):
        assert catalog.get_framework(maintained).status == "maintained"


def test_lookups_accept_aliases_and_suggest_on_typos(catalog: Catalog) -> None:
    assert catalog.get_framework("Keras").id == "tensorflow"
    assert catalog.get_framework("torch").id == "pytorch"
    assert catalog.get_framework("gluon").id == "mxnet"
    assert catalog.get_architecture("ResNet-50").id == "resnet50"
    assert catalog.get_hardware("A100-40GB").id == "a100"
    with pytest.raises(CatalogError) as raised:
        catalog.get_framework("tensorfow")
    assert raised.value.lines == (raised.value.lines[0],)
    assert "did you mean 'tensorflow'" in raised.value.lines[0]
    with pytest.raises(CatalogError, match="did you mean 'resnet152'"):
        catalog.get_architecture("resnet125")
    with pytest.raises(CatalogError, match="unknown hardware preset 'tpu-v4'"):
        catalog.get_hardware("tpu-v4")


# --------------------------------------------------------------------------------------------------------------------
# Hardware rules
# --------------------------------------------------------------------------------------------------------------------


def test_library_hardware_rules(catalog: Catalog) -> None:
    libraries = catalog.libraries
    assert libraries["mkl"].cpu_archs == ["x86_64"] and not libraries["mkl"].accelerators
    for gpu_only in ("cudnn", "cublas"):
        assert libraries[gpu_only].accelerators == ["nvidia"] and libraries[gpu_only].cpu_archs == []
    for arm_only in ("armcl", "armpl"):
        assert libraries[arm_only].cpu_archs == ["aarch64"] and not libraries[arm_only].accelerators
    assert sorted(libraries["onednn"].cpu_archs) == ["aarch64", "x86_64"]
    assert sorted(libraries["openblas"].cpu_archs) == sorted(CPU_ARCHS)
    assert {library.role for library in libraries.values()} == {"dnn", "blas"}


def test_tensorrt_needs_nvidia(catalog: Catalog) -> None:
    tensorrt = catalog.get_compiler("tensorrt")
    assert tensorrt.accelerators == ["nvidia"] and tensorrt.cpu_archs == []
    assert not tensorrt.runs_on("cpu", "x86_64") and tensorrt.runs_on("nvidia")


@pytest.mark.parametrize("arch", CPU_ARCHS)
def test_cpu_routes_never_get_gpu_or_foreign_libraries(catalog: Catalog, arch: str) -> None:
    for framework in catalog.frameworks.values():
        chosen = {library.id for library in catalog.libraries_for(framework, "cpu", arch)}  # type: ignore[arg-type]
        assert not chosen & {"cudnn", "cublas"}
        if arch != "x86_64":
            assert "mkl" not in chosen
        if arch != "aarch64":
            assert not chosen & {"armcl", "armpl"}


def test_gpu_routes_use_gpu_libraries(catalog: Catalog) -> None:
    for framework in catalog.frameworks.values():
        if "nvidia" in framework.accelerators:
            chosen = {library.id for library in catalog.libraries_for(framework, "nvidia")}
            assert chosen == {"cudnn", "cublas"}, framework.id


def test_framework_device_tables_are_complete(catalog: Catalog) -> None:
    """Every deployable device has precisions, layouts, libraries and an efficiency prior in (0, 1]."""
    for framework in catalog.frameworks.values():
        devices: list[DeviceKey] = [*framework.accelerators]
        if framework.cpu_archs:
            devices.append("cpu")
        for device in devices:
            assert framework.precisions.get(device), (framework.id, device)
            assert framework.layouts.get(device), (framework.id, device)
            assert framework.libraries.get(device), (framework.id, device)
            assert 0 < framework.efficiency.get(device, 0) <= 1, (framework.id, device)
    for library in catalog.libraries.values():
        library_devices: list[DeviceKey] = [*library.accelerators]
        if library.cpu_archs:
            library_devices.append("cpu")
        for device in library_devices:
            assert 0 < library.efficiency.get(device, 0) <= 1, library.id


def test_our_runtime_is_cpu_fp32_and_trains(catalog: Catalog) -> None:
    ours = catalog.get_framework("appopt-runtime")
    assert ours.reads_onnx and ours.modes == ["training", "inference"] and not ours.accelerators
    assert sorted(ours.cpu_archs) == ["aarch64", "x86_64"]
    assert ours.precisions == {"cpu": ["fp32"]} and ours.layouts == {"cpu": ["NCHW"]}
    assert ours.libraries == {"cpu": ["openblas"]}
    sklearn = catalog.get_framework("scikit-learn")
    assert not sklearn.accelerators and set(sklearn.modes) == {"training", "inference"}


# --------------------------------------------------------------------------------------------------------------------
# The seed's framework × compiler matrix and speedups
# --------------------------------------------------------------------------------------------------------------------


def test_seed_support_matrix(catalog: Catalog) -> None:
    xla = catalog.get_compiler("xla")
    # the seed matrix has TensorFlow only; ONNX models reach XLA through JAX (runtime/engine_jax.py)
    assert list(xla.support) == ["tensorflow", "onnxruntime"] and "training" in xla.modes_with("tensorflow")
    assert xla.modes_with("onnxruntime") == ["inference"]
    assert xla.modes_with("pytorch") == []
    for inference_only in ("tensorrt", "tvm", "openvino", "onnc"):
        compiler = catalog.get_compiler(inference_only)
        assert compiler.modes == ["inference"]
        assert all(modes == ["inference"] for modes in compiler.support.values()), inference_only
    assert "training" in catalog.get_compiler("glow").modes_with("pytorch")
    ngraph = catalog.get_compiler("ngraph")
    for framework_id in ("tensorflow", "pytorch", "mxnet"):
        assert sorted(ngraph.modes_with(framework_id)) == ["inference", "training"]
    assert set(catalog.get_compiler("tensor-comprehensions").support) == {"caffe2", "pytorch"}
    assert {"tensorflow", "pytorch", "mxnet"} <= set(catalog.get_compiler("tvm").support)


def test_compiler_modes_cover_their_matrix_rows(catalog: Catalog) -> None:
    for compiler in catalog.compilers.values():
        for framework_id, modes in compiler.support.items():
            assert modes and set(modes) <= set(compiler.modes), (compiler.id, framework_id)


def _speedup(catalog: Catalog, compiler_id: str, baseline: str) -> tuple[float, float | None, bool]:
    matches = [s for s in catalog.get_compiler(compiler_id).speedups if s.baseline == baseline]
    assert len(matches) == 1, (compiler_id, baseline)
    return matches[0].low, matches[0].high, matches[0].use_as_prior


def test_seed_speedups_with_sources(catalog: Catalog) -> None:
    assert _speedup(catalog, "xla", "tensorflow") == (1.15, None, True)
    tvm = catalog.get_compiler("tvm-tuned").speedups[0]  # the claim needs MetaSchedule's search
    assert not catalog.get_compiler("tvm").speedups and catalog.get_compiler("tvm").speed_prior is not None
    assert (tvm.low, tvm.high) == (1.2, 3.8) and math.isclose(tvm.typical, math.sqrt(1.2 * 3.8))
    assert _speedup(catalog, "glow", "tensorflow+xla")[0] == 2.7
    assert _speedup(catalog, "glow", "tvm")[0] == 1.3
    assert _speedup(catalog, "tensorrt", "CPU-only platform") == (40.0, None, False)
    for compiler in catalog.compilers.values():
        for speedup in compiler.speedups:
            assert speedup.source.citation and speedup.low >= 1


# --------------------------------------------------------------------------------------------------------------------
# Hardware presets
# --------------------------------------------------------------------------------------------------------------------


def test_gpu_peaks_match_the_vendor_sheets(catalog: Catalog) -> None:
    a100, v100, h100 = (catalog.get_hardware(i) for i in ("a100", "v100", "h100"))
    assert a100.peak_flops == {"fp32": 19.5e12, "fp16": 312e12, "bf16": 312e12, "int8": 624e12}
    assert a100.mem_bandwidth == 1555e9 and catalog.get_hardware("a100-80gb").mem_bandwidth == 2039e9
    assert v100.peak("fp32") == 15.7e12 and v100.peak("fp16") == 125e12 and v100.peak("bf16") is None
    assert h100.peak("fp32") == 67e12 and h100.peak("bf16") == h100.peak("fp16") == 989.4e12
    assert all(hw.device_key == "nvidia" for hw in (a100, v100, h100))


def test_cpu_peaks_follow_their_stated_derivation(catalog: Catalog) -> None:
    """fp32 peak = cores × GHz × FLOPs/cycle with a per-core rate a real vector unit has."""
    for hw in catalog.hardware.values():
        if hw.kind != "cpu":
            continue
        assert hw.cores and hw.frequency_ghz and hw.arch in CPU_ARCHS, hw.id
        per_cycle = hw.peak_flops["fp32"] / (hw.cores * hw.frequency_ghz * 1e9)
        assert min(abs(per_cycle - rate) for rate in (16, 32, 64)) < 1e-6, (hw.id, per_cycle)
        assert hw.device_key == "cpu"
    a64fx = catalog.get_hardware("a64fx")
    assert math.isclose(a64fx.peak_flops["fp32"], 6.7584e12) and a64fx.mem_bandwidth == 1024e9
    assert "sve" in a64fx.features and "amx" in catalog.get_hardware("xeon-8480").features
    assert catalog.get_hardware("xeon-8380").cores == 40


def test_local_is_reserved_for_detection(catalog: Catalog) -> None:
    assert "local" not in catalog.hardware
    assert catalog.get_hardware("local").id == "local"


# --------------------------------------------------------------------------------------------------------------------
# Architectures
# --------------------------------------------------------------------------------------------------------------------


def test_architecture_table_headline_figures(catalog: Catalog) -> None:
    resnet50 = catalog.get_architecture("resnet50")
    assert 3.8 <= resnet50.gmacs <= 4.2 and math.isclose(resnet50.params_m, 25.6, rel_tol=0.01)
    for architecture in catalog.architectures.values():
        assert architecture.gmacs > 0 and architecture.params_m > 0 and architecture.input_shape
        if architecture.task == "vision":
            assert architecture.input_shape[0] == 3 and len(architecture.input_shape) == 3


# --------------------------------------------------------------------------------------------------------------------
# Install routes
# --------------------------------------------------------------------------------------------------------------------


def test_every_deployable_device_has_a_pinned_install_route(catalog: Catalog) -> None:
    for framework in catalog.frameworks.values():
        if not framework.install.available:
            assert not framework.cpu_archs and not framework.accelerators, framework.id
            continue
        keys = [install_key("cpu", arch) for arch in framework.cpu_archs] + list(framework.accelerators)
        for key in keys:
            assert framework.install.base_image(key), (framework.id, key)
            steps = framework.install.for_key(key)
            assert steps.pip or steps.apt or key == "nvidia", (framework.id, key)
            assert all("==" in requirement for requirement in steps.pip), (framework.id, key, steps.pip)


def test_install_variants_replace_only_what_they_set(catalog: Catalog) -> None:
    torch_install = catalog.get_framework("pytorch").install
    assert torch_install.for_key("nvidia").pip == []  # the NGC image ships PyTorch
    # PyPI's last aarch64 CPU build, from PyPI alone (its 2.11+ aarch64 wheels are CUDA builds)
    assert torch_install.for_key("cpu-aarch64").pip == ["torch==2.10.0"]
    assert torch_install.for_key("cpu-aarch64").pip_index == []
    x86 = torch_install.for_key("cpu-x86_64")
    # the same pin (it matches 2.13.0+cpu), with PyTorch's CPU index searched by the build stage
    assert x86.pip == ["torch==2.13.0"] and x86.pip_index == ["https://download.pytorch.org/whl/cpu"]
    assert x86.base_images == {"cpu-x86_64": "python:3.11-slim"}
    assert install_key("cpu", "aarch64") == "cpu-aarch64" and install_key("nvidia") == "nvidia"


# --------------------------------------------------------------------------------------------------------------------
# User catalogs
# --------------------------------------------------------------------------------------------------------------------


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def test_user_catalog_overrides_fields_and_adds_entries(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "site.yaml",
        """\
        hardware:
          - id: mycluster-cpu
            name: Site CPU
            kind: cpu
            vendor: intel
            arch: x86_64
            cores: 32
            peak_flops: {fp32: 2.0e12}
            mem_bandwidth: 1.0e11
            sources: [{citation: site documentation}]
        frameworks:
          - id: pytorch
            version: "2.4.0"
        """,
    )
    merged = load_catalog(tmp_path)
    assert merged.get_hardware("mycluster-cpu").cores == 32
    pytorch = merged.get_framework("pytorch")
    assert pytorch.version == "2.4.0" and pytorch.accelerators == ["nvidia"]  # other fields kept
    assert load_catalog().get_framework("pytorch").version == "2.13.0"  # the shipped catalog is untouched


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            """\
         frameworks:
           - id: pytorch
             libraries: {cpu: [openblass]}
         """,
            "frameworks.pytorch.libraries.cpu: unknown library 'openblass' (did you mean 'openblas'?)",
        ),
        (
            """\
         compilers:
           - id: xla
             support: {tensorflw: [training]}
         """,
            "compilers.xla.support: unknown framework 'tensorflw' (did you mean 'tensorflow'?)",
        ),
        (
            """\
         compilers:
           - id: tvm-tuned
             tuning: {seconds: 60, untuned: tvmm, source: {citation: x}}
         """,
            "compilers.tvm-tuned.tuning.untuned: unknown compiler 'tvmm' (did you mean 'tvm'?)",
        ),
        (
            """\
         compilers:
           - id: tvm-tuned
             tuning: {seconds: 60, trials: 0, untuned: tvm, source: {citation: x}}
         """,
            "compilers.tvm-tuned.tuning.trials: Input should be greater than or equal to 1",
        ),
        (
            """\
         frameworks:
           - id: mxnet
             successor: pytorc
         """,
            "frameworks.mxnet.successor: unknown framework 'pytorc' (did you mean 'pytorch'?)",
        ),
        (
            """\
         frameworks:
           - id: scikit-learn
             expresses: [gemm, convolution]
         """,
            "frameworks.scikit-learn.expresses: Value error, unknown unit kind(s) convolution; known: conv,",
        ),
        (
            """\
         libraries:
           - id: newblas
             name: New BLAS
             version: "1"
             role: gemm
         """,
            "bad.yaml:2: libraries.newblas.role: Input should be 'dnn' or 'blas'",
        ),
        (
            """\
         framework:
           - id: x
         """,
            "unknown section 'framework' (did you mean 'frameworks'?)",
        ),
        ("frameworks:\n\t- id: pytorch\n", "bad.yaml:2: invalid YAML"),
        (
            """\
         hardware:
           - name: no id
         """,
            "hardware[0]: every entry needs a string 'id'",
        ),
    ],
)
def test_broken_user_catalog_fails_with_one_clear_line(tmp_path: Path, text: str, expected: str) -> None:
    _write(tmp_path, "bad.yaml", text)
    with pytest.raises(CatalogError) as raised:
        read_catalog(tmp_path)
    assert any(expected in line for line in raised.value.lines), raised.value.lines
    assert all("\n" not in line for line in raised.value.lines)


def test_missing_user_catalog_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="catalog path not found"):
        read_catalog(tmp_path / "nowhere")


# --------------------------------------------------------------------------------------------------------------------
# Local machine detection
# --------------------------------------------------------------------------------------------------------------------

_SAPPHIRE_RAPIDS = """\
processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz
cpu MHz\t\t: 3800.000
flags\t\t: fpu sse sse2 avx avx2 fma avx512f avx512_vnni avx512_bf16 avx512_fp16 amx_tile amx_bf16 amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
"""
_GENOA = """\
vendor_id\t: AuthenticAMD
cpu family\t: 25
model name\t: AMD EPYC 9654 96-Core Processor
cpu MHz\t\t: 2400.000
flags\t\t: sse avx avx2 fma avx512f avx512_vnni avx512_bf16
"""
_A64FX = """\
processor\t: 0
BogoMIPS\t: 200.00
Features\t: fp asimd evtstrm sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm fcma dcpop sve
CPU implementer\t: 0x46
"""


def test_parse_cpuinfo_reads_the_first_processor() -> None:
    info = parse_cpuinfo(_SAPPHIRE_RAPIDS)
    assert info.vendor_id == "GenuineIntel" and info.cpu_family == 6 and info.mhz == 3800.0
    assert {"amx_bf16", "avx512f"} <= info.flags and "Platinum 8480+" in info.model_name
    assert parse_cpuinfo(_A64FX).vendor_id == "0x46" and "sve" in parse_cpuinfo(_A64FX).flags


def test_detected_peaks_reproduce_the_presets(catalog: Catalog) -> None:
    """Fed the preset's facts, detection computes the same peaks the catalog states (same formula, two routes)."""
    cases = [
        (_SAPPHIRE_RAPIDS, "x86_64", "xeon-8480", None),
        (_GENOA, "x86_64", "epyc-9654", None),
        (_A64FX, "aarch64", "a64fx", 512),
    ]
    for text, machine, preset_id, sve_bits in cases:
        preset = catalog.get_hardware(preset_id)
        assert preset.cores and preset.frequency_ghz
        detected = detect_hardware(
            parse_cpuinfo(text), machine, preset.cores, (preset.frequency_ghz, "preset"), (1e11, "test"), sve_bits
        )
        for precision, peak in preset.peak_flops.items():
            assert math.isclose(detected.peak_flops[precision], peak, rel_tol=1e-9), (preset_id, precision)
        assert detected.arch == preset.arch


def test_flops_per_cycle_rules() -> None:
    assert flops_per_cycle("x86_64", CpuInfo(flags=frozenset({"avx", "avx2", "fma"})))[0] == {"fp32": 32.0}
    assert flops_per_cycle("x86_64", CpuInfo(flags=frozenset({"sse2"})))[0]["fp32"] == 8.0
    zen5 = CpuInfo(vendor_id="AuthenticAMD", cpu_family=26, flags=frozenset({"avx2", "fma", "avx512f"}))
    assert flops_per_cycle("x86_64", zen5)[0]["fp32"] == 64.0
    neoverse_n1 = CpuInfo(flags=frozenset({"asimd", "asimdhp", "asimddp"}))
    assert flops_per_cycle("aarch64", neoverse_n1)[0] == {"fp32": 16.0, "fp16": 32.0, "int8": 64.0}
    assert flops_per_cycle("ppc64le", CpuInfo(flags=frozenset({"vsx"})))[0] == {"fp32": 16.0}


def test_local_detection_is_sane_and_fast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path))  # measure here, not from a cached probe
    detect_local_hardware.cache_clear()
    start = time.perf_counter()
    local = detect_local_hardware()
    elapsed = time.perf_counter() - start
    assert elapsed < 3.0  # ~0.7 s on the shared 2-core VM, most of it the bandwidth probe's page faults
    assert local.id == "local" and local.kind == "cpu"
    assert 1 <= (local.cores or 0) <= (os.cpu_count() or 1)
    expected_arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(), platform.machine())
    assert local.arch == (expected_arch if expected_arch in CPU_ARCHS else None)
    per_core = local.peak_flops["fp32"] / (local.cores or 1)
    assert 1e9 <= per_core <= 1e12
    assert 5e8 <= local.mem_bandwidth <= 1e13
    assert "detected" in local.notes and detect_local_hardware() is local


def test_local_bandwidth_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPOPT_LOCAL_MEM_BANDWIDTH", "12.5e9")
    detect_local_hardware.cache_clear()
    try:
        assert detect_local_hardware().mem_bandwidth == 12.5e9
    finally:
        detect_local_hardware.cache_clear()
