"""Engine plugins: every engine module's spec names real catalog ids, a real extra and a real image runner."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from benchmarks.backends import all_backends
from benchmarks.engines import ENGINE_MODULES, all_engines
from optimiser.catalog import load_catalog
from runtime.engines import ENGINES as IMAGE_ENGINES

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize("spec", all_engines(), ids=lambda spec: spec.name)
def test_engine_spec_names_catalog_ids_extra_and_image_runner(spec):
    catalog = load_catalog()
    assert spec.framework in catalog.frameworks
    for compiler in spec.compilers:
        assert compiler == "none" or compiler in catalog.compilers
    if spec.extra is not None:
        extra = _extras()[spec.extra]
        assert all(any(req.startswith(pip) for req in extra) for pip in spec.pip), (spec.pip, extra)
    assert spec.image_engine is None or spec.image_engine in IMAGE_ENGINES


@pytest.mark.parametrize("spec", all_engines(), ids=lambda spec: spec.name)
def test_engine_backends_are_registered_with_the_spec_route(spec):
    registry = all_backends()
    backends = spec.backends()
    assert backends
    for backend in backends:
        assert registry[backend.name].route == backend.route
        assert backend.route.framework == spec.framework
        assert backend.route.compiler in spec.compilers


def test_every_engine_module_is_listed_once():
    names = [spec.name for spec in all_engines()]
    assert len(names) == len(set(names)) == len(ENGINE_MODULES)
    assert "onnxruntime" in names
