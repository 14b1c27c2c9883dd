"""The planner: enumerate every compatible route for a spec, rank it with a performance model, explain the rest.

Its stages (``optimiser.stages`` defines the data between them): ``place`` (spec → target), ``analyse`` (→ workload),
``enumerate_routes`` (→ candidates), ``predict`` (→ predictions) and ``rank`` (→ plan); ``make_plan`` runs them.

A route is framework × compiler × one library per role (dnn, blas) × precision × layout. Rules come from the catalog
(modes, CPU archs, accelerators, the framework × compiler T/I matrix, status); the user's allow/deny lists and pins
come from the spec. Every route that is not ranked is listed in ``Plan.excluded`` with its reason.

Example::

    >>> from optimiser.spec import load_spec
    >>> plan = make_plan(load_spec("examples/resnet50-gpu-slurm.yaml"))  # doctest: +SKIP
    >>> plan.choice.route.key  # doctest: +SKIP
    'pytorch/none/cudnn+cublas/bf16/NHWC'
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from optimiser.catalog import load_catalog
from optimiser.catalog.models import Catalog, Compiler, Framework, Hardware, Library
from optimiser.errors import PlanError, SpecError
from optimiser.spec import AppSpec, Selection, check_spec_files
from optimiser.stages import (
    DENIED,
    NOT_ALLOWED,
    Analysed,
    Candidate,
    Enumerated,
    Exclusion,
    Plan,
    Predicted,
    RouteOption,
    Targeted,
    next_stage,
    objective,
)
from optimiser.suggest import unknown_id_message
from optimiser.target import ResolvedTarget, gpu_presets, resolve_target
from optimiser.workload import workload_for
from perfmodels import PerformanceModel, Prediction, Route, Workload
from perfmodels.fitted import load_default_model
from perfmodels.priors import (
    COMPILER_SOURCE,
    LAYOUT_SOURCE,
    TENSOR_CORE_SOURCE,
    TF32_SOURCE,
    capped_compiler_speedup,
    layout_factor,
    tf32_share,
)

NO_COMPILER = "none"
#: Precisions tried when the spec says ``auto``. int8 is left out: it needs calibration data and can cost accuracy,
#: so it is used only when the spec asks for it.
_AUTO_PRECISIONS = ("bf16", "fp16", "fp32")


def make_plan(
    spec: AppSpec,
    catalog: Catalog | None = None,
    model: PerformanceModel | None = None,
    workload: Workload | None = None,
) -> Plan:
    """Rank every compatible route for ``spec``; raise PlanError listing why each failed if none fits.
    ``workload`` stands in for the spec's model (an evaluation plans measured models from their recorded costs)."""
    targeted = place(spec, catalog or load_catalog())
    return rank(predict(enumerate_routes(analyse(targeted, workload)), model or load_default_model()))


def place(spec: AppSpec, catalog: Catalog) -> Targeted:
    """Stage ``target``: check the spec's catalog ids and files (SpecError), then resolve its target."""
    check_spec_ids(spec, catalog)
    check_spec_files(spec)
    return Targeted(spec=spec, catalog=catalog, target=resolve_target(spec.target, catalog))


def analyse(targeted: Targeted, workload: Workload | None = None) -> Analysed:
    """Stage ``workload``: what one step of the spec's model computes (``workload``, when given, stands in for it)."""
    return next_stage(targeted, Analysed, workload=workload or workload_for(targeted.spec, targeted.catalog))


def enumerate_routes(analysed: Analysed) -> Enumerated:
    """Stage ``candidates``: every route the catalog and spec allow; PlanError listing the exclusions if none is."""
    enumerator = _Enumerator(analysed.spec, analysed.catalog, analysed.target, analysed.workload)
    options = tuple(enumerator.routes())
    if not options:
        raise PlanError(
            "no route satisfies the spec:", *(f"  {e.describe()}" for e in enumerator.excluded), exit_code=3
        )
    return next_stage(analysed, Enumerated, options=options, excluded=tuple(enumerator.excluded))


