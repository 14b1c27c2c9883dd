"""The catalog's node counts of named architectures (``ops_by_class``: what per-node costs such as GPU kernel
launches are priced from) are those of the graph ``runtime.architectures`` builds for them."""

from __future__ import annotations

import pytest

from benchmarks.features import model_features
from optimiser.catalog import load_catalog
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
