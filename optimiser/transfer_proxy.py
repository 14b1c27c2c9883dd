"""A transfer proxy that can fail: the shipped host at one thread count plays the shipped database, the same host at
another thread count plays an unseen host, and plans carried from one to the other through a calibration are scored
against what the second measured.

A real unseen host gets ``transferred:<source> via calibration`` predictions: the shipped fits, times the ratios of
kernel units (and whole-model anchors) that ``appopt calibrate`` measured there over the shipped host's. Dropping the
recording host's rows (``calibration_eval --drop-host``) scores only the from-scratch host fit, never that transfer.
Here the two "hosts" differ in real hardware resources: two cores against one, where compute-bound kinds run about
twice as fast and memory- and overhead-bound ones less (or slower, paying thread wake-ups), so per-kind and per-model
ratios differ and a transfer that ignored them would fail. Both directions are scored (1 -> 2 and 2 -> 1 threads).

* source: the host's measured rows at ``source_threads`` (whole models and kernel units), fitted as the planner
  fits the shipped database; its whole-model rows of the family being scored are left out (held out by family);
* calibration store: the host's kernel-unit rows at ``target_threads`` of the covering set ``appopt calibrate``
  measures (``benchmarks.calibrate.covering_units``, the calibration backends) and, with ``anchors``, the anchor
  models' whole-model rows there (``benchmarks.calibrate.ANCHOR_MODELS``), which are then not scored;
* truth: the host's SingleStream medians at ``target_threads``, per route the plan ranks.

What it does not prove: the two "hosts" share one CPU's ISA, caches, compilers and engine builds; a thread count
changes how much compute and bandwidth a model gets, not which kernels an engine picks or how an AMD core schedules
them. Its rows were recorded quiet, where a real calibration runs once, perhaps under load. A proxy that passes is
necessary for a transfer to hold on an unseen host, not sufficient.

Example::

    python -m optimiser.calibration_eval --proxy 1:2
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from optimiser.calibration_eval import Decision, decision_of, route_medians, store_routes, workload_of
from optimiser.planner import make_plan
from optimiser.spec import load_spec
from perfmodels.fitted import FittedModel, StoredEvaluation
from perfmodels.unitfit import UnitFit

if TYPE_CHECKING:
    import pandas as pd

    from perfmodels.calibration import Calibration
    from perfmodels.fit import FitResult
    from perfmodels.hostfit import HostFit


@dataclass(frozen=True)
class ProxyData:
    """The proxy's three parts, cut from one database."""

    host: str
    source: pd.DataFrame
    store: pd.DataFrame
    truth: pd.DataFrame
    #: Models whose whole-model rows the store holds (not scored).
    anchors: tuple[str, ...]


def proxy_host(frame: pd.DataFrame, source_threads: int, target_threads: int) -> str:
    """The host with the most kernel-unit rows measured at both thread counts (ValueError: none)."""
    units = frame[(frame["family"] == "kernel-unit") & (frame["source"] == "measured")]
    counts: dict[str, int] = {}
    for host, group in units.groupby("target"):
        threads = set(group["threads"].dropna().astype(int))
        if {source_threads, target_threads} <= threads:
            counts[str(host)] = len(group)
    if not counts:
        raise ValueError(
            f"--proxy: no host measured kernel units at both {source_threads} and {target_threads} threads"
        )
    return max(sorted(counts), key=lambda h: counts[h])


