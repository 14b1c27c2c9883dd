"""The transfer proxy for training plans: the shipped host at one thread count plays the database, the same host at
another thread count plays a host the training rows never saw, and training plans carried from one to the other are
scored against the training steps the second measured.

The cut is the inference proxy's (``optimiser.transfer_proxy.proxy_data``), and it proves and misses what that
one's docstring says:

* source: the host's rows at ``source_threads`` (training steps, kernel units, training-unit sweeps), fitted as the
  planner fits the database (``TrainingFit.from_frame`` with the unit models); the training rows of the family
  being scored are left out (held out by family, as ``appopt models evaluate --mode training``);
* calibration store: what ``appopt calibrate`` measures at ``target_threads``: the covering set's kernel units on
  the calibration backends and the anchor models, carried by ``perfmodels.calibration`` as a plan carries them; the
  target's hardware probes (GEMM peak, bandwidth) are those its rows recorded at that thread count;
* truth: the host's quiet training-step medians at ``target_threads``, per route a training plan ranks.

Three predictions are scored for every plan, ranked as the planner ranks them: the bare roofline ``prior`` (what a
training plan had before measurements), ``roofline-transfer`` (the fit's ratio to the prior on the source,
``TrainingFit.transfer``, what a preset gets) and ``calibrated`` (``TrainingFit.calibrated``, what a calibrated
host gets).

Example::

    python -m optimiser.calibration_eval --proxy 1:2 --mode training
"""

from __future__ import annotations

import math
import shutil
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from optimiser.calibration_eval import Compared, Decision, rmspe, summary
from perfmodels.features import Device, Route, Workload
from perfmodels.prediction import Prediction

if TYPE_CHECKING:
    import pandas as pd

    from analysis.units import Unit
    from optimiser.stages import Candidate, Plan, Targeted
    from perfmodels.roofline import RooflinePrior
    from perfmodels.training_fit import CalibratedHost, TrainingFit
    from perfmodels.training_intervals import TrainingResiduals

#: The predictions scored, in the order printed.
VARIANTS = ("prior", "roofline-transfer", "calibrated")
#: The predictions scored on a host of a measured key (``run_training_truth``): the fit of that key's rows as they
#: stand (what a plan there gives without ``appopt calibrate``), and carried by the host's calibration.
HOST_VARIANTS = ("as-measured", "calibrated")
#: A training route as the rows name it: (framework, compiler, precision); the rows record no layout.
TrainingRoute = tuple[str, str, str]
#: The unseen host's device name: no target of the database starts with it.
UNSEEN = "unseen-host"

#: A training plan on a CPU preset whose device the proxy replaces (the workload stands in for its model).
_SPEC = (
    "name: training-transfer-proxy\n"
    "application: {type: training, model: {onnx: digits_mlp.onnx}, batch_size: 1, precision: auto}\n"
    "target: {cpu: {arch: x86_64, model: xeon-8380}, scheduler: none}\n"
    "container: {formats: [docker]}\n"
    "optimisation: {goal: throughput}\n"
)


@dataclass(frozen=True)
class TrainingProxyData:
    """The training proxy's parts, cut from one database."""

    host: str
    source: pd.DataFrame
    store: pd.DataFrame
    truth: pd.DataFrame
    target_threads: int
    anchors: tuple[str, ...]

    def device(self) -> Device:
        """The unseen host as the planner's device: the GEMM peak and bandwidth its rows measured there, as a plan
        reads them from a store (``perfmodels.fitted.probe_figures``)."""
        from perfmodels.fitted import probe_figures

        rows = self.truth if self.store.empty else self.store
        peak, bandwidth = (figure * 1e9 for figure in probe_figures(rows))
        if not (peak > 0 and bandwidth > 0):
            raise ValueError(f"--proxy: no GEMM peak or bandwidth measured at {self.target_threads} threads")
        return Device(UNSEEN, "cpu", {"fp32": peak}, bandwidth, arch="x86_64")


