"""`apptainer build` of the plan's Singularity.def, where an Apptainer/Singularity binary exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from builders import apptainer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(apptainer.find_binary() is None, reason=apptainer.NOT_AVAILABLE),
]


def test_sif_builds_and_runs_the_model(runtime_plan: Path, tmp_path: Path) -> None:
    out = Path(shutil.copytree(runtime_plan, tmp_path / "out"))
    result = apptainer.build_sif(out, "digits-mlp.sif")
    assert result.available and result.sif is not None and result.sif.is_file()
    assert "io.appopt.route" in apptainer.inspect_labels(result.sif)
    assert result.binary is not None
    proc = subprocess.run([result.binary, "run", str(result.sif)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"latency over \d+ run", proc.stdout)
