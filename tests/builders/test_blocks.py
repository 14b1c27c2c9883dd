"""Building blocks: what each puts in the build stage and what its runtime() leaves for the final stage."""

from __future__ import annotations

from builders.blocks import AptPackages, ModelCompile, PipPackages, PythonRuntime, ShellSteps
from builders.blocks.pip_packages import WHEELHOUSE_IN_IMAGE
from builders.primitives import Copy, Environment, Shell, Workdir


def test_apt_is_one_layer_without_recommends_that_cleans_its_lists() -> None:
    (layer,) = AptPackages(("libgomp1", "libopenblas0")).build()
    assert isinstance(layer, Shell)
    update, install, clean = layer.commands
    assert update == "apt-get update"
    assert install.endswith("apt-get install -y --no-install-recommends libgomp1 libopenblas0")
    assert clean == "rm -rf /var/lib/apt/lists/*"


def test_apt_runtime_installs_the_runtime_packages() -> None:
    block = AptPackages(("build-essential", "libgomp1"), runtime_packages=("libgomp1",))
    (layer,) = block.runtime("build")
    assert isinstance(layer, Shell) and layer.commands[1].endswith("--no-install-recommends libgomp1")
    assert AptPackages(()).build() == [] and AptPackages(()).runtime("build") == []


def test_pip_from_an_index_and_from_a_wheelhouse() -> None:
    (online,) = PipPackages(("numpy>=2", "onnx"), python="/v/bin/python").build()
    assert isinstance(online, Shell)
    assert online.commands == (
        "/v/bin/python -m pip install --no-cache-dir --disable-pip-version-check 'numpy>=2' onnx",
    )
    copy, offline = PipPackages(("onnx",), wheelhouse="wheels").build()
    assert copy == Copy("wheels", WHEELHOUSE_IN_IMAGE)
    assert isinstance(offline, Shell)
    assert f"--no-index --find-links {WHEELHOUSE_IN_IMAGE} onnx" in offline.commands[0]
    assert offline.commands[1] == f"rm -rf {WHEELHOUSE_IN_IMAGE}"
    assert PipPackages(("onnx",)).runtime("build") == []  # its files live in the venv PythonRuntime carries


def test_python_runtime_builds_a_venv_and_carries_it() -> None:
    block = PythonRuntime()
    create, path = block.build()
    assert isinstance(create, Shell)
    assert create.commands == ("python3 -m venv --without-pip --system-site-packages /opt/appopt/venv",)
    assert path == Environment((("PATH", "/opt/appopt/venv/bin:$PATH"),), expand=True, build_time=True)
    copy, runtime_path = block.runtime("build")
    assert copy == Copy("/opt/appopt/venv", "/opt/appopt/venv", from_stage="build")
    assert isinstance(runtime_path, Environment) and not runtime_path.build_time


def test_model_compile_copies_compiles_in_the_app_dir_and_carries_it() -> None:
    block = ModelCompile("/opt/app", "models/net.onnx", ("runtime",), ("python3", "-m", "runtime", "compile", "x y"))
    steps = block.build()
    assert steps[:2] == [Copy("runtime", "/opt/app/runtime"), Copy("models/net.onnx", "/opt/app/net.onnx")]
    assert steps[-2:] == [Workdir("/opt/app"), Shell(("python3 -m runtime compile 'x y'",))]
    copy, pythonpath = block.runtime("build")
    assert copy == Copy("/opt/app", "/opt/app", from_stage="build")
    assert isinstance(pythonpath, Environment) and pythonpath.variables[0][0] == "PYTHONPATH"


def test_model_compile_without_a_compile_step_still_carries_the_model() -> None:
    block = ModelCompile("/opt/app", "model.onnx")
    assert not any(isinstance(step, Shell) for step in block.build())
    assert block.runtime("build")[0] == Copy("/opt/app", "/opt/app", from_stage="build")
    assert ModelCompile("/opt/app").build() == [] and ModelCompile("/opt/app").runtime("build") == []


def test_catalog_steps_run_in_both_stages() -> None:
    block = ShellSteps(("ldconfig",))
    assert block.build() == block.runtime("build") == [Shell(("ldconfig",))]