def training_proxy_data(
    frame: pd.DataFrame, source_threads: int, target_threads: int, anchors: Sequence[str] = ()
) -> TrainingProxyData:
    """Cut ``frame`` into the training proxy's source, store and truth (ValueError: nothing to score)."""
    from optimiser.transfer_proxy import proxy_data
    from perfmodels.training_fit import PROBE_FAMILY, step_rows

    data = proxy_data(frame, source_threads, target_threads, anchors)
    data = replace(data, source=with_training_sweeps(frame, data.host, data.source))
    at_target = frame[(frame["target"] == data.host) & (frame["threads"].astype("Int64") == target_threads)]
    truth = step_rows(at_target)
    truth = truth[truth["family"] != PROBE_FAMILY]  # the per-node probes are fitted, never a plan's model
    if truth.empty:
        raise ValueError(f"--proxy: {data.host} has no quiet training step rows at {target_threads} threads")
    if step_rows(data.source).empty:
        raise ValueError(f"--proxy: {data.host} has no quiet training step rows at {source_threads} threads")
    return TrainingProxyData(data.host, data.source, data.store, truth, target_threads, data.anchors)


def with_training_sweeps(frame: pd.DataFrame, host: str, source: pd.DataFrame) -> pd.DataFrame:
    """``source`` with ``host``'s training-unit sweeps, whatever thread count ``source`` holds: they are always swept
    at ``TRAINING_UNIT_THREADS`` (``benchmarks.backward_units``), so a host measured at two threads has them too;
    cut by the source's threads, a two-thread source lost them and priced appopt-runtime's steps by FLOPs alone."""
    import pandas as pd

    from perfmodels.training_units import BACKWARD_FAMILY, OPTIMIZER_FAMILY, TRAIN_FORWARD_FAMILY

    sweeps = frame[
        (frame["target"] == host) & frame["family"].isin([TRAIN_FORWARD_FAMILY, BACKWARD_FAMILY, OPTIMIZER_FAMILY])
    ]
    missing = sweeps[~sweeps.index.isin(source.index)]
    return source if missing.empty else pd.concat([source, missing])


def route_of(route: Route) -> TrainingRoute:
    return (route.framework, route.compiler or "none", route.precision)


def measured_steps(truth: pd.DataFrame) -> dict[tuple[str, int], dict[TrainingRoute, float]]:
    """(model, batch) -> route -> median measured step seconds."""
    out: dict[tuple[str, int], dict[TrainingRoute, float]] = {}
    for (model, batch), group in truth.groupby(["model", "batch"], sort=True):
        routes: dict[TrainingRoute, float] = {}
        for key, rows in group.groupby(["framework", "compiler", "precision"], sort=True, dropna=False):
            framework, compiler, precision = (str(k) for k in key)
            compiler = "none" if compiler in ("", "nan", "<NA>", "None") else compiler
            routes[(framework, compiler, precision)] = float(rows["value"].astype(float).median()) / 1e3
        out[(str(model), int(batch))] = routes
    return out


def training_workload(row: pd.Series, units: tuple[Unit, ...]) -> Workload:
    """The workload a training plan of the recorded model sees: its costs as the row recorded them."""
    from optimiser.calibration_eval import _json

    return Workload(
        flops_per_sample=float(row["flops_per_sample"]),
        activation_bytes_per_sample=float(row["activation_bytes_per_sample"] or 0.0),
        params=float(row["params"] or 0.0),
        mode="training",
        batch_size=int(row["batch"]),
        flops_by_class=_json(row["flops_by_class"]),
        ops_by_class={k: int(v) for k, v in _json(row["ops_by_class"]).items()},
        model_name=str(row["model"]),
        units=units,
    )


class _VariantModel:
    """A performance model of one of ``VARIANTS``, predicting training steps as ``FittedModel.predict`` does."""

    name = "training-transfer-proxy"

    def __init__(
        self,
        variant: str,
        fit: TrainingFit,
        prior: RooflinePrior,
        host: CalibratedHost | None,
        threads: int,
        source: str = "",
    ) -> None:
        self.variant, self.fit, self.prior, self.host, self.threads = variant, fit, prior, host, threads
        #: The measured key ``as-measured`` predicts at.
        self.source = source

    def predict(self, workload: Workload, route: Route, device: Device) -> Prediction:
        from perfmodels.training_fit import training_prediction

        prior = self.prior.predict(workload, route, device)
        if self.variant == "prior":
            return prior
        if self.variant == "as-measured":
            fitted = self.fit.predict(workload, route, self.source, self.threads)
            return prior if fitted is None else fitted
        return training_prediction(
            self.fit,
            workload,
            route,
            device,
            prior,
            lambda _target: self.threads,
            lambda measured: self.prior.predict(workload, route, measured),
            (lambda: self.host) if self.variant == "calibrated" else None,
        )


