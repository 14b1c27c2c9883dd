"""GPU step times from measured GPU rows (``benchmarks.gpu_bench``), fitted on the GPU that measured them and carried
to other GPUs through the roofline.

For each route measured eagerly (mode × framework × precision × layout) the rows' seconds are fitted against the
bare roofline of their workload on the measuring GPU's data sheet::

    log t = a + b · log roofline(w)

``b`` below 1 is what launches and framework overheads do to small steps. A compiled route (``torch.compile``) is
fitted against its framework's eager route on the pairs measured both ways (same model, batch, precision and
layout): ``log t_compiled = c + d · log t_eager``, or the pairs' median ratio where too few pairs span too few
families. Another GPU gets the measuring GPU's figure times the ratio of the two rooflines (peaks and bandwidth from
the data sheets; data-parallel devices and communication as the prior counts them).

The error of each prediction is the held-out one: every family left out in turn (its rows predicted by the fits of
the others), the residuals' RMSPE and p10/p90 give the interval.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from perfmodels.features import Device, Route, Workload
from perfmodels.fit import nnls
from perfmodels.lazy import lazy_import
from perfmodels.prediction import Prediction
from perfmodels.priors import tf32_share
from perfmodels.results_db import on_gpu
from perfmodels.roofline import SCALING_EFFICIENCY_PER_DOUBLING, STEP_OVERHEAD_S, RooflinePrior

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)

#: Fewest rows (and families) a route's own fit needs; fewer fall back to the compiler's rows at every precision.
MIN_ROWS = 4
MIN_FAMILIES = 2


@dataclass(frozen=True)
class GpuRow:
    accelerator: str
    model: str
    family: str
    mode: str
    framework: str
    compiler: str
    precision: str
    layout: str
    workload: Workload
    seconds: float
    #: The first step's seconds (a compiled route's compile, cuDNN's autotuning); nan where not recorded.
    first_step_s: float = math.nan

    @property
    def eager_key(self) -> tuple[str, str, str, str]:
        return (self.mode, self.framework, self.precision, self.layout)


def _by_class(value: object) -> dict[str, float]:
    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    if isinstance(value, str) and value.strip().startswith("{"):
        return {str(k): float(v) for k, v in json.loads(value).items()}
    return {}


def gpu_rows(frame: pd.DataFrame) -> tuple[GpuRow, ...]:
    """The measured GPU step rows: training ``ms_per_step`` and inference ``p90_latency_ms`` (its median)."""
    if frame.empty or "accelerator" not in frame:
        return ()
    rows = frame[on_gpu(frame) & (frame["source"] == "measured")]
    training = rows[(rows["mode"] == "training") & (rows["metric"] == "ms_per_step")]
    inference = rows[(rows["mode"] == "inference") & (rows["metric"] == "p90_latency_ms")]
    out = []
    for r in pd.concat([training, inference]).itertuples():
        ms = float(r.value if r.mode == "training" else r.median_ms)
        if not (math.isfinite(ms) and ms > 0 and math.isfinite(float(r.flops_per_sample))):
            continue
        workload = Workload(
            flops_per_sample=float(r.flops_per_sample),
            activation_bytes_per_sample=float(r.activation_bytes_per_sample),
            params=float(r.params),
            mode=r.mode,
            batch_size=int(r.batch),
            flops_by_class=_by_class(r.flops_by_class),
            ops_by_class={k: int(v) for k, v in _by_class(r.ops_by_class).items()},
            model_name=str(r.model),
        )
        settings = json.loads(r.settings) if isinstance(r.settings, str) and r.settings.startswith("{") else {}
        first = float(settings.get("first_step_ms", math.nan)) / 1e3
        out.append(
            GpuRow(str(r.accelerator), str(r.model), str(r.family), str(r.mode), str(r.framework), str(r.compiler),
                   str(r.precision), str(r.layout), workload, ms / 1e3, first)
        )
    return tuple(out)


def match_source(accelerator: str, presets: Mapping[str, Device]) -> Device | None:
    """The preset (keyed by id and aliases) a measured GPU's name stands for: the longest key whose words all occur
    in the name's, in order (``NVIDIA H100 80GB HBM3`` -> ``h100``; ``a100-80gb`` before ``a100``).

    >>> d = Device("h100", "gpu", {"fp32": 1.0}, 1.0)
    >>> match_source("NVIDIA H100 80GB HBM3", {"h100": d, "h200": d}).name
    'h100'
    """
    words = re.sub(r"[^a-z0-9]+", " ", accelerator.lower()).split()
    best: tuple[int, Device] | None = None
    for key, device in presets.items():
        wanted = iter(words)
        if all(part in wanted for part in re.sub(r"[^a-z0-9]+", " ", key.lower()).split()) and (
            best is None or len(key) > best[0]
        ):
            best = (len(key), device)
    return best[1] if best else None


def bare_route(framework: str, precision: str, layout: str, workload: Workload) -> Route:
    """The route the fits' roofline is computed for: peak efficiency 1, the framework's TF32 share at fp32."""
    share = tf32_share(framework, workload.flops_by_class) if precision == "fp32" else 0.0
    return Route(framework, "none", (), precision, layout, efficiency=1.0, tf32_share=share)


def roofline_seconds(workload: Workload, framework: str, precision: str, layout: str, device: Device) -> float:
    """The bare roofline of one step of ``workload`` on one ``device`` (no per-step overhead)."""
    route = bare_route(framework, precision, layout, workload)
    prior = RooflinePrior().predict(workload, route, replace(device, per_node=1, nodes=1))
    return max(prior.step_seconds - STEP_OVERHEAD_S["gpu"], 1e-9)


@dataclass(frozen=True)
class StepLine:
    """``t = fixed + per_node · nodes + efficiency · roofline(w)``, fitted by non-negative least squares on relative
    error over ``rows`` rows of ``families`` families: launches and framework work per step (which stay on another
    GPU: they are the host's) plus the roofline's share (which moves with the data sheet)."""

    fixed: float
    per_node: float
    efficiency: float
    rows: int
    families: int

    def __call__(self, nodes: float, roofline: float) -> float:
        return self.fixed + self.per_node * nodes + self.efficiency * roofline

    @classmethod
    def fit(
        cls, nodes: Sequence[float], roofline: Sequence[float], seconds: Sequence[float], families: int
    ) -> StepLine:
        t = np.asarray(seconds, float)
        columns = [np.ones_like(t), np.asarray(nodes, float), np.asarray(roofline, float)]
        a = np.column_stack(columns) / t[:, None]
        scale = np.maximum(a.max(axis=0), 1e-30)
        w = nnls(a / scale, np.ones_like(t)) / scale
        return cls(float(w[0]), float(w[1]), float(w[2]), len(t), families)


def kernel_nodes(workload: Workload) -> float:
    """The graph's nodes that launch kernels (a proxy for the launches of a step; a training step launches about
    three times as many, which the route's own fit absorbs). The ``other`` class, an exporter's shape arithmetic,
    reshapes and transposes, is left out: PyTorch runs those as views, without a kernel."""
    return float(sum(n for kind, n in workload.ops_by_class.items() if kind != "other")) or 1.0


@dataclass
class GpuFit:
    """Fits of the measured GPU rows, per source GPU; ``presets`` map preset ids and aliases to data-sheet devices."""

    rows: tuple[GpuRow, ...]
    presets: Mapping[str, Device]
    _figures: dict[str, tuple[float, float, float]] = field(default_factory=dict)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, presets: Mapping[str, Device]) -> GpuFit:
        return cls(gpu_rows(frame), presets)

    def sources(self) -> dict[str, Device]:
        """Measured accelerator name -> its data-sheet device (those the presets know)."""
        out = {}
        for name in sorted({r.accelerator for r in self.rows}):
            device = match_source(name, self.presets)
            if device is not None:
                out[name] = device
        return out

    # --- fits ------------------------------------------------------------------------------------------------------

    @staticmethod
    def _layout_for(workload: Workload, layout: str) -> str:
        return layout if workload.flops_by_class.get("conv", 0.0) > 0 else "NCHW"

    @staticmethod
    def _line(rows: Sequence[GpuRow], source: Device) -> StepLine | None:
        if not rows:
            return None
        return StepLine.fit(
            [kernel_nodes(r.workload) for r in rows],
            [roofline_seconds(r.workload, r.framework, r.precision, r.layout, source) for r in rows],
            [r.seconds for r in rows],
            len({r.family for r in rows}),
        )

    def _route_line(
        self, rows: Sequence[GpuRow], mode: str, framework: str, compiler: str, precision: str, layout: str,
        source: Device,
    ) -> tuple[StepLine, str, bool] | None:
        """The route's own fit where it measured enough rows and families (``True``: its own); else one over the
        compiler's rows at every precision and layout (the roofline carries the precision, not the layout), else
        None. An empty ``precision`` asks for the latter."""
        same = [r for r in rows if (r.mode, r.framework, r.compiler) == (mode, framework, compiler)]
        own = [r for r in same if (r.precision, r.layout) == (precision, layout)]
        if precision and len(own) >= MIN_ROWS and len({r.family for r in own}) >= MIN_FAMILIES:
            line = self._line(own, source)
            return (line, f"{framework} {compiler} {precision} {layout} {mode}", True) if line else None
        if len(same) >= MIN_ROWS and len({r.family for r in same}) >= MIN_FAMILIES:
            line = self._line(same, source)
            return (line, f"{framework} {compiler} {mode} at every precision and layout", False) if line else None
        return None

    def _seconds(
        self, rows: Sequence[GpuRow], workload: Workload, route: Route, source: Device, device: Device
    ) -> tuple[float, str] | None:
        """One device's seconds on ``device`` for the route, fitted on ``rows`` of ``source``, and how.

        A compiled route with too few rows of its own precision and layout is its eager route's figure times the
        compiler's ratio to eager over every precision and layout (so precision and layout keep their measured
        effect)."""
        layout = self._layout_for(workload, route.layout)
        compiler = route.compiler or "none"
        single = replace(device, per_node=1, nodes=1)
        nodes = kernel_nodes(workload)
        roofline = roofline_seconds(workload, route.framework, route.precision, layout, single)
        mode, framework, precision = workload.mode, route.framework, route.precision
        found = self._route_line(rows, mode, framework, compiler, precision, layout, source)
        if found is None:
            return None
        line, what, own = found
        how = f"{what}: {line.rows} rows of {line.families} families"
        seconds = line(nodes, roofline)
        if compiler != "none" and not own:
            eager = self._route_line(rows, mode, framework, "none", precision, layout, source)
            pooled = self._route_line(rows, mode, framework, "none", "", "", source)
            if eager is not None and pooled is not None:
                ratio = seconds / pooled[0](nodes, roofline)
                seconds = eager[0](nodes, roofline) * ratio
                how = (f"{framework} none {precision} {layout} {mode} ({eager[0].rows} rows) x {compiler}/eager "
                       f"{ratio:.2f} ({line.rows} {compiler} rows of {line.families} families)")
        return seconds, how

    @staticmethod
    def setup_seconds(rows: Sequence[GpuRow], workload: Workload, route: Route) -> float | None:
        """A compiled route's one-off compile: the median over its measured rows of the first step's excess over a
        steady step per kernel node, times the workload's nodes (None for eager routes or without such rows)."""
        if route.compiler in ("none", ""):
            return None
        rates = [
            max(r.first_step_s - r.seconds, 0.0) / kernel_nodes(r.workload)
            for r in rows
            if (r.mode, r.framework, r.compiler) == (workload.mode, route.framework, route.compiler)
            and math.isfinite(r.first_step_s)
        ]
        return float(np.median(rates)) * kernel_nodes(workload) if rates else None

    # --- predicting ------------------------------------------------------------------------------------------------

    def predict(self, workload: Workload, route: Route, device: Device) -> Prediction | None:
        """The step on ``device`` (a GPU preset, one or several), or None when no measured GPU covers the route.

        Several devices split the batch (data parallel): one device's step at its share of the batch, over the
        prior's scaling efficiency, plus the prior's all-reduce time."""
        if device.kind != "gpu":
            return None
        devices = max(device.count, 1)
        share = replace(workload, batch_size=max(1, math.ceil(workload.batch_size / devices)))
        for name, source in self.sources().items():
            rows = [r for r in self.rows if r.accelerator == name]
            found = self._seconds(rows, share, route, source, device)
            if found is None:
                continue
            one, how = found
            prior = RooflinePrior().predict(workload, route, device)
            step = one / SCALING_EFFICIENCY_PER_DOUBLING ** math.log2(devices) + prior.detail.get("communication_s", 0)
            if source.name == device.name:
                basis = f"fitted-gpu:{name} ({how})"
            else:
                basis = f"transferred-gpu:{name} -> {device.name} ({how}; the roofline on {device.name}'s data sheet)"
            if devices > 1:
                basis += f"; {devices} devices, batch {share.batch_size} each, scaled as the prior scales them"
            rmspe, low, high = self.heldout(workload.mode)
            detail = {"gpu_device_step_s": one, "fitted_rows": float(len(rows))}
            setup = self.setup_seconds(rows, workload, route)
            if setup is not None:  # paid once per job (optimiser.planner.with_setup)
                detail["compile_s"] = setup
            if math.isfinite(rmspe):
                detail.update(heldout_rmspe=rmspe, p10_step_s=step * math.exp(low), p90_step_s=step * math.exp(high))
            return Prediction.for_step(workload, step, prior.bound, basis, detail)
        return None

    # --- held out --------------------------------------------------------------------------------------------------

    def held_out(self) -> pd.DataFrame:
        """Every family left out in turn: its rows predicted from the other families' rows on the same GPU."""
        out = []
        for name, source in self.sources().items():
            rows = [r for r in self.rows if r.accelerator == name]
            for family in sorted({r.family for r in rows}):
                train = [r for r in rows if r.family != family]
                for r in rows:
                    if r.family != family:
                        continue
                    route = Route(r.framework, r.compiler, (), r.precision, r.layout, efficiency=1.0)
                    found = self._seconds(train, r.workload, route, source, source)
                    if found is None:
                        continue
                    out.append({
                        "accelerator": name, "family": family, "model": r.model, "mode": r.mode,
                        "batch": r.workload.batch_size, "compiler": r.compiler, "precision": r.precision,
                        "layout": r.layout, "measured": r.seconds, "predicted": found[0],
                    })
        return pd.DataFrame(out, columns=["accelerator", "family", "model", "mode", "batch", "compiler", "precision",
                                          "layout", "measured", "predicted"])

    def heldout(self, mode: str) -> tuple[float, float, float]:
        """(RMSPE, p10, p90 of log(measured / predicted)) of ``mode``'s held-out predictions (nan without any)."""
        if not self._figures:
            frame = self.held_out()
            for m, part in frame.groupby("mode"):
                rel = part["measured"] / part["predicted"]
                logs = np.log(rel.to_numpy(float))
                self._figures[str(m)] = (
                    float(np.sqrt(np.mean((1 / rel - 1) ** 2))),
                    float(np.quantile(logs, 0.1)),
                    float(np.quantile(logs, 0.9)),
                )
        return self._figures.get(mode, (math.nan, 0.0, 0.0))


