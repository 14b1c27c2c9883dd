"""The examples in the builders' docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "builders",
    "builders.context",
    "builders.quoting",
    "builders.names",
    "builders.validate",
    "builders.primitives",
    "builders.recipe",
    "builders.containers",
    "builders.jobs",
    "builders.slurm",
    "builders.kubernetes",
    "builders.blocks.apt_packages",
    "builders.blocks.model_compile",
    "builders.blocks.pip_packages",
    "builders.foreign_root",
    "builders.foreign_arch",
    "builders.wheelhouse",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
