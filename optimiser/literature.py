"""The seeds' compiler claims next to what this database measures for the same compiler, on the suite.

For each reported speedup in the catalog (``compilers.yaml``), the measured figure is the compiler's route over its
framework's default backend (the first registered backend of that framework with no compiler: ``onnxruntime`` at
its default optimisation level, ``torch`` eager), both SingleStream at the same host, model, batch, threads and
precision, rows flagged busy or INVALID left out as the fit leaves them: median latency of the default over the
compiler's, geometric mean per model, then over the models that have both. A compiler no package installs (Glow,
Tensor Comprehensions, PlaidML) or that needs a device this machine lacks (TensorRT) is marked unmeasurable with the
reason, from its catalog entry; a legacy one is measured through its successor (nGraph through OpenVINO) and says
so. A tuned compiler's claim (TVM's, which needs MetaSchedule's search: ``tvm-tuned``) is shown with what the same
compiler measures untuned beside it (``tvm``), since the seeds' figure is about the tuned one. Computed when
asked, so it works on any database, empty included ("not measured").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

if TYPE_CHECKING:
    from optimiser.catalog.models import Catalog, Compiler, Speedup


@dataclass(frozen=True)
class Measured:
    """A compiler's speedup over its framework's default, measured here."""

    compiler: str
    framework: str
    baseline_backend: str
    geomean: float
    models: int
    pairs: int
    low: float
    high: float


@dataclass(frozen=True)
class ClaimCheck:
    """One seed claim and what this database says about it."""

    compiler: Compiler
    #: None for a compiler the seeds give no figure for (listed for what this database measures of it).
    speedup: Speedup | None
    #: The compiler whose rows stand in (the successor for a legacy one), or None when it cannot be measured here.
    measured_as: str | None
    #: Why it cannot be measured here ("" when it can).
    unmeasurable: str
    measured: list[Measured]
    #: A tuned compiler's untuned twin (its catalog id) and what it measures, shown beside the tuned figure.
    untuned_id: str | None = None
    untuned: tuple[Measured, ...] = ()

    def claim_text(self) -> str:
        s = self.speedup
        if s is None:
            return "no speedup figure in the seeds"
        figure = f"{s.low:g}x" if s.high is None else f"{s.low:g}-{s.high:g}x"
        where = f"; {s.device} GPU" if s.device == "nvidia" else ""
        return f"{figure} over {s.baseline} ({s.workload or 'unspecified workload'}{where})"

    def measured_text(self) -> str:
        if self.unmeasurable:
            return f"cannot be measured here: {self.unmeasurable}"
        via = "" if self.measured_as == self.compiler.id else f" (through its successor {self.measured_as})"
        if not self.measured:
            text = f"not measured{via}: no rows of its route with its framework's default on the same models"
        else:
            text = "; ".join(_measured_text(m) for m in self.measured) + via
        if self.untuned_id is not None:
            untuned = "; ".join(_measured_text(m) for m in self.untuned) or "not measured"
            text += f"; untuned ({self.untuned_id}): {untuned}"
        return text


def _measured_text(m: Measured) -> str:
    return (f"{m.geomean:.3g}x over {m.framework} ({m.baseline_backend}), geomean of {m.models} model"
            f"{'s' if m.models != 1 else ''} ({m.pairs} pairs, per model {m.low:.3g}-{m.high:.3g}x)")


def unmeasurable_reason(compiler: Compiler, has_accelerator: bool = False) -> str:
    """Why ``compiler`` cannot run on this (CPU-only) machine, or "" when it can, from its catalog entry."""
    if not compiler.install.available:
        why = _first_sentence_with(compiler.description, ("source", "package", "deploy"))
        return f"no installable package ({why})"
    if not compiler.cpu_archs and not has_accelerator:
        return f"runs only on {', '.join(compiler.accelerators) or 'accelerators'} GPUs; this machine has none"
    return ""


def _first_sentence_with(text: str, words: Iterable[str]) -> str:
    sentences = [s.strip() for s in text.replace("\n", " ").split(". ") if s.strip()]
    for sentence in sentences:
        if any(word in sentence.lower() for word in words):
            return sentence.rstrip(".")
    return "none listed in the catalog"


def default_backends(backends: Iterable[tuple[str, str, str]]) -> dict[str, str]:
    """framework -> its default backend: the first registered one with no compiler (``(name, framework,
    compiler)`` in registry order)."""
    defaults: dict[str, str] = {}
    for name, framework, compiler in backends:
        if compiler == "none":
            defaults.setdefault(framework, name)
    return defaults


def measure_compiler(frame: pd.DataFrame, compiler: str, defaults: Mapping[str, str]) -> list[Measured]:
    """The compiler's measured speedup over each framework's default it was measured against, from ``frame``."""
    if frame.empty or "scenario" not in frame:
        return []
    from perfmodels.fit import flagged

    rows = frame[(frame["source"] == "measured") & (frame["scenario"] == "SingleStream") & ~flagged(frame)]
    key = ["host", "model", "batch", "threads", "precision"]
    out = []
    compiled = rows[rows["compiler"] == compiler]
    for framework in sorted(set(compiled["framework"].dropna())):
        baseline_backend = defaults.get(str(framework))
        if baseline_backend is None:
            continue
        mine = compiled[compiled["framework"] == framework]
        base = rows[(rows["backend"] == baseline_backend) & (rows["compiler"] == "none")]
        joined = _latency(mine, key).merge(_latency(base, key), on=key, suffixes=("_compiled", "_base"))
        joined = joined[(joined["ms_compiled"] > 0) & (joined["ms_base"] > 0)]
        if joined.empty:
            continue
        joined = joined.assign(log_ratio=(joined["ms_base"] / joined["ms_compiled"]).map(math.log))
        per_model = joined.groupby("model")["log_ratio"].mean().map(math.exp)
        out.append(Measured(
            compiler=compiler, framework=str(framework), baseline_backend=baseline_backend,
            geomean=math.exp(float(per_model.map(math.log).mean())), models=len(per_model), pairs=len(joined),
            low=float(per_model.min()), high=float(per_model.max()),
        ))
    return out


def _latency(rows: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Median latency per key (the median of repeated rows), from ``median_ms`` (else the row's value)."""
    ms = rows["median_ms"].astype("Float64").fillna(rows["value"].astype("Float64"))
    table = rows[key].assign(ms=ms.astype(float)).dropna()
    return table.groupby(key, as_index=False)["ms"].median()


