"""Score the planner on this host against what was measured here: plans of the suite's models, predicted from a
database and a host store, next to the measured medians of the routes each plan ranks.

This answers the issue's question ("do plans hold on a host the database never saw?") where the ``models
evaluate`` figures answer another (held-out architectures on the recording host). To simulate an unseen host on the
host that recorded the shipped data, give ``--db`` a copy of the database without this host's rows
(``--drop-host`` writes one) and ``--store`` a store from ``appopt calibrate --db STORE`` (or a quick probe's, named
``*.quick.csv``); the measured medians come from ``--truth`` (default: the shipped database), this host's
SingleStream rows at the planner's thread count.

Each suite model is planned with ``--spec``'s target and goal (the README's main job: an ONNX model on this CPU),
its workload taken from the recorded row (costs and kernel units), or with ``--reanalyse`` from the suite model
analysed again by today's code, as a plan of its ONNX file would see it (rows recorded before a change to the
analysis carry the units of their day); the plan's routes that were measured are compared:

* RMSPE of predicted over measured step times;
* top-1 regret: the measured time of the first-ranked measured route over the fastest measured one;
* ties: pairs of ranked routes predicted equal (relative difference below 1e-9) whose measured times differ by
  more than 10%;
* the share of measured medians inside their prediction's p10-p90;
* where the truth measured a route more than once, how far apart those times lie: the floor of any score against
  it.

``--store-from-db DB -o STORE`` makes a store of ``DB``'s own rows of the calibration's units (quiet, where the
recording was), and ``--measure-model ONNX`` times a model on each calibration backend here.

Dropping this host's rows scores the from-scratch host fit only, never the transfer a real unseen host gets.
``--proxy S:T`` scores that transfer (``optimiser.transfer_proxy``, which says what it does and does not prove): the
database's host at S threads carried to the same host at T threads through a calibration of its T-thread rows.

Example::

    python -m optimiser.calibration_eval --drop-host benchmarks/results/default.csv -o /tmp/unseen.csv
    appopt calibrate --budget 300 --db /tmp/store.csv
    python -m optimiser.calibration_eval --db /tmp/unseen.csv --store /tmp/store.csv
    python -m optimiser.calibration_eval --proxy 1:2          # and 2:1; --quick, --units-only, --every-route
"""

from __future__ import annotations

import argparse
import gzip
import math
import shutil
import statistics
import sys
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from analysis.units import decode_units
from optimiser.errors import AppoptError
from optimiser.planner import make_plan
from optimiser.spec import load_spec
from perfmodels import Prediction, Workload

if TYPE_CHECKING:
    import pandas as pd

    from optimiser.stages import Candidate

#: Measured times further apart than this share are different speeds (a tie between them is an error).
DIFFERENT = 0.10
EXACT_TIE = 1e-9
#: (framework, compiler, layout, precision)
RouteKey = tuple[str, str, str, str]


@dataclass(frozen=True)
class Compared:
    model: str
    batch: int
    rank: int
    route: RouteKey
    predicted: Prediction
    measured_s: float

    @property
    def error(self) -> float:
        return self.predicted.step_seconds / self.measured_s - 1.0

    @property
    def covered(self) -> bool | None:
        low, high = self.predicted.detail.get("p10_step_s"), self.predicted.detail.get("p90_step_s")
        return None if low is None or high is None else bool(low <= self.measured_s <= high)


@dataclass(frozen=True)
class Decision:
    """One plan: its measured ranked routes, best-ranked first, and whether its #1 was measured."""

    compared: tuple[Compared, ...]
    first_measured: bool

    @property
    def regret(self) -> float:
        return self.compared[0].measured_s / min(c.measured_s for c in self.compared)

    def ties(self) -> list[tuple[Compared, Compared]]:
        out = []
        for i, a in enumerate(self.compared):
            for b in self.compared[i + 1 :]:
                pa, pb = a.predicted.step_seconds, b.predicted.step_seconds
                same = abs(pa - pb) <= EXACT_TIE * max(pa, pb)
                if same and max(a.measured_s, b.measured_s) > (1 + DIFFERENT) * min(a.measured_s, b.measured_s):
                    out.append((a, b))
        return out