def decision(
    candidates: Sequence[Candidate], measured: dict[TrainingRoute, float], model: str, batch: int
) -> Decision | None:
    """The plan's best-ranked candidate of each measured training route, in rank order (None: none measured)."""
    seen: dict[TrainingRoute, Compared] = {}
    for rank, c in enumerate(candidates, start=1):
        key = route_of(c.route)
        if key in measured and key not in seen:
            r = c.route
            seen[key] = Compared(model, batch, rank, (r.framework, r.compiler, r.layout, r.precision), c.prediction,
                                 measured[key])  # fmt: skip
    if not seen:
        return None
    compared = tuple(sorted(seen.values(), key=lambda c: c.rank))
    return Decision(compared, compared[0].rank == 1)


def evaluate_training_proxy(
    data: TrainingProxyData,
    work_dir: Path,
    unit_cache: Path | None = None,
    variants: Sequence[str] = VARIANTS,
    held_out: bool = True,
) -> dict[str, list[Decision]]:
    """Plan every (model, batch) of ``data.truth`` for training on the unseen host with each of ``variants``, the
    source fitted without the model's family (``held_out``; else on every row); the decisions over the routes the
    truth measured."""
    out: dict[str, list[Decision]] = {v: [] for v in variants}
    for variant, plan, measured in proxy_plans(data, work_dir, unit_cache, variants, held_out):
        made = decision(plan.candidates, measured, plan.workload.model_name, plan.workload.batch_size)
        if made is not None:
            out[variant].append(made)
    return out


def proxy_plans(
    data: TrainingProxyData,
    work_dir: Path,
    unit_cache: Path | None = None,
    variants: Sequence[str] = VARIANTS,
    held_out: bool = True,
) -> Iterator[tuple[str, Plan, dict[TrainingRoute, float]]]:
    """(variant, plan, measured step seconds per route) for every (model, batch) of ``data.truth`` and each of
    ``variants``, the source fitted without the model's family (``held_out``; else one fit of every row)."""
    from optimiser.catalog import load_catalog
    from optimiser.planner import analyse, enumerate_routes, place, predict, rank
    from optimiser.spec import load_spec
    from perfmodels.calibration import calibration_from
    from perfmodels.roofline import RooflinePrior
    from perfmodels.training_fit import CalibratedHost, TrainingFit
    from perfmodels.training_units import read_training_units
    from perfmodels.unitfit import fit_units

    shutil.copy2(Path(__file__).parents[1] / "examples" / "digits_mlp.onnx", work_dir / "digits_mlp.onnx")
    (work_dir / "train.yaml").write_text(_SPEC)
    device = data.device()
    targeted = _on_device(place(load_spec(work_dir / "train.yaml"), load_catalog()), device)
    units = fit_units(data.source, cache_dir=unit_cache)
    calibration = calibration_from(data.store, units, data.host, UNSEEN, shipped_rows=lambda: data.source)
    host = None
    if calibration is not None:
        peak, bandwidth = device.peak_flops["fp32"] / 1e9, device.mem_bandwidth / 1e9
        host = CalibratedHost(calibration, units, peak, bandwidth, data.target_threads)
    shipped, prior = read_training_units(), RooflinePrior()
    medians = measured_steps(data.truth)
    firsts = data.truth.drop_duplicates(subset=["model", "batch"])
    first = {(str(r["model"]), int(r["batch"])): r for _, r in firsts.iterrows()}
    source = data.source
    is_training = source["mode"].fillna("") == "training"
    whole = None if held_out else TrainingFit.from_frame(source, units, shipped)
    for family in sorted({str(f) for f in data.truth["family"].dropna()}):
        held = source[~(is_training & (source["family"] == family))]
        fit = whole if whole is not None else TrainingFit.from_frame(held, units, shipped)
        for (model, batch), measured in medians.items():
            row = first[(model, batch)]
            if str(row["family"]) != family:
                continue
            workload = training_workload(row, shipped.get(model, ()))
            analysed = enumerate_routes(analyse(targeted, workload))
            for variant in variants:
                model_of = _VariantModel(variant, fit, prior, host, data.target_threads, data.host)
                yield variant, rank(predict(analysed, model_of)), measured


