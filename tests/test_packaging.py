"""``pip install .`` (not only -e) gives a working appopt: templates, catalog data and the runtime are in the wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.slow
def test_wheel_installs_and_plans_from_outside_the_checkout(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), str(ROOT)],
        check=True, cwd=tmp_path,
    )
    (wheel,) = wheels.glob("appopt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for needed in ("templates/Dockerfile.j2", "templates/plan.md.j2", "optimiser/catalog/data/frameworks.yaml",
                   "runtime/kernels/base.py", "runtime/__main__.py", "runtime/native/kernels.c",
                   "benchmarks/results/default.csv.gz"):
        assert needed in names, needed
    assert not [n for n in names if n.startswith("tests/")]

    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(site)}
    code = (
        "import optimiser, sys; assert optimiser.__file__.startswith(sys.argv[1]), optimiser.__file__; "
        "from cli.main import main; sys.argv = ['appopt', 'plan', sys.argv[2], '-o', sys.argv[3]]; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(site), str(ROOT / "examples" / "onnx-mlp-local.yaml"), str(out)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads((out / "plan.json").read_text())
    assert plan["appopt_version"] == "0.1.0"
    assert (out / "Dockerfile").is_file() and (out / "plan.md").is_file()