def regret(frame: pd.DataFrame) -> pd.DataFrame:
    """Per measured configuration set (GPU, model, mode, batch): the route the held-out predictions pick, and its
    measured time over the best measured one."""
    out = []
    for (gpu, model, mode, batch), part in frame.groupby(["accelerator", "model", "mode", "batch"]):
        if len(part) < 2:
            continue
        chosen = part.loc[part["predicted"].idxmin()]
        best = part.loc[part["measured"].idxmin()]
        out.append({
            "accelerator": gpu, "model": model, "mode": mode, "batch": batch, "routes": len(part),
            "chosen": f"{chosen.compiler} {chosen.precision} {chosen.layout}",
            "best": f"{best.compiler} {best.precision} {best.layout}",
            "regret": float(chosen.measured / best.measured),
        })
    return pd.DataFrame(out)


def _rmspe(frame: pd.DataFrame) -> float:
    rel = frame["predicted"] / frame["measured"] - 1
    return float(np.sqrt(np.mean(rel**2)))


def evaluation_lines(fit: GpuFit, baseline: pd.DataFrame | None = None) -> list[str]:
    """The held-out report: RMSPE per mode and compiler, and the choice's regret; with ``baseline`` (the same rows
    predicted another way, e.g. the planner's roofline prior), its RMSPE, regret and tied sets beside them."""
    frame = fit.held_out()
    if frame.empty:
        return ["GPU: no measured GPU rows a preset covers"]
    lines = []
    for (gpu, mode), part in frame.groupby(["accelerator", "mode"]):
        lines.append(f"GPU {gpu} {mode}, held out by family: RMSPE {_rmspe(part):.1%} over {len(part)} rows")
        for (compiler, family), sub in part.groupby(["compiler", "family"]):
            lines.append(f"  {compiler:9s} {family:12s} RMSPE {_rmspe(sub):6.1%} ({len(sub)} rows)")
    choices = regret(frame)
    if not choices.empty:
        lines.append(f"GPU route choice among measured routes (held out): regret mean {choices['regret'].mean():.3f}, "
                     f"max {choices['regret'].max():.3f} over {len(choices)} model x batch x mode sets")
        worst = choices.sort_values("regret", ascending=False).head(3)
        for w in worst.itertuples():
            lines.append(f"  {w.model} {w.mode} b{w.batch}: chose {w.chosen}, best {w.best}: {w.regret:.3f}")
    if baseline is not None and not baseline.empty:
        for mode, part in baseline.groupby("mode"):
            lines.append(f"baseline {mode}: RMSPE {_rmspe(part):.1%} over {len(part)} rows")
        theirs = regret(baseline)
        sets = [p for _, p in baseline.groupby(["accelerator", "model", "mode", "batch"])["predicted"] if len(p) > 1]
        tied = sum(1 for p in sets if p.round(12).duplicated().any())
        lines.append(f"baseline route choice: regret mean {theirs['regret'].mean():.3f}, max "
                     f"{theirs['regret'].max():.3f}; {tied} of {len(sets)} sets with tied routes")
    return lines
