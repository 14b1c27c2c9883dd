"""The same spec on the same host gives the same figures: the host probes are cached per host, not re-measured."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from optimiser.catalog import local
from optimiser.planner import make_plan
from optimiser.report import plan_to_dict
from optimiser.spec import load_spec

EXAMPLES = Path(__file__).parents[2] / "examples"


def _figures(data: dict[str, object]) -> str:
    return json.dumps({k: data[k] for k in ("predicted", "candidates", "choice", "target")}, sort_keys=True)


def test_five_plans_of_one_spec_give_identical_figures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("APPOPT_LOCAL_MEM_BANDWIDTH", raising=False)
    # A live probe answers differently each time (as on a shared machine): 9, 10, 11, ... GB/s.
    answers = itertools.count(9e9, 1e9)
    probes: list[float] = []

    def noisy_probe(nbytes: int = local.PROBE_BYTES) -> float:
        probes.append(next(answers))
        return probes[-1]

    monkeypatch.setattr(local, "measure_memory_bandwidth", noisy_probe)
    spec = load_spec(EXAMPLES / "onnx-mlp-local.yaml")
    figures = []
    for _ in range(5):
        local.detect_local_hardware.cache_clear()  # as a new process would
        figures.append(_figures(plan_to_dict(make_plan(spec))))
    local.detect_local_hardware.cache_clear()
    assert probes == [9e9], "the probe runs once per host, then the cached figure is used"
    assert len(set(figures)) == 1
    assert json.loads(local.probe_cache_path().read_text())["mem_bandwidth"] == 9e9


def test_an_unwritable_cache_still_plans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(blocker))  # a file, so probes/ cannot be created under it
    monkeypatch.setattr(local, "measure_memory_bandwidth", lambda nbytes=0: 7e9)
    value, path, measured = local.cached_memory_bandwidth()
    assert (value, measured) == (7e9, True) and not path.exists()


def test_host_key_names_the_host_and_is_stable() -> None:
    assert local.host_key() == local.host_key()
    assert local.probe_cache_path().parent.name == "probes"


@pytest.mark.slow
def test_five_appopt_plan_processes_write_identical_figures(tmp_path: Path) -> None:
    """The issue's check end to end: five ``appopt plan`` processes (a fresh cache, so the first one probes and
    fits) write the same figures to plan.json."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "APPOPT_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("APPOPT_LOCAL_MEM_BANDWIDTH", None)
    figures = []
    for i in range(5):
        out = tmp_path / f"plan{i}"
        subprocess.run(
            [sys.executable, "-m", "cli", "plan", str(EXAMPLES / "onnx-mlp-local.yaml"), "-o", str(out)],
            check=True, env=env, capture_output=True, timeout=300,
        )
        figures.append(_figures(json.loads((out / "plan.json").read_text())))
    assert len(set(figures)) == 1