def claim_checks(catalog: Catalog, frame: pd.DataFrame, defaults: Mapping[str, str]) -> list[ClaimCheck]:
    """Every reported compiler speedup in the catalog with what ``frame`` measures for the same compiler, and one
    line for each compiler without a figure."""
    checks = []
    for compiler in catalog.compilers.values():
        reason = unmeasurable_reason(compiler)
        stand_in: Compiler | None = compiler
        if reason and compiler.successor and compiler.successor in catalog.compilers:
            stand_in = catalog.compilers[compiler.successor]
            reason = unmeasurable_reason(stand_in)
        measured = [] if reason or stand_in is None else measure_compiler(frame, stand_in.id, defaults)
        untuned_id = compiler.tuning.untuned if compiler.tuning is not None else None
        untuned = () if reason or untuned_id is None else tuple(measure_compiler(frame, untuned_id, defaults))
        claims: list[Speedup | None] = list(compiler.speedups) or [None]
        for speedup in claims:
            checks.append(ClaimCheck(compiler, speedup, None if reason else stand_in.id if stand_in else None,
                                     reason, measured, untuned_id, untuned))
    return checks


def format_checks(checks: Iterable[ClaimCheck], rows: int) -> list[str]:
    """The table ``appopt models literature`` prints: each claim, then what this database measures."""
    lines = [f"seed compiler claims against this database ({rows} rows; measured: SingleStream median latency of "
             "the framework's default over the compiler's route, geomean over models with both)"]
    for check in checks:
        claimed = "" if check.speedup is None else "claimed "
        lines.append(f"{check.compiler.name} [{check.compiler.id}]: {claimed}{check.claim_text()}")
        lines.append(f"    here: {check.measured_text()}")
        if check.speedup is not None:
            lines.append(f"    source: {check.speedup.source.citation}")
    return lines


def literature_table(catalog: Catalog, frame: pd.DataFrame) -> list[str]:
    """``format_checks`` over ``claim_checks`` with the registered backends' defaults (what the CLI prints)."""
    from benchmarks.backends import all_backends

    registry: list[tuple[str, str, str]] = [
        (b.name, b.route.framework, b.route.compiler) for b in all_backends().values()
    ]
    return format_checks(claim_checks(catalog, frame, default_backends(registry)), len(frame))


__all__ = ["ClaimCheck", "Measured", "claim_checks", "default_backends", "format_checks", "literature_table",
           "measure_compiler", "unmeasurable_reason"]
