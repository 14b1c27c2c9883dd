"""The planner: enumerate every compatible route for a spec, rank it with a performance model, explain the rest.

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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from optimiser.catalog import load_catalog
from optimiser.catalog.models import Catalog, Compiler, Framework, Hardware, Library
from optimiser.errors import PlanError, SpecError
from optimiser.spec import AppSpec, Selection, check_spec_files
from optimiser.suggest import unknown_id_message
from optimiser.target import ResolvedTarget, resolve_target
from optimiser.workload import workload_for
from perfmodels import PerformanceModel, Prediction, Route, Workload
from perfmodels.fitted import load_default_model
from perfmodels.priors import layout_factor

NO_COMPILER = "none"
#: Precisions tried when the spec says ``auto``. int8 is left out: it needs calibration data and can cost accuracy,
#: so it is used only when the spec asks for it.
_AUTO_PRECISIONS = ("bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Candidate:
    """A ranked route with its prediction and what it needs in a container."""

    route: Route
    prediction: Prediction
    base_image: str
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exclusion:
    """A route (or a whole family of routes) that was not ranked, and why."""

    what: dict[str, str]
    reason: str

    def describe(self) -> str:
        parts = ", ".join(f"{k}={v}" for k, v in self.what.items())
        return f"{parts}: {self.reason}"


@dataclass(frozen=True)
class Plan:
    spec: AppSpec
    target: ResolvedTarget
    workload: Workload
    candidates: tuple[Candidate, ...]
    excluded: tuple[Exclusion, ...]
    model_name: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def choice(self) -> Candidate:
        return self.candidates[0]


def make_plan(
    spec: AppSpec,
    catalog: Catalog | None = None,
    model: PerformanceModel | None = None,
) -> Plan:
    """Rank every compatible route for ``spec``; raise PlanError listing why each failed if none fits."""
    catalog = catalog or load_catalog()
    model = model or load_default_model()
    check_spec_ids(spec, catalog)
    check_spec_files(spec)
    target = resolve_target(spec.target, catalog)
    workload = workload_for(spec, catalog)
    enumerator = _Enumerator(spec, catalog, target)
    routes = list(enumerator.routes())
    if not routes:
        raise PlanError(
            "no route satisfies the spec:", *(f"  {e.describe()}" for e in enumerator.excluded), exit_code=3
        )
    candidates = [
        Candidate(route=r, prediction=model.predict(workload, r, target.device), base_image=img, notes=notes)
        for r, img, notes in routes
    ]
    # Ties (e.g. memory-bound routes that differ only in layout) go to the route the priors favour.
    candidates.sort(
        key=lambda c: (_objective(spec, c.prediction), -c.route.layout_factor, -c.route.compiler_speedup, c.route.key)
    )
    return Plan(
        spec=spec,
        target=target,
        workload=workload,
        candidates=tuple(candidates),
        excluded=tuple(enumerator.excluded),
        model_name=model.name,
        notes=(*target.notes, *_unshipped_command_files(spec)),
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


def _objective(spec: AppSpec, p: Prediction) -> float:
    goal = spec.optimisation.goal
    if goal == "throughput":
        return -p.samples_per_second
    if goal == "time_to_solution" and p.total_seconds is not None:
        return p.total_seconds
    return p.step_seconds


class _Enumerator:
    """Walks the catalog for one spec and target, collecting routes and exclusions."""

    def __init__(self, spec: AppSpec, catalog: Catalog, target: ResolvedTarget) -> None:
        self.spec = spec
        self.catalog = catalog
        self.target = target
        self.mode = spec.application.type
        self.excluded: list[Exclusion] = []

    def _exclude(self, reason: str, **what: str) -> None:
        self.excluded.append(Exclusion(what=what, reason=reason))

    def routes(self) -> Iterable[tuple[Route, str, tuple[str, ...]]]:
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
                yield self._route(fw, comp, libs, prec, layout), base_image, self._notes(fw, comp)

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
        checks: list[tuple[bool, str]] = [
            (pinned in ("auto", fw.id), f"application.framework pins {pinned}"),
            *_selection_checks("frameworks", fw.id, self.spec.optimisation.allow, self.spec.optimisation.deny),
            (
                fw.status == "maintained" or pinned == fw.id,
                f"legacy{_successor(fw.successor)}; pin application.framework to use it anyway",
            ),
            (fw.install.available, "no packaged install exists (described for reference only)"),
            (self.mode in fw.modes, f"does not support {self.mode} (supports {', '.join(fw.modes) or 'nothing'})"),
            (
                t.device_key == "cpu" or t.device_key in fw.accelerators,
                f"no {t.device_key} accelerator support",
            ),
            (t.arch in fw.cpu_archs, f"no build for {t.arch} CPUs"),
            (
                self.spec.application.model.onnx is None or fw.reads_onnx,
                "cannot load an ONNX model file (application.model.onnx)",
            ),
            (
                self.mode != "training" or fw.distributed_training or self._processes() == 1,
                f"trains in one process; the spec asks for {self._processes()} "
                f"({self.spec.target.nodes} node(s) x {self._tasks_per_node()} task(s))",
            ),
        ]
        for ok, reason in checks:
            if not ok:
                self._exclude(reason, framework=fw.id)
                return False
        return True

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
            elif not _selected("precisions", prec, self.spec.optimisation.allow, self.spec.optimisation.deny):
                reason = "excluded by optimisation allow/deny precisions"
            if reason is None:
                out.append(prec)
            elif wanted != "auto" or prec in supported:
                self._exclude(reason, framework=fw.id, precision=prec)
        if not out and wanted == "auto":
            self._exclude("no usable precision", framework=fw.id)
        return out

    def _layouts(self, fw: Framework) -> list[str]:
        layouts = fw.layouts.get(self.target.device_key, ["NCHW"])
        allow, deny = self.spec.optimisation.allow, self.spec.optimisation.deny
        out: list[str] = [lay for lay in layouts if _selected("layouts", lay, allow, deny)]
        if not out:
            self._exclude("every layout excluded by optimisation allow/deny", framework=fw.id)
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
        if not _selected("libraries", lib.id, self.spec.optimisation.allow, self.spec.optimisation.deny):
            return "excluded by optimisation allow/deny libraries"
        if t.device_key == "cpu":
            if t.arch not in lib.cpu_archs:
                return f"{lib.name} does not run on {t.arch} CPUs"
        elif t.device_key not in lib.accelerators:
            return f"{lib.name} does not run on {t.device_key} accelerators"
        if lib.status != "maintained" and not _explicitly_allowed("libraries", lib.id, self.spec.optimisation.allow):
            return f"legacy{_successor(lib.successor)}; list it in optimisation.allow.libraries to use it"
        return None

    # --- compilers ----------------------------------------------------------------------------------------------

    def _compilers(self, fw: Framework) -> list[Compiler | None]:
        out: list[Compiler | None] = []
        # An allow list restricts which compilers may be used; running without one stays allowed unless denied.
        if NO_COMPILER not in (self.spec.optimisation.deny.compilers or []):
            out.append(None)
        for comp in self.catalog.compilers.values():
            reason = self._compiler_problem(fw, comp)
            if reason is None:
                out.append(comp)
            else:
                self._exclude(reason, framework=fw.id, compiler=comp.id)
        return out

    def _compiler_problem(self, fw: Framework, comp: Compiler) -> str | None:
        t = self.target
        allow, deny = self.spec.optimisation.allow, self.spec.optimisation.deny
        if not _selected("compilers", comp.id, allow, deny):
            return "excluded by optimisation allow/deny compilers"
        modes = comp.support.get(fw.id, [])
        if self.mode not in modes:
            have = "/".join(modes) if modes else "no"
            return f"{comp.name} has {have} support for {fw.name}; {self.mode} needs it"
        if t.device_key == "cpu" and t.arch not in comp.cpu_archs:
            return f"{comp.name} does not target {t.arch} CPUs"
        if t.device_key != "cpu" and t.device_key not in comp.accelerators:
            return f"{comp.name} does not target {t.device_key} accelerators"
        if comp.status != "maintained" and not _explicitly_allowed("compilers", comp.id, allow):
            return f"legacy{_successor(comp.successor)}; list it in optimisation.allow.compilers to use it"
        if not comp.install.available:
            return "no packaged install exists (described for reference only)"
        return None

    # --- assembling a route -------------------------------------------------------------------------------------

    def _route(self, fw: Framework, comp: Compiler | None, libs: tuple[str, ...], prec: str, layout: str) -> Route:
        key = self.target.device_key
        efficiency = fw.efficiency.get(key, 0.5)
        for lib_id in libs:
            efficiency *= self.catalog.libraries[lib_id].efficiency.get(key, 1.0)
        return Route(
            framework=fw.id,
            compiler=comp.id if comp else NO_COMPILER,
            libraries=libs,
            precision=prec,
            layout=layout,
            efficiency=min(efficiency, 1.0),
            compiler_speedup=compiler_speedup(comp, key, self.mode) if comp else 1.0,
            layout_factor=layout_factor(self.target.device.kind, layout, prec),
        )

    def _base_image(self, fw: Framework) -> str | None:
        key = self.target.image_key
        image = fw.install.base_images.get(key)
        if image is None:
            self._exclude(f"the catalog has no {key} base image for it", framework=fw.id)
        return image

    def _notes(self, fw: Framework, comp: Compiler | None) -> tuple[str, ...]:
        notes = []
        if fw.status != "maintained":
            notes.append(f"{fw.name} is legacy{_successor(fw.successor)} (pinned by the spec)")
        if comp is not None and comp.speedups:
            best = comp.speedups[0]
            notes.append(f"{comp.name} prior: {best.typical:.2f}x over {best.baseline} ({best.source.citation})")
        return tuple(notes)


def compiler_speedup(comp: Compiler, device_key: str, mode: str) -> float:
    """The compiler's prior speed-up: geometric mean of the reported figures that apply to this device and mode.

    Figures the catalog marks ``use_as_prior: false`` (measured against another device, or best cases such as
    "up to 40x vs CPU") are cited but not applied.
    """
    figures = [
        s.typical
        for s in comp.speedups
        if s.use_as_prior and s.device in (None, device_key) and s.mode in (None, mode)
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
        (not denied or item not in denied, f"denied by optimisation.deny.{category}"),
        (allowed is None or item in allowed, f"not in optimisation.allow.{category}"),
    ]


def _selected(category: str, item: str, allow: Selection, deny: Selection) -> bool:
    return all(ok for ok, _ in _selection_checks(category, item, allow, deny))


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


__all__ = ["Candidate", "Exclusion", "Hardware", "Plan", "compiler_speedup", "make_plan"]