def predict(enumerated: Enumerated, model: PerformanceModel) -> Predicted:
    """Stage ``predictions``: the model's figures for every route (with its setup time, e.g. tuning)."""
    device = enumerated.target.device
    if device.kind == "gpu" and hasattr(model, "gpu_presets"):  # names the GPUs that measured rows were taken on
        model.gpu_presets = gpu_presets(enumerated.catalog)
    candidates = tuple(
        Candidate(
            route=o.route,
            prediction=with_setup(model.predict(enumerated.workload, o.route, device), o.route, enumerated.workload),
            base_image=o.base_image,
            notes=o.notes,
        )
        for o in enumerated.options
    )
    return next_stage(enumerated, Predicted, candidates=candidates, model_name=model.name)


def rank(predicted: Predicted) -> Plan:
    """Stage ``plan``: the candidates ranked by the goal's figure, the model's error band ordered by its rules."""
    spec = predicted.spec
    # Ranked by the goal's figure; equal figures (routes the model cannot tell apart) by the tie rules. Within the
    # model's error of the fastest, a route whose figure stands on measurements comes before one on a prior alone
    # (BAND_RULES), then the figures decide: preferring no compiler there too gave up gains the model saw
    # (docs/decisions.md, 2026-11-26, band rules).
    # ``explain_ties`` states which rule decided each.
    candidates = sorted(predicted.candidates, key=lambda c: (objective(spec, c.prediction), *tie_break_key(c)))
    band = error_band(spec, candidates)
    candidates[:band] = sorted(
        candidates[:band], key=lambda c: (*band_key(c), objective(spec, c.prediction), *tie_break_key(c))
    )
    return Plan(
        spec=spec,
        target=predicted.target,
        workload=predicted.workload,
        candidates=tuple(candidates),
        excluded=predicted.excluded,
        model_name=predicted.model_name,
        notes=(*predicted.target.notes, *_unshipped_command_files(spec)),
        layout_applies=has_convolutions(predicted.workload),
        band=band,
    )


#: Command words that look like a script the application runs.
_SCRIPT_SUFFIXES = (".py", ".sh", ".R", ".jl", ".lua")


def _unshipped_command_files(spec: AppSpec) -> list[str]:
    """A note for each relative script the command runs that ``application.code`` does not ship."""
    shipped = {path.name for path in spec.application.code}
    return [
        f"application.command runs {word}, which application.code does not ship: the base image must provide it"
        for word in spec.application.command or []
        if word.endswith(_SCRIPT_SUFFIXES) and not word.startswith("/") and word.split("/")[0] not in shipped
    ]


def has_convolutions(workload: Workload) -> bool:
    """True when the model has convolution FLOPs (the only ops a memory layout changes)."""
    return workload.flops_by_class.get("conv", 0.0) > 0


_PRECISION_RISK = {"fp32": 0, "bf16": 1, "fp16": 2, "int8": 3}
Rule = tuple[str, Callable[[Candidate], Any]]
#: How routes the model cannot separate are ordered, first rule first: (name, key; lower wins). Within the model's
#: error of the fastest route the first decides before the figures do (``BAND_RULES``); the rest order routes
#: whose figures are equal.
_MEASURED: Rule = ("measured basis over prior", lambda c: not measured_basis(c.prediction))
_SIMPLER: Rule = ("fewer moving parts (no compiler)", lambda c: c.route.compiler != NO_COMPILER)
_SAFER: Rule = (
    "fewer numerical risks (fp32, then bf16: no loss scaling, then fp16, then int8)",
    lambda c: _PRECISION_RISK.get(c.route.precision, 9),
)
BAND_RULES: tuple[Rule, ...] = (_MEASURED,)
TIE_RULES: tuple[Rule, ...] = (
    *BAND_RULES,
    _SIMPLER,
    _SAFER,
    ("the layout the device prefers (layout prior)", lambda c: -c.route.layout_factor),
    ("the framework's and libraries' efficiency prior", lambda c: -c.route.efficiency),
    ("route name (alphabetical: nothing else tells them apart)", lambda c: c.route.key),
)
def measured_basis(p: Prediction) -> bool:
    """True when a prediction stands on measurements of this machine (not the prior alone)."""
    return p.basis.startswith(("fitted", "kernel units", "calibrated"))


def tie_break_key(c: Candidate) -> tuple[Any, ...]:
    return tuple(rule(c) for _, rule in TIE_RULES)


def band_key(c: Candidate) -> tuple[Any, ...]:
    return tuple(rule(c) for _, rule in BAND_RULES)


