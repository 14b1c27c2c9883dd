"""The spec's model as a ``perfmodels.Workload``: per-sample cost from the ONNX graph or the architecture table."""

from __future__ import annotations

from analysis.modelinfo import ModelCost, analyse_onnx, cost_from_architecture
from analysis.unitgraph import graph_units
from optimiser.catalog.architecture_units import architecture_units
from optimiser.catalog.models import Architecture, Catalog
from optimiser.errors import SpecError
from optimiser.spec import AppSpec
from optimiser.suggest import unknown_id_message
from perfmodels import Workload


def model_cost(spec: AppSpec, catalog: Catalog) -> ModelCost:
    """Cost of one sample through the spec's model."""
    path = spec.model_path()
    if path is not None:
        try:
            found = path.is_file()
        except OSError as exc:  # permission denied on a parent, a loop of links
            raise SpecError(f"application.model.onnx: cannot read {path}: {exc.strerror or exc}") from None
        if not found:
            raise SpecError(f"application.model.onnx: no such file: {path}")
        return analyse_onnx(path, batch_size=1)
    name = spec.application.model.architecture
    assert name is not None  # the spec guarantees exactly one of onnx/architecture
    return cost_from_architecture(find_architecture(catalog, name), batch_size=1)


def find_architecture(catalog: Catalog, name: str) -> Architecture:
    """Look an architecture up by id or alias (case-insensitive)."""
    wanted = name.lower().replace("-", "_")
    for arch in catalog.architectures.values():
        if wanted == arch.id or wanted in (a.lower().replace("-", "_") for a in arch.aliases):
            return arch
    raise SpecError(unknown_id_message("application.model.architecture", name, catalog.architectures))


def workload_for(spec: AppSpec, catalog: Catalog) -> Workload:
    cost = model_cost(spec, catalog)
    data = spec.application.data
    total = data.samples * data.epochs if data is not None and data.samples is not None else None
    path = spec.model_path()
    arch = None if path is not None else find_architecture(catalog, spec.application.model.architecture or "")
    name = path.stem if path is not None else arch.id if arch is not None else ""
    return Workload(
        flops_per_sample=cost.flops,
        activation_bytes_per_sample=cost.activation_bytes,
        params=float(cost.params),
        mode=spec.application.type,
        batch_size=spec.application.batch_size,
        total_samples=total,
        flops_by_class={str(k): v.flops for k, v in cost.by_class.items()},
        ops_by_class=_node_counts(spec, catalog) or {str(k): v.count for k, v in cost.by_class.items()},
        model_name=name,
        units=tuple(graph_units(path)) if path is not None else architecture_units(arch) if arch is not None else (),
    )


def _node_counts(spec: AppSpec, catalog: Catalog) -> dict[str, int] | None:
    """A named architecture's graph node counts from the catalog (None for an ONNX model: its graph gives them)."""
    name = spec.application.model.architecture
    if spec.model_path() is not None or name is None:
        return None
    counts = find_architecture(catalog, name).ops_by_class
    return dict(counts) if counts else None