def proxy_data(
    frame: pd.DataFrame,
    source_threads: int,
    target_threads: int,
    anchors: Sequence[str] = (),
    units: Sequence[str] | None = None,
    backends: Sequence[str] | None = None,
) -> ProxyData:
    """Cut ``frame`` into the proxy's source, store and truth (see the module docstring). ``units`` (encoded) and
    ``backends`` default to the calibration's covering set and backends."""
    from analysis.units import encode_units
    from benchmarks.calibrate import CALIBRATE_BACKENDS, covering_units

    host = proxy_host(frame, source_threads, target_threads)
    threads = frame["threads"].astype("Int64")
    on_host = frame["target"] == host
    wanted = set(units) if units is not None else {encode_units([u]) for u in covering_units()}
    chosen = list(backends or CALIBRATE_BACKENDS)
    at_target = frame[on_host & (threads == target_threads) & (frame["source"] == "measured")]
    store_units = at_target[
        (at_target["family"] == "kernel-unit")
        & at_target["units"].isin(wanted)
        & (at_target["precision"] == "fp32")
        & at_target["backend"].isin(chosen)
    ].drop_duplicates(subset=["backend", "units"])
    inference = at_target["mode"].fillna("inference") == "inference"
    single = at_target[(at_target["scenario"] == "SingleStream") & inference]
    store_whole = single[
        single["model"].isin(list(anchors)) & (single["precision"] == "fp32") & single["backend"].isin(chosen)
    ]
    import pandas as pd

    return ProxyData(
        host=host,
        source=frame[on_host & (threads == source_threads)],
        store=pd.concat([store_units, store_whole], ignore_index=True),
        truth=single[~single["model"].isin(list(anchors))],
        anchors=tuple(anchors),
    )


class _ProxyModel(FittedModel):
    """The planner's fitted model of the proxy's source: ``result`` (the whole-model fit, of one fold), and what
    every fold shares: the unit models, the held-out figures, and (from ``shared``) the calibration and host fit
    of the one store, computed once as a plan computes them."""

    def __init__(
        self,
        result: FitResult,
        data: ProxyData,
        units: UnitFit,
        store_path: Path,
        stored: StoredEvaluation | None,
        shared: _ProxyModel | None = None,
    ) -> None:
        super().__init__(result, frame=data.source, store=store_path)
        self._proxy = (units, stored, shared)

    def units(self) -> UnitFit:
        return self._proxy[0]

    def stored_evaluation(self) -> StoredEvaluation | None:
        return self._proxy[1]

    def evaluation(self) -> None:
        """Never computed per fold (minutes each): without stored figures, plans go without held-out figures."""
        return None

    def calibration(self, source: str | None = None) -> Calibration | None:
        shared = self._proxy[2]
        return shared.calibration(source) if shared is not None else super().calibration(source)

    def host_fit(self) -> HostFit | None:
        shared = self._proxy[2]
        return shared.host_fit() if shared is not None else super().host_fit()


def evaluate_proxy(
    data: ProxyData,
    spec_path: Path,
    work_dir: Path,
    stored: StoredEvaluation | None = None,
    unit_cache: Path | None = None,
    every_route: bool = False,
) -> list[Decision]:
    """Plan every model of ``data.truth`` with the source fitted without its family and carried over by the store's
    calibration; the decisions over the ranked routes that the truth measured: those the store calibrated (the
    calibration backends' routes), or with ``every_route`` all of them (graph compilers measured whole only
    included). ``stored``: the held-out figures the plans' intervals and bands use (a real plan reads the shipped
    database's); ``unit_cache``: where the source's unit models are kept between runs (``unitfit.cache_dir_for``)."""
    from optimiser.catalog import load_catalog
    from perfmodels.fit import fit, training_rows
    from perfmodels.results_db import frame_rows, write_rows
    from perfmodels.unitfit import fit_units

    store_path = work_dir / "proxy-store.csv"
    store_path.unlink(missing_ok=True)
    write_rows(store_path, frame_rows(data.store))
    units = fit_units(data.source, cache_dir=unit_cache)
    rows = training_rows(data.source)
    whole = _ProxyModel(fit(data.source, data=rows), data, units, store_path, stored)
    spec, catalog = load_spec(spec_path), load_catalog()
    medians = route_medians(data.truth)
    calibrated = store_routes(data.store)
    decisions = []
    for family in sorted({str(f) for f in data.truth["family"].dropna()}):
        result = fit(data.source, data=rows[rows["family"] != family])
        model = _ProxyModel(result, data, units, store_path, stored, shared=whole)
        for (name, batch), measured in medians.items():
            row = measured["row"]
            if str(row["family"]) != family:  # type: ignore[index]
                continue
            plan = make_plan(spec, catalog, model=model, workload=workload_of(row, name, batch))
            only = None if every_route else calibrated
            decision = decision_of(plan.candidates, measured["routes"], name, batch, only)  # type: ignore[arg-type]
            if decision is not None:
                decisions.append(decision)
    return decisions