def error_band(spec: AppSpec, ranked: Sequence[Candidate]) -> int:
    """How many of the ``ranked`` candidates (fastest first) lie within the fastest one's model error of it."""
    best = objective(spec, ranked[0].prediction)
    error, _ = model_error(ranked[0].prediction)
    return sum(1 for c in ranked if abs(objective(spec, c.prediction) - best) <= error * abs(best) * (1 + 1e-12))


#: The error assumed for a prediction whose model has no measured error (the roofline prior's), as a share.
PRIOR_ERROR = 0.25


def model_error(p: Prediction) -> tuple[float, str]:
    """The relative error of a prediction's model and where the figure comes from."""
    rmspe = p.detail.get("heldout_rmspe")
    if rmspe and p.basis.startswith("calibrated"):
        return float(rmspe), "leave-one-unit-out RMSPE of this host's own fit"
    if rmspe and "descriptor_factor" in p.detail:
        return float(rmspe), "held-out RMSPE of the fitted model with what its descriptors missed on an unseen CPU"
    if rmspe:
        return float(rmspe), "held-out RMSPE of the fitted model"
    return PRIOR_ERROR, "assumed for the roofline prior, which no measurement checks here"


def with_setup(prediction: Prediction, route: Route, workload: Workload) -> Prediction:
    """``prediction`` with the route's one-off setup paid once over the job: the setup measured for its compiler
    (``detail["compile_s"]``, ``perfmodels.setup_time``: the compile, and a tuned compiler's search), else the
    catalog's prior search (``setup_seconds``, 0 for a compiler that does not tune). A time-to-solution plan counts
    it in the whole job, a throughput plan in the samples per second over the job."""
    measured = prediction.detail.get("compile_s")
    search, searched = prediction.detail.get("search_s"), prediction.detail.get("search_trials")
    if measured is not None and search is not None and searched and route.tuning_trials:
        measured += search * (route.tuning_trials / searched - 1.0)  # the search grows with the trial budget
    return prediction.with_setup(route.setup_seconds if measured is None else measured, workload.total_samples)



def runtime_architecture(name: str | None, catalog: Catalog) -> str | None:
    """The catalog id of architecture ``name`` when ``runtime.architectures`` builds it (None: no name, or not built
    there)."""
    if name is None:
        return None
    from runtime.architectures import ARCHITECTURES  # (imports onnx: only training plans of named models need it)

    arch = catalog.get_architecture(name).id
    return arch if arch in ARCHITECTURES else None


def trains_in_runtime(spec: AppSpec, catalog: Catalog) -> bool:
    """Whether a training plan for ``spec`` on a framework with a trainer in the runtime (``trains_onnx``) trains
    through ``python -m runtime train`` in its image: no command of its own, and an ONNX model or a named architecture
    the runtime builds (``runtime_architecture``)."""
    app = spec.application
    if app.type != "training" or app.command:
        return False
    return app.model.onnx is not None or runtime_architecture(app.model.architecture, catalog) is not None