def host_rows(truth: Path, host: str, threads: int) -> pd.DataFrame:
    """``truth``'s measured SingleStream rows of ``host`` at ``threads`` (read once: a plan's scores and the truth's
    own noise come from them)."""
    from perfmodels.results_db import read_results

    frame = read_results(truth, warn=False)
    return frame[
        (frame["target"] == host)
        & (frame["threads"].astype("Int64") == threads)
        & (frame["source"] == "measured")
        & (frame["scenario"] == "SingleStream")
    ]


def route_medians(frame: pd.DataFrame) -> dict[tuple[str, int], dict[str, object]]:
    """(model, batch) -> the workload row and route -> median step seconds of ``frame``'s measured SingleStream
    inference rows with kernel units."""
    import pandas as pd

    rows = frame[
        (frame["source"] == "measured")
        & (frame["scenario"] == "SingleStream")
        & (frame["mode"].fillna("inference") == "inference")
        & frame["units"].notna()
    ]
    out: dict[tuple[str, int], dict[str, object]] = {}
    for (model, batch), group in rows.groupby(["model", "batch"], sort=True):
        routes: dict[RouteKey, float] = {}
        for key, route_rows in group.groupby(["framework", "compiler", "layout", "precision"], sort=True):
            framework, compiler, layout, precision = (str(k) for k in key)
            routes[(framework, compiler or "none", layout, precision)] = float(
                pd.to_numeric(route_rows["median_ms"]).median() / 1e3
            )
        out[(str(model), int(batch))] = {"row": group.iloc[0], "routes": routes}
    return out


def truth_noise(rows: pd.DataFrame) -> str | None:
    """A line on how far apart repeated measurements of one route lie in a truth's ``rows`` (``host_rows``; None:
    none was repeated): against a truth that moves this much from one pass to the next, even a perfect predictor
    scores about that."""
    spans = [
        float(times.max() / times.min() - 1.0)
        for _, times in rows.groupby(["model", "batch", "framework", "compiler", "layout", "precision"])["median_ms"]
        if len(times) >= 2 and times.min() > 0
    ]
    if not spans:
        return None
    median, p90 = statistics.median(spans), statistics.quantiles(spans, n=10)[-1] if len(spans) >= 2 else spans[0]
    return (
        f"truth: {len(spans)} routes measured more than once, their times {median:.0%} apart at the median "
        f"(p90 {p90:.0%}); scores near that are the truth's own noise"
    )


def _json(value: object) -> dict[str, float]:
    """A per-class mapping given as JSON text (a recorded row's) or as the mapping itself."""
    import json

    if isinstance(value, dict):
        return {str(k): float(v) for k, v in value.items()}
    if not isinstance(value, str) or not value:
        return {}
    return {str(k): float(v) for k, v in json.loads(value).items()}


def workload_of(row: object, model: str, batch: int) -> Workload:
    """The workload a plan of the recorded model sees: its costs and kernel units as the row recorded them (a
    pandas row, or a mapping of the same fields, ``benchmarks.runner.ModelFeatures``')."""
    r = row
    return Workload(
        flops_per_sample=float(r["flops_per_sample"]),  # type: ignore[index]
        activation_bytes_per_sample=float(r["activation_bytes_per_sample"] or 0.0),  # type: ignore[index]
        params=float(r["params"] or 0.0),  # type: ignore[index]
        mode="inference",
        batch_size=batch,
        flops_by_class=_json(r["flops_by_class"]),  # type: ignore[index]
        ops_by_class={k: int(v) for k, v in _json(r["ops_by_class"]).items()},  # type: ignore[index]
        model_name=model,
        units=tuple(decode_units(str(r["units"]))),  # type: ignore[index]
    )


def reanalysed(name: str, batch: int) -> Workload | None:
    """The suite model ``name`` as a plan of its ONNX file sees it today (None: not a suite model, or it cannot
    be built here, e.g. a PyTorch export without torch)."""
    from benchmarks.features import model_features
    from benchmarks.models import get_model

    try:
        features = model_features(get_model(name).model())
    except (KeyError, ValueError, ImportError, RuntimeError):
        return None
    return workload_of(asdict(features), name, batch)


