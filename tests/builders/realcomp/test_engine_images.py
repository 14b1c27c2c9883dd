"""Images of the graph-compiler routes, built for real and run: OpenVINO, TVM (untuned and MetaSchedule-tuned) and IREE.

The plan picks ``onnxruntime + openvino`` (or ``+ tvm``, ``+ iree``) for the digits MLP; the image installs the
engine from a wheelhouse, compiles the model in its build stage (``python -m runtime compile --engine X``: OpenVINO
IR, a TVM shared library linked by the ziglang wheel since the Debian minbase has no C compiler, or an IREE ``.vmfb``
for llvm-cpu), and runs it with ``python -m runtime run --engine X``. Its outputs on a fixed input are checked
against onnxruntime's on this machine.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import Result

from tests.builders.realcomp.conftest import REPO, plan_for, wheelhouse_for
from tests.compiler_routes import COMPILER_ROUTE_SPEC

pytestmark = pytest.mark.slow


#: Run inside the image: the engine's runner on the compiled directory, a fixed input, the output as JSON.
PROBE = """\
import json, sys
import numpy as np
from runtime.engines import open_runner
runner, text = open_runner(sys.argv[1], "/opt/app/compiled", 1)
batch = int(sys.argv[2])
x = np.linspace(-1, 1, 64 * batch, dtype=np.float32).reshape(batch, 64)
print(json.dumps({"engine": text, "out": runner.run({"input": x})["probabilities"].tolist()}))
"""

#: What ``python -m runtime run`` prints for the digits MLP: its output tensor (at the plan's batch for the tuned
#: library, whose search fixed it, else 1) and a latency line.
RUN_OUTPUT = r"output probabilities: float32\[{batch}, 10\].*latency over 20 run\(s\)"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a dotted name whose package is absent
        return False


def _podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=300, check=False)


def _reference(x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(REPO / "examples" / "digits_mlp.onnx"), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, {"input": x})[0])


#: The tuned route's search budget here: two trials, enough to search, build and time candidates in the build stage.
TRIALS = 2


@pytest.mark.parametrize(("compiler", "module", "artefact"), [("openvino", "openvino", "model.xml"),
                                                              ("tvm", "tvm", "model.so"),
                                                              ("tvm-tuned", "tvm", "model.so"),
                                                              ("iree", "iree.compiler", "model.vmfb")])
def test_a_compiler_route_image_compiles_in_the_build_stage_and_runs_the_model(
        compiler: str, module: str, artefact: str, debian_image: str, cache_dir: Path, tmp_path: Path,
        appopt: Callable[..., Result]) -> None:
    if not _installed(module):
        pytest.skip(f"{compiler}: extra not installed (no {module} module on the host to compile with)")
    tuned = compiler == "tvm-tuned"
    engine = "tvm" if tuned else compiler
    spec = COMPILER_ROUTE_SPEC.format(compiler=compiler)
    if tuned:  # searched for the plan's batch, which the probe below feeds
        spec = spec.replace("  framework: onnxruntime", "  framework: onnxruntime\n  batch_size: 2")
        spec += f"  tuning_trials: {TRIALS}\n"
    out = plan_for(spec, tmp_path)
    plan = json.loads((out / "plan.json").read_text())
    assert (plan["choice"]["framework"], plan["choice"]["compiler"]) == ("onnxruntime", compiler)
    ref = f"localhost/appopt-test/digits-{compiler}:ci"
    result = appopt("build", out, "--engine", "buildah", "--base-image", debian_image, "--wheelhouse",
                    wheelhouse_for(out, cache_dir), "--tag", ref, "--quiet")
    assert result.exit_code == 0, result.output[-3000:]
    built = json.loads((out / "build.json").read_text())
    log = (out / built["log"]).read_text()
    assert "--no-index" in log  # the engine came from the wheelhouse
    assert f"compiled -> /opt/app/compiled (engine: {engine}, {artefact})" in log  # in the build stage
    if tuned:  # the search ran there, linked by zig (the minbase has no C compiler), within the spec's budget
        assert f"--trials {TRIALS} --batch 2" in log
        assert f"(engine: tvm, model.so), tuned over {TRIALS} trials in " in log

    proc = _podman("run", "--rm", ref)
    assert proc.returncode == 0, proc.stderr
    run_output = re.compile(RUN_OUTPUT.format(batch=2 if tuned else 1), re.DOTALL)
    assert f"engine: {engine} (" in proc.stdout and run_output.search(proc.stdout), proc.stdout

    batch = 2  # a search needs static shapes: the tuned library runs the plan's batch only
    probe = _podman("run", "--rm", "--entrypoint", "python3", ref, "-c", PROBE, engine, str(batch))
    assert probe.returncode == 0, probe.stderr
    answer = json.loads(probe.stdout.strip().splitlines()[-1])
    x = np.linspace(-1, 1, 64 * batch, dtype=np.float32).reshape(batch, 64)
    np.testing.assert_allclose(np.array(answer["out"], dtype=np.float32), _reference(x), rtol=1e-4, atol=1e-6)
    if compiler == "openvino":
        assert answer["engine"] == "openvino (CPU, f32)"  # fp32 forced, not the bf16 default of AMX CPUs
    elif compiler == "tvm":
        assert answer["engine"] == "tvm (library model.so)"  # the build stage's library, not a compile at start
    elif tuned:  # the searched library and the records it was searched with
        assert answer["engine"] == f"tvm (library model.so, tuned over {TRIALS} trials)"
        records = _podman("run", "--rm", "--entrypoint", "ls", ref, "/opt/app/compiled/tuning")
        assert "database_tuning_record.json" in records.stdout, records.stdout + records.stderr
    else:  # the build stage's module, run by the runtime wheel (no compile when the container starts)
        assert answer["engine"].startswith("iree (module model.vmfb, entry "), answer["engine"]