class _Enumerator:
    """Walks the catalog for one spec and target, collecting routes and exclusions."""

    def __init__(self, spec: AppSpec, catalog: Catalog, target: ResolvedTarget, workload: Workload) -> None:
        self.spec = spec
        self.catalog = catalog
        self.target = target
        self.workload = workload
        self.convolutions = has_convolutions(workload)
        self.mode = spec.application.type
        self.excluded: list[Exclusion] = []
        self._runtime_trains: bool | None = None  # trains_in_runtime, asked once

    def _exclude(self, reason: str, **what: str) -> None:
        self.excluded.append(Exclusion(what=what, reason=reason))

    def routes(self) -> Iterable[RouteOption]:
        for fw in self.catalog.frameworks.values():
            if not self._framework_ok(fw):
                continue
            precisions = self._precisions(fw)
            layouts = self._layouts(fw)
            libraries = self._library_sets(fw)
            compilers = self._compilers(fw)
            if not (precisions and layouts and libraries is not None and compilers):
                continue
            base_image = self._base_image(fw)
            if base_image is None:
                continue
            for comp, libs, prec, layout in itertools.product(compilers, libraries, precisions, layouts):
                route = self._route(fw, comp, libs, prec, layout)
                yield RouteOption(route, base_image, self._notes(fw, comp, route))

    # --- frameworks ---------------------------------------------------------------------------------------------

    def _tasks_per_node(self) -> int:
        gpu = self.spec.target.gpu
        return max(gpu.count if gpu else 0, 1)

    def _processes(self) -> int:
        """Processes a job starts: one per GPU (or one per CPU node) on every node."""
        return self.spec.target.nodes * self._tasks_per_node()

    def _framework_ok(self, fw: Framework) -> bool:
        pinned = self.spec.application.framework
        t = self.target
        beyond = sorted({u.kind for u in self.workload.units} - set(fw.expresses)) if fw.expresses else []
        checks: list[tuple[bool, str]] = [
            (pinned in ("auto", fw.id), f"application.framework pins {pinned}"),
            (fw.install.available, _no_install(fw.status, fw.successor)),
            (self.mode in fw.modes, f"does not support {self.mode} (supports {', '.join(fw.modes) or 'nothing'})"),
            (
                t.device_key == "cpu" or t.device_key in fw.accelerators,
                f"no {t.device_key} accelerator support",
            ),
            (t.arch in fw.cpu_archs, f"no build for {t.arch} CPUs"),
            (
                self.spec.application.model.onnx is None
                or fw.reads_onnx
                or (self.mode == "training" and fw.trains_onnx is not None),
                "cannot load an ONNX model file (application.model.onnx)",
            ),
            (
                not beyond,
                f"builds models of {', '.join(fw.expresses)} layers only; the model has {', '.join(beyond)} layers",
            ),
            (
                not fw.model_files_only or self.mode != "inference" or self._brings_a_model(),
                f"runs model files only, and the spec names the architecture "
                f"{self.spec.application.model.architecture!r} without one: give application.model.onnx (or an "
                "application.command that brings its model)",
            ),
            (
                self.mode != "training" or fw.distributed_training or self._processes() == 1,
                f"trains in one process; the spec asks for {self._processes()} "
                f"({self.spec.target.nodes} node(s) x {self._tasks_per_node()} task(s))",
            ),
            # The spec's lists last: what they remove is what would have run otherwise (the report lists it).
            *_selection_checks("frameworks", fw.id, self.spec.optimisation.allow, self.spec.optimisation.deny),
            (
                fw.status == "maintained" or pinned == fw.id,
                f"legacy{_successor(fw.successor)}; pin application.framework to use it anyway",
            ),
        ]
        for ok, reason in checks:
            if not ok:
                self._exclude(reason, framework=fw.id)
                return False
        return True

    def _brings_a_model(self) -> bool:
        """True when the spec gives a model file, or a command that may load its own."""
        return self.spec.application.model.onnx is not None or bool(self.spec.application.command)

    def _precisions(self, fw: Framework) -> list[str]:
        wanted = self.spec.application.precision
        supported = fw.precisions.get(self.target.device_key, ["fp32"])
        hw = self.target.hardware.peak_flops
        out: list[str] = []
        for prec in _AUTO_PRECISIONS if wanted == "auto" else (wanted,):
            reason = None
            if prec not in supported:
                reason = f"{fw.id} does not run {prec} on {self.target.device_key}"
            elif prec not in hw:
                reason = f"{self.target.hardware.id} has no {prec} support"
            elif prec == "int8" and self.mode == "training":
                reason = "int8 is for inference only"
            elif self._trains_in_runtime(fw) and prec not in (trainable := fw.trains_onnx_precisions or supported):
                reason = (
                    f"{fw.id} trains the model in its image with python -m runtime train --engine {fw.trains_onnx}, "
                    f"at {', '.join(trainable)} only"
                )
            elif selection := _selection_problem("precisions", prec, self.spec):
                reason = selection
            if reason is None:
                out.append(prec)
            elif wanted != "auto" or prec in supported:
                self._exclude(reason, framework=fw.id, precision=prec)
        if not out and wanted == "auto":
            self._exclude("no usable precision", framework=fw.id)
        return out

    def _trains_in_runtime(self, fw: Framework) -> bool:
        """Whether a training plan on ``fw`` trains through ``python -m runtime train`` (``trains_in_runtime``, and
        the framework names its trainer there)."""
        if fw.trains_onnx is None:
            return False
        if self._runtime_trains is None:
            self._runtime_trains = trains_in_runtime(self.spec, self.catalog)
        return self._runtime_trains

    def _layouts(self, fw: Framework) -> list[str]:
        layouts = fw.layouts.get(self.target.device_key, ["NCHW"])
        out: list[str] = []
        lay: str
        for lay in layouts:
            problem = _selection_problem("layouts", lay, self.spec)
            if problem:
                self._exclude(problem, framework=fw.id, layout=lay)
            else:
                out.append(lay)
        if not out:
            self._exclude("every layout excluded by optimisation allow/deny", framework=fw.id)
        if not self.convolutions and len(out) > 1:
            # A layout only changes convolutions: rank one route per layout-free choice, in the framework's default.
            for lay in out[1:]:
                self._exclude(
                    f"the model has no convolutions, so the layout changes nothing ({out[0]} kept)",
                    framework=fw.id, layout=lay,
                )
            out = out[:1]
        return out

    # --- libraries ----------------------------------------------------------------------------------------------

    def _library_sets(self, fw: Framework) -> list[tuple[str, ...]] | None:
        """One library per role the framework uses on this device; None if a role has no usable library."""
        by_role: dict[str, list[str]] = {}
        for lib_id in fw.libraries.get(self.target.device_key, []):
            lib = self.catalog.libraries[lib_id]
            reason = self._library_problem(lib)
            if reason:
                self._exclude(reason, framework=fw.id, library=lib_id)
                by_role.setdefault(lib.role, [])
            else:
                by_role.setdefault(lib.role, []).append(lib_id)
        empty = [role for role, libs in by_role.items() if not libs]
        if empty:
            self._exclude(f"no usable {' or '.join(empty)} library", framework=fw.id)
            return None
        roles = sorted(by_role)
        return [tuple(combo) for combo in itertools.product(*(by_role[r] for r in roles))] or [()]

    def _library_problem(self, lib: Library) -> str | None:
        t = self.target
        if t.device_key == "cpu":
            if t.arch not in lib.cpu_archs:
                return f"{lib.name} does not run on {t.arch} CPUs"
        elif t.device_key not in lib.accelerators:
            return f"{lib.name} does not run on {t.device_key} accelerators"
        return self._usable_problem("libraries", lib)

    # --- compilers ----------------------------------------------------------------------------------------------

    def _compilers(self, fw: Framework) -> list[Compiler | None]:
        """Each usable compiler (None: the framework alone). A tuned compiler (``tvm-tuned``) is an entry of its
        own beside the untuned one, its search the route's setup."""
        out: list[Compiler | None] = []
        # An allow list restricts which compilers may be used; running without one stays allowed unless denied.
        if NO_COMPILER in (self.spec.optimisation.deny.compilers or []):
            self._exclude(f"{DENIED}compilers", framework=fw.id, compiler=NO_COMPILER)
        else:
            out.append(None)
        for comp in self.catalog.compilers.values():
            reason = self._compiler_problem(fw, comp)
            if reason is not None:
                self._exclude(reason, framework=fw.id, compiler=comp.id)
            else:
                out.append(comp)
        return out

    def _compiler_problem(self, fw: Framework, comp: Compiler) -> str | None:
        t = self.target
        modes = comp.support.get(fw.id, [])
        if self.mode not in modes:
            have = "/".join(modes) if modes else "no"
            return f"{comp.name} has {have} support for {fw.name}; {self.mode} needs it"
        if t.device_key == "cpu" and t.arch not in comp.cpu_archs:
            return f"{comp.name} does not target {t.arch} CPUs"
        if t.device_key != "cpu" and t.device_key not in comp.accelerators:
            return f"{comp.name} does not target {t.device_key} accelerators"
        return self._usable_problem("compilers", comp)

    def _usable_problem(self, category: str, entry: Library | Compiler) -> str | None:
        """What keeps a library or compiler that suits the hardware out: no install, the spec's allow/deny lists,
        or legacy status without an explicit allow. The lists come after the hardware rules, so the report names
        only what the lists removed."""
        if not entry.install.available:
            return _no_install(entry.status, entry.successor)
        selection = _selection_problem(category, entry.id, self.spec)
        if selection:
            return selection
        if entry.status != "maintained" and not _explicitly_allowed(category, entry.id, self.spec.optimisation.allow):
            return f"legacy{_successor(entry.successor)}; {_opt_in(category)}"
        return None

    # --- assembling a route -------------------------------------------------------------------------------------

    def _route(
        self, fw: Framework, comp: Compiler | None, libs: tuple[str, ...], prec: str, layout: str
    ) -> Route:
        key = self.target.device_key
        efficiency = fw.efficiency.get(key, 0.5)
        for lib_id in libs:
            efficiency *= self.catalog.libraries[lib_id].efficiency.get(key, 1.0)
        speedup, setup, trials = 1.0, 0.0, 0
        if comp is not None and comp.speed_prior is not None:
            speedup = comp.speed_prior.factor
        elif comp is not None:
            speedup = capped_compiler_speedup(compiler_speedup(comp, key, self.mode, prec), min(efficiency, 1.0))
        if comp is not None and comp.tuning is not None:
            trials = self.spec.optimisation.tuning_trials or comp.tuning.trials
            # the search's prior, growing with the trials; a measured setup replaces it (with_setup)
            setup = comp.tuning.seconds * trials / comp.tuning.trials
        return Route(
            framework=fw.id,
            compiler=comp.id if comp else NO_COMPILER,
            libraries=libs,
            precision=prec,
            layout=layout,
            efficiency=min(efficiency, 1.0),
            compiler_speedup=speedup,
            layout_factor=layout_factor(self.target.device.kind, layout, prec, self.convolutions),
            setup_seconds=setup,
            tuning_trials=trials,
            tf32_share=tf32_share(fw.id, self.workload.flops_by_class) if self._tf32(prec) else 0.0,
        )

    def _tf32(self, precision: str) -> bool:
        """True when fp32 work may run on TF32 tensor cores (fp32 on hardware that has them)."""
        return precision == "fp32" and "tf32" in self.target.device.peak_flops

    def _base_image(self, fw: Framework) -> str | None:
        key = self.target.image_key
        image = fw.install.base_images.get(key)
        if image is None:
            self._exclude(f"the catalog has no {key} base image for it", framework=fw.id)
        return image

    def _notes(self, fw: Framework, comp: Compiler | None, route: Route) -> tuple[str, ...]:
        """Where each prior that shaped this route's prediction comes from."""
        notes = []
        if fw.status != "maintained":
            notes.append(f"{fw.name} is legacy{_successor(fw.successor)} (pinned by the spec)")
        if comp is not None:
            notes.append(self._compiler_note(comp, route))
        key = self.target.device_key
        factors = " x ".join(
            [f"{fw.id} {fw.efficiency.get(key, 0.5):g}"]
            + [f"{lib} {self.catalog.libraries[lib].efficiency.get(key, 1.0):g}" for lib in route.libraries]
        )
        anchor = (
            "catalog priors anchored on onnxruntime, PyTorch and OpenBLAS measured here"
            if key == "cpu"
            else "catalog seed priors: no GPU was measured here"
        )
        notes.append(f"efficiency prior: {factors} = {route.efficiency:.2f} of peak ({anchor})")
        gpu = self.target.device.kind == "gpu"
        if gpu and route.precision in ("fp16", "bf16", "int8"):
            notes.append(
                f"tensor-core prior: {route.precision} FLOPs reach 3/8 of the fp32 share of peak ({TENSOR_CORE_SOURCE})"
            )
        if route.tf32_share > 0:
            notes.append(
                f"TF32 prior: {fw.name} runs {route.tf32_share:.0%} of this model's FLOPs on TF32 tensor cores "
                f"at fp32 ({TF32_SOURCE})"
            )
        if self.convolutions and route.layout_factor != 1.0:
            notes.append(f"layout prior: {route.layout} keeps {route.layout_factor:.2f} of the rate ({LAYOUT_SOURCE})")
        return tuple(notes)

    def _compiler_note(self, comp: Compiler, route: Route) -> str:
        if comp.speed_prior is not None:
            return f"{comp.name} prior: {comp.speed_prior.factor:g}x its framework ({comp.speed_prior.source.citation})"
        figures = [
            s for s in comp.speedups
            if s.use_as_prior and s.device in (None, self.target.device_key) and s.mode in (None, self.mode)
            and (not s.precisions or route.precision in s.precisions)
        ]
        cited = "; ".join(f"{s.typical:.2f}x over {s.baseline} ({s.source.citation})" for s in figures)
        text = (
            f"{comp.name} prior: {route.compiler_speedup:.2f}x on the compute-bound part ({COMPILER_SOURCE})"
            + (f"; reported {cited}" if cited else "; no applicable figure is reported, so none is assumed")
        )
        if comp.tuning is not None:
            text += (
                f"; tuned: {route.setup_seconds / 3600:.3g} h of search before the job ({route.tuning_trials} "
                f"trials) unless measured, counted in the "
                f"time to solution ({comp.tuning.source.citation})"
            )
        return text


