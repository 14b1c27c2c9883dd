"""The planner's roofline prior on the measured GPU rows: what ``appopt models evaluate --mode gpu`` sets the GPU
fit (``perfmodels.gpu_fit``) against.

Each row's route is the planner's own PyTorch route on the measuring GPU's preset (its catalog efficiency), with the
row's layout factor and, at fp32, the framework's TF32 share of the row's model, as the planner would build it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from optimiser.catalog.models import Catalog
from optimiser.target import gpu_presets
from perfmodels.features import Route
from perfmodels.gpu_fit import GpuFit
from perfmodels.priors import layout_factor, tf32_share
from perfmodels.roofline import RooflinePrior

if TYPE_CHECKING:
    import pandas as pd


def _routes(catalog: Catalog, preset: str) -> dict[tuple[str, str], Route]:
    """The planner's PyTorch routes by (compiler, precision) for a one-GPU training spec on ``preset``."""
    import yaml

    from optimiser.planner import make_plan
    from optimiser.spec import parse_spec

    doc = {
        "name": "gpu-baseline",
        "application": {"type": "training", "model": {"architecture": "resnet50"}, "batch_size": 32,
                        "precision": "auto", "framework": "pytorch"},
        "target": {"cpu": {"arch": "x86_64", "model": "xeon-8380"},
                   "accelerator": {"vendor": "nvidia", "model": preset, "count": 1}},
    }
    plan = make_plan(parse_spec(yaml.safe_dump(doc)), catalog=catalog)
    return {(c.route.compiler, c.route.precision): c.route for c in plan.candidates}


def prior_on_rows(fit: GpuFit, catalog: Catalog) -> pd.DataFrame:
    """Each measured GPU row predicted by the roofline prior, in ``GpuFit.held_out``'s columns."""
    import pandas as pd

    presets = gpu_presets(catalog)
    out = []
    for name, device in fit.sources().items():
        routes = _routes(catalog, device.name)
        for r in fit.rows:
            base = routes.get((r.compiler, r.precision))
            if r.accelerator != name or base is None:
                continue
            conv = r.workload.flops_by_class.get("conv", 0.0) > 0
            route = replace(
                base,
                layout=r.layout,
                layout_factor=layout_factor("gpu", r.layout, r.precision, conv),
                tf32_share=tf32_share(r.framework, r.workload.flops_by_class) if r.precision == "fp32" else 0.0,
            )
            out.append({
                "accelerator": name, "family": r.family, "model": r.model, "mode": r.mode,
                "batch": r.workload.batch_size, "compiler": r.compiler, "precision": r.precision, "layout": r.layout,
                "measured": r.seconds,
                "predicted": RooflinePrior().predict(r.workload, route, presets[device.name]).step_seconds,
            })
    return pd.DataFrame(out)
