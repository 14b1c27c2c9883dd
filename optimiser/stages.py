"""The data that passes between the stages of ``appopt plan``, defined in one place.

A plan is made in stages, each a function of the one before, and each stage's value carries everything before it::

    spec         AppSpec       optimiser.spec.load_spec(path)
    target       Targeted      optimiser.planner.place(spec, catalog)        ids and files checked, target resolved
    workload     Analysed      optimiser.planner.analyse(targeted)           FLOPs, bytes, kernel units of the model
    candidates   Enumerated    optimiser.planner.enumerate_routes(analysed)  every route, or why it is excluded
    predictions  Predicted     optimiser.planner.predict(enumerated, model)  a performance figure per route
    plan         Plan          optimiser.planner.rank(predicted)             ranked, the model's error band ordered
    deployment   Deployed      optimiser.artifacts.deploy(plan)              what the image runs and where
    files        list[Path]    optimiser.artifacts.render_files(deployed, out)

``optimiser.planner.make_plan`` runs the first six; ``appopt plan`` runs them all, printing the plan's table.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from builders.deployment import Deployment
    from optimiser.catalog.models import Catalog
    from optimiser.spec import AppSpec
    from optimiser.target import ResolvedTarget
    from perfmodels import Prediction, Route, Workload

#: How an exclusion by the spec's allow/deny lists starts (``Plan.removed_by_selection`` finds them by it).
DENIED = "denied by optimisation.deny."
NOT_ALLOWED = "not in optimisation.allow."
SELECTION_REASONS = (DENIED, NOT_ALLOWED)


@dataclass(frozen=True)
class RouteOption:
    """A route the catalog and the spec allow, with the base image it builds on; not yet predicted."""

    route: Route
    base_image: str
    notes: tuple[str, ...] = ()


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
class Targeted:
    """Stage ``target``: a spec whose catalog ids and files are checked, on the hardware its target resolves to."""

    spec: AppSpec
    catalog: Catalog
    target: ResolvedTarget


@dataclass(frozen=True)
class Analysed(Targeted):
    """Stage ``workload``: what one step of the application computes."""

    workload: Workload


@dataclass(frozen=True)
class Enumerated(Analysed):
    """Stage ``candidates``: every route the catalog and the spec allow, and every one excluded with its reason."""

    options: tuple[RouteOption, ...]
    excluded: tuple[Exclusion, ...]


@dataclass(frozen=True)
class Predicted(Enumerated):
    """Stage ``predictions``: each allowed route with the performance model's figures, in enumeration order."""

    candidates: tuple[Candidate, ...]
    model_name: str


Stage = TypeVar("Stage", bound=Targeted)


def next_stage(previous: Targeted, stage: type[Stage], **added: Any) -> Stage:
    """The ``stage`` that follows ``previous``: everything ``previous`` holds, plus the fields this stage adds."""
    return stage(**{f.name: getattr(previous, f.name) for f in fields(previous)}, **added)


def objective(spec: AppSpec, p: Prediction) -> float:
    """The figure the spec's goal ranks by (lower is better)."""
    goal = spec.optimisation.goal
    if goal == "throughput":
        return -p.samples_per_second
    if goal == "time_to_solution" and p.total_seconds is not None:
        return p.total_seconds
    return p.step_seconds


@dataclass(frozen=True)
class Plan:
    """Stage ``plan``: the candidates ranked for the spec's goal, with what was excluded and why."""

    spec: AppSpec
    target: ResolvedTarget
    workload: Workload
    candidates: tuple[Candidate, ...]
    excluded: tuple[Exclusion, ...]
    model_name: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: False when the model has no convolutions: every layout runs it the same, so one is kept and not shown.
    layout_applies: bool = True
    #: How many leading candidates lie within the model's error of the fastest (ordered by ``BAND_RULES``).
    band: int = 1

    @property
    def choice(self) -> Candidate:
        return self.candidates[0]

    def objective(self, candidate: Candidate) -> float:
        """The figure candidates are ranked by (lower is better)."""
        return objective(self.spec, candidate.prediction)

    @property
    def removed_by_selection(self) -> tuple[Exclusion, ...]:
        """What the spec's optimisation.allow / optimisation.deny lists removed."""
        return tuple(e for e in self.excluded if e.reason.startswith(SELECTION_REASONS))


@dataclass(frozen=True)
class Deployed:
    """Stage ``deployment``: the plan (with notes on what its image runs) and the deployment its files render."""

    plan: Plan
    deployment: Deployment