def compiler_speedup(comp: Compiler, device_key: str, mode: str, precision: str | None = None) -> float:
    """The compiler's prior speed-up: geometric mean of the reported figures that apply to this device and mode.

    Figures the catalog marks ``use_as_prior: false`` (measured against another device, or best cases such as
    "up to 40x vs CPU") are cited but not applied.
    """
    figures = [
        s.typical
        for s in comp.speedups
        if s.use_as_prior and s.device in (None, device_key) and s.mode in (None, mode)
        and (precision is None or not s.precisions or precision in s.precisions)
    ]
    if not figures:
        return 1.0
    product = 1.0
    for f in figures:
        product *= f
    return float(product ** (1 / len(figures)))


def _successor(successor: str | None) -> str:
    return f" (successor: {successor})" if successor else ""


def _selection_checks(category: str, item: str, allow: Selection, deny: Selection) -> list[tuple[bool, str]]:
    allowed: Sequence[str] | None = getattr(allow, category)
    denied: Sequence[str] | None = getattr(deny, category)
    return [
        (not denied or item not in denied, f"{DENIED}{category}"),
        (allowed is None or item in allowed, f"{NOT_ALLOWED}{category}"),
    ]


def _selection_problem(category: str, item: str, spec: AppSpec) -> str | None:
    """Why the spec's allow/deny lists remove ``item`` (None when they keep it)."""
    allow, deny = spec.optimisation.allow, spec.optimisation.deny
    return next((reason for ok, reason in _selection_checks(category, item, allow, deny) if not ok), None)


