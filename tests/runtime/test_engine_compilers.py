"""``python -m runtime compile|run --engine openvino|tvm|iree``: the build-stage artefact and the runner an image
uses."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from runtime import RuntimeModelError
from runtime.engines import ENGINE_MANIFEST, SIGNATURE, compile_for_engine, open_runner
from runtime.tools import compile_to_dir, format_compile, run_model

ROOT = Path(__file__).resolve().parents[2]
MLP = ROOT / "examples" / "digits_mlp.onnx"
X = np.linspace(-1, 1, 3 * 64, dtype=np.float32).reshape(3, 64)


#: The module each engine's extra installs (IREE's runtime wheel and compiler wheel share the ``iree`` namespace).
MODULES = {"openvino": "openvino", "tvm": "tvm", "iree": "iree.compiler", "ziglang": "ziglang"}


def _needs(engine: str) -> None:
    module = MODULES.get(engine, engine)
    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose package is absent
        found = False
    if not found:
        pytest.skip(f"{engine}: extra not installed (no {module} module)")


def _reference(x: np.ndarray) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime: extra not installed (the peer compared with)")
    session = ort.InferenceSession(str(MLP), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input": x})[0])


@pytest.mark.parametrize(("engine", "artefact"), [("openvino", "model.xml"), ("tvm", "model.so"),
                                                  ("iree", "model.vmfb")])
def test_the_compiled_directory_runs_and_matches_onnxruntime(tmp_path: Path, engine: str, artefact: str) -> None:
    _needs(engine)
    manifest = compile_to_dir(MLP, tmp_path / "c", engine=engine)
    assert manifest["engine"] == engine and (tmp_path / "c" / artefact).is_file()
    assert (tmp_path / "c" / SIGNATURE).stat().st_size < 2000  # inputs/outputs only, no weights
    assert format_compile(manifest, tmp_path / "c")[0] == f"compiled -> {tmp_path / 'c'} (engine: {engine}, {artefact})"
    runner, text = open_runner(engine, tmp_path / "c", 1)
    assert text.startswith(f"{engine} (") and runner.input_names == ["input"]
    got = runner.run({"input": X})
    assert list(got) == ["probabilities"]
    np.testing.assert_allclose(got["probabilities"], _reference(X), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("engine", ["openvino", "tvm", "iree"])
def test_an_onnx_file_runs_directly_and_the_cli_reports_the_engine(engine: str) -> None:
    _needs(engine)
    report = run_model(MLP, random=True, repeat=2, engine=engine, threads=1)
    assert report.engine.startswith(f"{engine} (") and len(report.latencies_s) == 2
    assert report.outputs[0].shape == [1, 10] and report.outputs[0].mean == pytest.approx(0.1, rel=1e-4)


def test_openvino_runs_fp32_unless_the_route_says_bf16(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("openvino")
    from runtime.engine_openvino import OpenVinoRunner

    assert OpenVinoRunner(MLP).describe == "CPU, f32"  # never OpenVINO's bf16 default on AMX/AVX512-BF16 CPUs
    monkeypatch.setenv("APPOPT_PRECISION", "int8")
    with pytest.raises(RuntimeModelError, match="openvino runs precision fp32, bf16, fp16, not 'int8'"):
        OpenVinoRunner(MLP)


def test_tvm_links_with_zig_when_no_c_compiler_is_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _needs("tvm")
    _needs("ziglang")
    from tvm.support import cc

    monkeypatch.setattr(cc, "get_cc", lambda: None)  # as in a slim base image
    compile_for_engine("tvm", MLP, tmp_path / "c")
    runner, _ = open_runner("tvm", tmp_path / "c", 1)
    np.testing.assert_allclose(runner.run({"input": X})["probabilities"], _reference(X), rtol=1e-4, atol=1e-6)


def test_a_tvm_search_registers_the_cpu_tensor_intrinsics_without_parsing_every_targets() -> None:
    """MetaSchedule imports ``tvm.s_tir.tensor_intrin`` in its tune contexts and in every builder process (fresh
    ones each round); that package parses CUDA's hundreds of intrinsics (45 s a process here). The search loads the
    x86 and Arm ones only, and a GPU module asked for by name can still be found. In a process of its own: the
    registry is global."""
    _needs("tvm")
    code = (
        "import sys\n"
        "from runtime.engine_tvm_tuning import cpu_tensor_intrinsics\n"
        "cpu_tensor_intrinsics()\n"
        "import tvm.s_tir.tensor_intrin\n"
        "from tvm.s_tir import TensorIntrin\n"
        "assert TensorIntrin.get('dot_16x4_vnni') is not None\n"
        "assert 'tvm.s_tir.tensor_intrin.cuda' not in sys.modules, 'CUDA intrinsics parsed'\n"
        "import importlib.util\n"
        "assert importlib.util.find_spec('tvm.s_tir.tensor_intrin.cuda') is not None  # (found, not parsed)\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.slow
def test_a_tuned_tvm_directory_searches_with_zig_ships_its_records_and_runs_the_batch_it_searched(
        tmp_path: Path) -> None:
    """The tuned route's build stage: a slim image has no C compiler, so the search links its candidates with zig."""
    _needs("tvm")
    _needs("ziglang")
    _needs("xgboost")
    from runtime.engine_tvm_tuning import TUNING_FILE

    # In a child process: a search in this one would inherit TVM state (worker pools, the C compiler it found) from
    # earlier tests of the suite. The child hides the C compiler, as in a slim base image.
    env = {k: v for k, v in os.environ.items() if k not in ("CC", "CXX")}
    child = (
        "import json, sys\n"
        "from tvm.support import cc\n"
        "cc.get_cc = lambda: None\n"
        "from runtime.tools import compile_to_dir\n"
        "print(json.dumps(compile_to_dir(sys.argv[1], sys.argv[2], engine='tvm', trials=2, batch=3)))\n"
    )
    done = subprocess.run([sys.executable, "-c", child, str(MLP), str(tmp_path / "c")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    manifest = json.loads(done.stdout.strip().splitlines()[-1])
    assert manifest["trials"] == 2 and manifest["batch"] == 3 and manifest["tune_s"] > 0
    meta = json.loads((tmp_path / "c" / "tuning" / TUNING_FILE).read_text())
    assert meta["trials"] == 2 and (tmp_path / "c" / "tuning" / "database_tuning_record.json").stat().st_size > 0
    line = format_compile(manifest, tmp_path / "c")[0]
    assert line.startswith(f"compiled -> {tmp_path / 'c'} (engine: tvm, model.so), tuned over 2 trials in "), line
    runner, text = open_runner("tvm", tmp_path / "c", 1)
    assert text == "tvm (library model.so, tuned over 2 trials)"
    assert runner.inputs["input"].shape[0] == 3  # the search fixed the symbolic batch; the signature says so
    np.testing.assert_allclose(runner.run({"input": X[:3]})["probabilities"], _reference(X[:3]), rtol=1e-4,
                               atol=1e-6)
    with pytest.raises(RuntimeModelError, match=r"^input 'input' has shape \(1, 64\), but the TVM library takes "
                                                r"\(3, 64\) \(library model.so, tuned over 2 trials; a tuned library"):
        runner.run({"input": X[:1]})


def test_engine_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeModelError, match="--engine 'onnxruntime' has no compile step"):
        compile_for_engine("onnxruntime", MLP, tmp_path / "x")
    with pytest.raises(RuntimeModelError, match=r"^--trials: --engine openvino has no tuning search; engines that "):
        compile_for_engine("openvino", MLP, tmp_path / "x", trials=4)
    with pytest.raises(RuntimeModelError, match=r"^--trials is the tuning budget of --engine tvm"):
        compile_to_dir(MLP, tmp_path / "x", trials=4)
    with pytest.raises(RuntimeModelError, match=r"^--batch fixes the batch of a tuning search: it needs --trials"):
        compile_for_engine("tvm", MLP, tmp_path / "x", batch=4)
    if importlib.util.find_spec("tvm") is not None:
        with pytest.raises(RuntimeModelError, match=r"^--trials: the tuning budget must be at least 1 trial, got 0"):
            compile_for_engine("tvm", MLP, tmp_path / "x", trials=0)
        with pytest.raises(RuntimeModelError, match=r"^--batch: the batch a search fixes must be at least 1, got 0"):
            compile_for_engine("tvm", MLP, tmp_path / "x", trials=1, batch=0)
    with pytest.raises(RuntimeModelError, match="--disable names this runtime's graph passes"):
        compile_to_dir(MLP, tmp_path / "x", disable=["fuse"], engine="tvm")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / ENGINE_MANIFEST).write_text(json.dumps({"engine": "tvm", "artifact": "model.so"}))
    monkeypatch.setitem(sys.modules, "openvino", None)  # as in an image without it
    with pytest.raises(RuntimeModelError, match="--engine openvino: the openvino package is not installed"):
        open_runner("openvino", tmp_path / "other", 1)
    monkeypatch.delitem(sys.modules, "openvino")
    if importlib.util.find_spec("openvino") is not None:
        with pytest.raises(RuntimeModelError, match="was compiled for engine 'tvm', not 'openvino'"):
            open_runner("openvino", tmp_path / "other", 1)
        with pytest.raises(RuntimeModelError, match="is not a directory written by"):
            open_runner("openvino", tmp_path, 1)


def test_the_images_compile_command_takes_the_engine(tmp_path: Path) -> None:
    _needs("openvino")
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "compile", str(MLP), "-o", str(tmp_path / "c"), "--engine", "openvino"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "(engine: openvino, model.xml)" in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "runtime", "run", str(tmp_path / "c"), "--engine", "openvino", "--random"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "engine: openvino (CPU, f32)" in proc.stdout