def evaluate(
    db: Path,
    store: Path | None,
    truth: pd.DataFrame,
    spec_path: Path,
    every_route: bool = False,
    reanalyse: bool = False,
) -> list[Decision]:
    """Plan every suite model that ``truth`` (this host's rows, ``host_rows``) measured with the model of ``db``
    and ``store``; score the routes the store measured (all measured routes with ``every_route`` or without a
    store). ``reanalyse``: each model's workload from today's analysis of it where it is a suite model
    (``reanalysed``), else from its row."""
    from perfmodels.fitted import fit_model
    from perfmodels.results_db import read_results

    model = fit_model(read_results(db, warn=False), source=db.name, db=db, store=store)
    spec = load_spec(spec_path)
    decisions = []
    stored = read_results(store, warn=False) if store is not None else None
    seen_whole = _whole_models(stored) if stored is not None else set()
    only = None if stored is None or every_route else store_routes(stored)
    for (name, batch), measured in route_medians(truth).items():
        if name in seen_whole:  # the host fit was scaled by its measurement: not held out
            continue
        workload = (reanalyse and reanalysed(name, batch)) or workload_of(measured["row"], name, batch)
        plan = make_plan(spec, model=model, workload=workload)
        decision = decision_of(plan.candidates, measured["routes"], name, batch, only)  # type: ignore[arg-type]
        if decision is not None:
            decisions.append(decision)
    return decisions


def store_routes(store: pd.DataFrame) -> set[RouteKey]:
    """The routes a host store measured (framework, compiler, layout, precision)."""
    from perfmodels.unitfit import row_route

    return {row_route(row) for row in store.itertuples(index=False)}


def decision_of(
    candidates: Sequence[Candidate],
    routes: dict[RouteKey, float],
    model: str,
    batch: int,
    only: Collection[RouteKey] | None = None,
) -> Decision | None:
    """The plan's ranked routes that were measured (``routes``: route -> median seconds; of those in ``only`` when
    given), best-ranked first (None: none was)."""
    seen: dict[RouteKey, Compared] = {}
    for rank, c in enumerate(candidates, start=1):
        r = c.route
        key = (r.framework, r.compiler, r.layout, r.precision)
        if key in routes and key not in seen and (only is None or key in only):
            seen[key] = Compared(model, batch, rank, key, c.prediction, routes[key])
    if not seen:
        return None
    compared = tuple(sorted(seen.values(), key=lambda c: c.rank))
    return Decision(compared, compared[0].rank == 1)


def _whole_models(store: pd.DataFrame) -> set[str]:
    """The models whose whole-model rows the store holds (plans of them are not scored)."""
    return set(store[store["scenario"] == "SingleStream"]["model"].dropna().astype(str))


def rmspe(decisions: Sequence[Decision]) -> float:
    """RMSPE of the predicted over the measured step times of every ranked measured route (NaN: none)."""
    errors = [c.error for d in decisions for c in d.compared]
    return math.sqrt(statistics.fmean(e * e for e in errors)) if errors else math.nan


def regrets(decisions: Sequence[Decision]) -> list[float]:
    """Top-1 regret of each plan that ranks two or more measured routes."""
    return [d.regret for d in decisions if len(d.compared) > 1]