def _opt_in(category: str) -> str:
    """How to use a legacy component that can be installed (an allow list also removes everything it does not name)."""
    return f"list it in optimisation.allow.{category} to use it (that list then allows only the {category} it names)"


def _no_install(status: str, successor: str | None) -> str:
    """The reason for a component that cannot be deployed: nothing (no allow list or pin) can change it."""
    legacy = f"legacy{_successor(successor)} and " if status != "maintained" else ""
    return f"{legacy}no packaged install exists (described for reference only; it cannot be deployed)"


def _explicitly_allowed(category: str, item: str, allow: Selection) -> bool:
    allowed = getattr(allow, category)
    return bool(allowed) and item in allowed


def check_spec_ids(spec: AppSpec, catalog: Catalog) -> None:
    """Every id the spec names must exist in the catalog (one line per unknown id, with a suggestion)."""
    problems: list[str] = []
    if spec.application.framework != "auto" and spec.application.framework not in catalog.frameworks:
        problems.append(unknown_id_message("application.framework", spec.application.framework, catalog.frameworks))
    known: dict[str, Iterable[str]] = {
        "frameworks": catalog.frameworks,
        "compilers": {**catalog.compilers, NO_COMPILER: None},
        "libraries": catalog.libraries,
        "precisions": dict.fromkeys(("fp32", "fp16", "bf16", "int8")),
        "layouts": dict.fromkeys(("NCHW", "NHWC", "NCHWc")),
    }
    for side in ("allow", "deny"):
        selection = getattr(spec.optimisation, side)
        for category, ids in known.items():
            for i, item in enumerate(getattr(selection, category) or []):
                if item not in set(ids):
                    problems.append(unknown_id_message(f"optimisation.{side}.{category}.{i}", item, ids))
    if problems:
        raise SpecError(*problems)


__all__ = [
    "Candidate",
    "Exclusion",
    "Hardware",
    "Plan",
    "analyse",
    "compiler_speedup",
    "enumerate_routes",
    "make_plan",
    "place",
    "predict",
    "rank",
]