def _on_device(targeted: Targeted, device: Device) -> Targeted:
    """The plan's target with ``device`` in place of the machine's own."""
    return replace(targeted, target=replace(targeted.target, device=device, notes=()))


def route_lines(decisions: Sequence[Decision]) -> list[str]:
    """RMSPE per route (framework, compiler, precision) over the ranked measured routes."""
    by_route: dict[str, list[float]] = {}
    for d in decisions:
        for c in d.compared:
            by_route.setdefault(f"{c.route[0]}/{c.route[1]}/{c.route[3]}", []).append(c.error)
    return [
        f"  {name:34s} RMSPE {math.sqrt(statistics.fmean(e * e for e in errors)):6.1%} ({len(errors)} plans)"
        for name, errors in sorted(by_route.items())
    ]


def report(data: TrainingProxyData, source_threads: int, decisions: dict[str, list[Decision]]) -> list[str]:
    """The figures of every variant: the summary's head and the per-route RMSPE."""
    lines = [
        f"training proxy: {data.host} at {source_threads} threads -> at {data.target_threads} threads; store "
        f"{len(data.store)} rows (anchors: {', '.join(data.anchors) or 'none'}); held out by family"
    ]
    return lines + variant_lines(decisions)


def variant_lines(decisions: dict[str, list[Decision]]) -> list[str]:
    """Each variant's RMSPE, the summary's head and its per-route RMSPE."""
    lines = []
    for variant in decisions:
        found = decisions[variant]
        lines.append(f"{variant}: RMSPE {rmspe(found):.1%}")
        lines.extend(f"  {line}" for line in summary(found)[:4])
        lines.extend(route_lines(found))
    return lines


def run_training_proxy(db: Path, pair: str, anchors: Sequence[str] | None = None) -> list[str]:
    """``calibration_eval --proxy S:T --mode training``: the report of ``db``'s host carried from S to T threads
    (AppoptError naming the flag for bad input)."""
    import tempfile

    from benchmarks.calibrate import ANCHOR_MODELS
    from optimiser.calibration_eval import proxy_threads
    from optimiser.errors import AppoptError
    from perfmodels.results_db import read_results
    from perfmodels.unitfit import cache_dir_for

    source, target = proxy_threads(pair, db)
    try:
        data = training_proxy_data(
            read_results(db, warn=False), source, target, ANCHOR_MODELS if anchors is None else anchors
        )
    except ValueError as error:
        raise AppoptError(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="appopt-training-proxy-") as work:
        decisions = evaluate_training_proxy(data, Path(work), cache_dir_for(db))
    return report(data, source, decisions)


def host_data(source: pd.DataFrame, store: pd.DataFrame, truth: pd.DataFrame, threads: int) -> TrainingProxyData:
    """A calibrated host as the training proxy's parts: ``source`` (the database) fitted as the planner fits it,
    ``store`` this host's calibration, ``truth`` its quiet training steps at ``threads``. A host of a key the
    database measured is carried from that key's rows; another (a CPU the database never saw) from the key with the
    most training rows, as its plans are (ValueError: nothing to score, no training rows, or a store of several
    hosts)."""
    from perfmodels.training_fit import PROBE_FAMILY, step_rows

    if "units" not in store or not store["units"].notna().any():
        raise ValueError("--store: no kernel unit rows (appopt calibrate writes them)")
    keys = sorted({str(t) for t in store["target"].dropna()}) if "target" in store else []
    measured = step_rows(source)["target"].astype(str)
    if len(keys) != 1 or measured.empty:
        raise ValueError(f"--store: its host ({', '.join(keys) or 'none'}) has no training rows in --db")
    carried_from = keys[0] if keys[0] in set(measured) else str(measured.value_counts().index[0])
    truth = step_rows(truth)
    truth = truth[(truth["threads"].astype("Int64") == threads) & (truth["family"] != PROBE_FAMILY)]
    if truth.empty:
        raise ValueError(f"--truth: no quiet training step rows at {threads} threads")
    return TrainingProxyData(carried_from, source, store, truth, threads, ())