def summary(decisions: Sequence[Decision]) -> list[str]:
    """The figures, then one line per model."""
    compared = [c for d in decisions for c in d.compared]
    if not compared:
        return ["nothing to compare: no measured route of this host is ranked by the plans"]
    errors = [c.error for c in compared]
    rmspe_all = rmspe(decisions)
    regret = regrets(decisions)
    ties = [t for d in decisions for t in d.ties()]
    covered = [c.covered for c in compared if c.covered is not None]
    bases = sorted({c.predicted.basis.split(" (")[0] for c in compared})
    lines = [
        f"{len(decisions)} plans, {len(compared)} ranked measured routes; bases: {', '.join(bases)}",
        f"RMSPE {rmspe_all:.1%}; within ±10% {statistics.fmean(abs(e) <= 0.1 for e in errors):.0%}; "
        f"median error {statistics.median(errors):+.1%}",
        f"top-1 regret mean {statistics.fmean(regret):.3f} max {max(regret):.3f} over {len(regret)} plans "
        f"with two or more measured routes; #1 measured in {sum(d.first_measured for d in decisions)}"
        if regret
        else "top-1 regret: no plan ranks two measured routes",
        f"ties between routes measured >{DIFFERENT:.0%} apart: {len(ties)}",
        f"measured inside p10-p90: {statistics.fmean(covered):.0%} of {len(covered)}" if covered else "no intervals",
    ]
    for (a, b) in ties:
        lines.append(f"  tie: {a.model} {'/'.join(a.route)} and {'/'.join(b.route)}: measured "
                     f"{a.measured_s * 1e3:.3f} and {b.measured_s * 1e3:.3f} ms")
    for d in decisions:
        cells = "; ".join(
            f"#{c.rank} {'/'.join(c.route[:3])} {c.predicted.step_seconds * 1e3:.3f}/{c.measured_s * 1e3:.3f}"
            for c in d.compared
        )
        lines.append(f"  {d.compared[0].model} b{d.compared[0].batch}: predicted/measured ms: {cells}")
    return lines


def drop_host(db: Path, out: Path, host: str) -> int:
    """Copy ``db`` to ``out`` without ``host``'s rows; the number of rows dropped."""
    from perfmodels.results_db import frame_rows, read_results, write_rows

    frame = read_results(db, warn=False)
    keep = frame[frame["target"].fillna("") != host]
    write_rows(out, frame_rows(keep))
    return len(frame) - len(keep)


def store_from_db(
    db: Path, out: Path, host: str, threads: int, quick: bool = False, models: Sequence[str] = ()
) -> int:
    """Write to ``out`` a store made of ``db``'s rows of the calibration's units (the quick probe's with ``quick``)
    measured on ``host`` at ``threads``: what ``appopt calibrate`` would have measured, taken from the recording
    (quiet) instead of measured again. The number of rows written."""
    from analysis.units import encode_units
    from benchmarks.calibrate import CALIBRATE_BACKENDS, covering_units, quick_units
    from perfmodels.results_db import frame_rows, read_results, write_rows

    wanted = {encode_units([u]) for u in (quick_units() if quick else covering_units())}
    frame = read_results(db, warn=False)
    rows = frame[
        (frame["family"] == "kernel-unit")
        & frame["units"].isin(wanted)
        & (frame["target"] == host)
        & (frame["threads"].astype("Int64") == threads)
        & (frame["precision"] == "fp32")
        & frame["backend"].isin(CALIBRATE_BACKENDS)
    ].drop_duplicates(subset=["backend", "units"])
    whole = frame[
        (frame["source"] == "measured")
        & (frame["scenario"] == "SingleStream")
        & frame["model"].isin(list(models))
        & (frame["target"] == host)
        & (frame["threads"].astype("Int64") == threads)
        & (frame["precision"] == "fp32")
        & frame["backend"].isin(CALIBRATE_BACKENDS)
    ]
    write_rows(out, [*frame_rows(rows), *frame_rows(whole)])
    return len(rows) + len(whole)


