"""The catalog's node counts of named architectures (``ops_by_class``: what per-node costs such as GPU kernel
launches are priced from) are those of the graph ``runtime.architectures`` builds for them."""

from __future__ import annotations

import pytest

from benchmarks.features import model_features
from optimiser.catalog import load_catalog
from perfmodels import Workload
from runtime.architectures import build_architecture

# bert_large (1.3 GB of weights) is left out for time; it is built the same way as bert_base
CHECKED = ("resnet18", "resnet50", "resnet152", "mobilenet_v2", "bert_base")


@pytest.mark.parametrize("name", CHECKED)
def test_catalog_node_counts_match_the_built_graph(name: str) -> None:
    counts = load_catalog().architectures[name].ops_by_class
    built = {k: v for k, v in model_features(build_architecture(name)).ops_by_class.items() if v}
    assert counts == built


def test_named_architecture_workloads_carry_the_node_counts() -> None:
    from optimiser.spec import parse_spec
    from optimiser.workload import workload_for

    spec = parse_spec(
        "name: t\napplication:\n  type: training\n  model: {architecture: resnet50}\n  batch_size: 8\n"
        "target:\n  cpu: {arch: x86_64, model: xeon-8380}\n"
    )
    assert workload_for(spec, load_catalog()).ops_by_class["conv"] == 53


@pytest.mark.parametrize("name", ("resnet18", "mobilenet_v2", "bert_base"))
def test_shipped_architecture_units_are_those_of_the_built_graph(name: str) -> None:
    """The units plans price a named architecture by (``architecture_units.json``) are cut from the graph built at
    the catalog's input shape: a changed graph or input shape without ``python -m
    optimiser.catalog.architecture_units`` fails here."""
    from optimiser.catalog.architecture_units import _table, built_units

    assert _table()[name] == built_units(load_catalog().architectures[name])


def test_named_architecture_workloads_carry_kernel_units() -> None:
    from optimiser.spec import parse_spec
    from optimiser.workload import workload_for

    def workload(model: str) -> Workload:
        return workload_for(
            parse_spec(
                f"name: t\napplication:\n  type: training\n  model: {{architecture: {model}}}\n  batch_size: 8\n"
                "target:\n  cpu: {arch: x86_64, model: xeon-8380}\n"
            ),
            load_catalog(),
        )

    resnet = workload("resnet-50")  # an alias
    assert sum(u.count for u in resnet.units if u.kind == "conv") == 53
    assert workload("inception_v3").units == ()  # not built by runtime.architectures: published FLOPs alone