def run_training_truth(db: Path, store: Path, truth: Path, threads: int) -> list[str]:
    """``calibration_eval --mode training --store S --truth T``: training plans on this host, of a key ``db``
    measured, scored against the steps ``truth`` measured here, as the rows stand and carried by ``store``'s
    calibration (AppoptError naming the flag for bad input). One fit of every row: this host's tasks are the
    database's own, run again here."""
    import tempfile

    from optimiser.errors import AppoptError
    from perfmodels.hoststore import read_store
    from perfmodels.results_db import read_results
    from perfmodels.unitfit import cache_dir_for

    frame = read_store(store)
    if frame is None or frame.empty:
        raise AppoptError(f"--store: {store} holds no rows")
    try:
        data = host_data(read_results(db, warn=False), frame, read_results(truth, warn=False), threads)
    except ValueError as error:
        raise AppoptError(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="appopt-training-host-") as work:
        decisions = evaluate_training_proxy(data, Path(work), cache_dir_for(db), HOST_VARIANTS, held_out=False)
    keys = sorted({str(t) for t in frame["target"].dropna()})
    carried = "" if keys == [data.host] else f", carried from {data.host}'s rows"
    head = (
        f"training plans on this host ({', '.join(keys)}, {threads} threads{carried}) against {len(data.truth)} "
        f"steps measured here; store {len(frame)} rows; one fit of every row of {db.name}"
    )
    return [head, *variant_lines(decisions)]


#: The proxy's directions that ``appopt models evaluate --save`` pools for the transfer bands.
BAND_DIRECTIONS = ("1:2", "2:1")
#: ``VARIANTS`` name → how ``perfmodels.training_intervals`` names that carrying.
CARRIED = {"roofline-transfer": "roofline", "calibrated": "calibration"}


def transfer_residuals(
    db: Path, directions: Sequence[str] = BAND_DIRECTIONS
) -> tuple[dict[str, list[tuple[float, float]]], list[str]]:
    """(predicted, measured) step seconds of every ranked measured route of the proxy in ``directions``, pooled, per
    carrying (``CARRIED``), and one note per direction that could not be scored (``db`` has no such rows). What
    ``appopt models evaluate --save`` stores as the transferred training steps' bands (about 35 s a direction)."""
    import tempfile

    from benchmarks.calibrate import ANCHOR_MODELS
    from optimiser.calibration_eval import proxy_threads
    from optimiser.errors import AppoptError
    from perfmodels.results_db import read_results
    from perfmodels.unitfit import cache_dir_for

    frame = read_results(db, warn=False)
    pooled: dict[str, list[tuple[float, float]]] = {kind: [] for kind in CARRIED.values()}
    notes = []
    for pair in directions:
        try:
            source, target = proxy_threads(pair, db)
            data = training_proxy_data(frame, source, target, ANCHOR_MODELS)
        except (AppoptError, ValueError) as error:
            notes.append(f"training transfer proxy {pair}: {error}")
            continue
        with tempfile.TemporaryDirectory(prefix="appopt-training-proxy-") as work:
            decisions = evaluate_training_proxy(data, Path(work), cache_dir_for(db))
        for variant, kind in CARRIED.items():
            pooled[kind].extend(
                (c.predicted.step_seconds, c.measured_s)
                for d in decisions[variant]
                for c in d.compared
                if carried_by(c.predicted) == kind  # (a route the calibration cannot carry falls back)
            )
    return pooled, notes


def carried_by(prediction: Prediction) -> str | None:
    """How a training prediction was carried to the unseen host, from its basis (``CARRIED``'s names; None: not
    transferred, as the prior of an unmeasured framework)."""
    basis = prediction.basis
    if not basis.startswith("transferred-training:"):
        return None
    return "calibration" if basis.split(" (", 1)[0].find(" via ") >= 0 else "roofline"


def training_bands(db: Path, frame: pd.DataFrame) -> tuple[TrainingResiduals | None, list[str]]:
    """The training steps' held-out bands ``appopt models evaluate --save`` stores next to ``db`` (``frame``: its
    CPU rows): the leave-one-family-out residuals of the shipped model and the transfer proxy's (None without
    training rows to hold out), and a note for each part that could not be computed."""
    from perfmodels.training_fit import leave_one_family_out
    from perfmodels.training_intervals import TrainingResiduals

    try:
        evaluation = leave_one_family_out(frame, nested=False)
    except ValueError as error:
        return None, [f"no training intervals: {error}"]
    transfers, notes = transfer_residuals(db)
    return TrainingResiduals.from_predictions(evaluation.predictions, transfers), notes