def measure_model(path: Path, threads: int, queries: int = 1000) -> list[str]:
    """The median step of an ONNX model on each calibration backend here (``session.run`` back to back, after 50
    warm-up runs): what the README's job measures on this machine."""
    import time

    import numpy as np
    import onnx

    from benchmarks.backends import get_backend
    from benchmarks.calibrate import CALIBRATE_BACKENDS, installed_backends

    model = onnx.load(path)
    rng = np.random.default_rng(0)
    feeds = {
        i.name: rng.random([d.dim_value or 1 for d in i.type.tensor_type.shape.dim], dtype=np.float32)
        for i in model.graph.input
    }
    lines = []
    for name in installed_backends(CALIBRATE_BACKENDS):
        session = get_backend(name).prepare(model, threads=threads)
        for _ in range(50):
            session.run(feeds)
        times = []
        for _ in range(queries):
            start = time.perf_counter()
            session.run(feeds)
            times.append(time.perf_counter() - start)
        lines.append(f"{name}: median {statistics.median(times) * 1e6:.1f} us over {queries} runs at {threads} threads")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    from perfmodels.results_db import is_gzip
    from perfmodels.targets import usable_cores

    parser = argparse.ArgumentParser(prog="python -m optimiser.calibration_eval", description=__doc__.split("\n")[0])
    parser.add_argument("--db", type=Path, help="database the plans predict from (default: the shipped one)")
    parser.add_argument("--store", type=Path, help="host store (appopt calibrate --db, or a *.quick.csv)")
    parser.add_argument("--truth", type=Path, help="database with this host's measured medians (default: shipped)")
    parser.add_argument("--spec", type=Path, default=Path(__file__).parents[1] / "examples" / "onnx-mlp-local.yaml")
    parser.add_argument("--threads", type=int, default=None, help="thread count (default: the planner's)")
    parser.add_argument("--drop-host", type=Path, metavar="DB", help="write DB without this host's rows to -o")
    parser.add_argument("--store-from-db", type=Path, metavar="DB", help="write to -o DB's calibration unit rows")
    parser.add_argument(
        "--quick", action="store_true", help="with --store-from-db or --proxy: the quick probe's units"
    )
    parser.add_argument("--whole", nargs="*", default=[], metavar="MODEL", help="with --store-from-db: whole models")
    parser.add_argument("--measure-model", type=Path, metavar="ONNX", help="time ONNX on each calibration backend")
    parser.add_argument("-o", "--output", type=Path, help="where --drop-host and --store-from-db write")
    parser.add_argument(
        "--proxy", metavar="S:T", help="score the transfer from --db's host at S threads to the same host at T "
        "(optimiser.transfer_proxy), e.g. 1:2"
    )
    parser.add_argument(
        "--anchors", nargs="*", default=None, metavar="MODEL",
        help="with --proxy: the whole-model anchors the store holds (default: appopt calibrate's; none: no models)",
    )
    parser.add_argument(
        "--units-only", action="store_true",
        help="with --proxy: the store without the anchors' rows (the anchor models are still not scored)",
    )
    parser.add_argument(
        "--mode", choices=("inference", "training"), default="inference",
        help="score inference plans, or training plans (optimiser.training_transfer_proxy; without --proxy: "
        "--store and --truth, this host's training steps)",
    )
    parser.add_argument(
        "--reanalyse", action="store_true",
        help="each suite model's workload from today's analysis of it, not from its recorded row",
    )
    parser.add_argument(
        "--every-route", action="store_true",
        help="score every measured route, not only those the store calibrated (graph compilers measured whole)",
    )
    args = parser.parse_args(argv)
    threads = args.threads or usable_cores()
    with tempfile.TemporaryDirectory(prefix="appopt-eval-") as work:
        if args.store is not None and args.store.is_file() and is_gzip(args.store):
            try:
                args.store = unzipped_store(args.store, Path(work))
            except (OSError, EOFError) as error:  # a torn or corrupt gzip file
                print(f"error: --store: {args.store}: not a readable gzip file ({error})", file=sys.stderr)
                return 1
        return _run(args, threads)


def unzipped_store(store: Path, work: Path) -> Path:
    """A gzipped store (as ``benchmarks/results/machines/`` keeps them) decompressed into ``work``, its name without
    ``.gz`` (a quick probe's store stays ``*.quick.csv``)."""
    out = work / store.name.removesuffix(".gz")
    with gzip.open(store, "rb") as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def _run(args: argparse.Namespace, threads: int) -> int:
    """``main`` on parsed arguments."""
    from perfmodels.fitted import default_db_path
    from perfmodels.hoststore import HostStoreError
    from perfmodels.targets import local_target_key

    try:
        if args.measure_model is not None:
            print("\n".join(measure_model(args.measure_model, threads)))
            return 0
        if args.store_from_db is not None:
            if args.output is None:
                raise AppoptError("-o: --store-from-db needs an output path")
            args.output.unlink(missing_ok=True)
            written = store_from_db(
                args.store_from_db, args.output, local_target_key(), threads, args.quick, args.whole
            )
            print(f"wrote {args.output}: {written} rows")
            return 0
        if args.drop_host is not None:
            if args.output is None:
                raise AppoptError("-o: --drop-host needs an output path")
            dropped = drop_host(args.drop_host, args.output, local_target_key())
            print(f"wrote {args.output} without {local_target_key()}'s {dropped} rows")
            return 0
        db = args.db or default_db_path()
        if args.proxy is not None and args.mode == "training":
            from optimiser.training_transfer_proxy import run_training_proxy

            print("\n".join(run_training_proxy(db, args.proxy, args.anchors)))
            return 0
        if args.mode == "training":
            from optimiser.training_transfer_proxy import run_training_truth

            if args.store is None or args.truth is None:
                raise AppoptError("--mode training: needs --proxy S:T, or --store and --truth")
            for path, flag in ((db, "--db"), (args.truth, "--truth"), (args.store, "--store")):
                if not path.is_file():
                    raise AppoptError(f"{flag}: {path} is not a file")
            print("\n".join(run_training_truth(db, args.store, args.truth, threads)))
            return 0
        if args.proxy is not None:
            return _proxy(db, args.proxy, args.anchors, args.spec, args.every_route, args.quick, args.units_only)
        for path, flag in ((db, "--db"), (args.truth or default_db_path(), "--truth"), (args.store, "--store")):
            if path is not None and not path.is_file():
                raise AppoptError(f"{flag}: {path} is not a file")
        truth = host_rows(args.truth or default_db_path(), local_target_key(), threads)
        decisions = evaluate(db, args.store, truth, args.spec, args.every_route, args.reanalyse)
    except AppoptError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except HostStoreError as error:  # a store that cannot be read (every path that reads one reads --store's)
        print(f"error: --store: {error}", file=sys.stderr)
        return 1
    scored = "every measured route" if args.every_route or args.store is None else "the routes the store calibrated"
    print(f"host {local_target_key()}, {threads} threads; db {db}; store {args.store}; {scored}")
    for line in summary(decisions):
        print(line)
    noise = truth_noise(truth)
    if noise is not None:
        print(noise)
    return 0


def proxy_threads(pair: str, db: Path) -> tuple[int, int]:
    """``--proxy S:T``'s two thread counts, with ``--db`` an existing file (AppoptError naming the flag)."""
    try:
        source, target = (int(part) for part in pair.split(":"))
    except ValueError:
        raise AppoptError(f"--proxy: {pair!r} is not two thread counts S:T, e.g. 1:2") from None
    if not db.is_file():
        raise AppoptError(f"--db: {db} is not a file")
    return source, target


def _proxy(
    db: Path,
    pair: str,
    anchors: Sequence[str] | None,
    spec: Path,
    every_route: bool = False,
    quick: bool = False,
    units_only: bool = False,
) -> int:
    """``--proxy S:T``: the transfer proxy's figures (``optimiser.transfer_proxy``); with ``quick``, of a store of
    the quick probe's units (and no anchors, unless named); with ``units_only``, of a store without the anchors'
    rows, scored on the same models."""
    import tempfile
    from dataclasses import replace

    from analysis.units import encode_units
    from benchmarks.calibrate import ANCHOR_MODELS, quick_units
    from optimiser.transfer_proxy import evaluate_proxy, proxy_data
    from perfmodels.fitted import read_evaluation
    from perfmodels.results_db import read_results
    from perfmodels.unitfit import cache_dir_for

    source, target = proxy_threads(pair, db)
    try:
        chosen = (() if quick else ANCHOR_MODELS) if anchors is None else tuple(anchors)
        units = [encode_units([u]) for u in quick_units()] if quick else None
        data = proxy_data(read_results(db, warn=False), source, target, chosen, units)
        if units_only:
            data = replace(data, store=data.store[data.store["scenario"] == "kernel"])
    except ValueError as error:
        raise AppoptError(str(error)) from None
    with tempfile.TemporaryDirectory(prefix="appopt-proxy-") as work:
        decisions = evaluate_proxy(data, spec, Path(work), read_evaluation(db), cache_dir_for(db), every_route)
    print(
        f"proxy: {data.host} at {source} threads -> at {target} threads; db {db}; store {len(data.store)} rows "
        f"(anchors: {', '.join(data.anchors) or 'none'}{', not in the store' if units_only else ''}); "
        "held out by family; "
        f"{'every measured route' if every_route else 'the calibrated routes'}{'; quick probe units' if quick else ''}"
    )
    for line in summary(decisions):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
