"""Why the plan ranks routes the model cannot separate as it does: the lines plan.md and the terminal show.

The planner ranks (``optimiser.planner``: the goal's figure, ``TIE_RULES`` for equal figures, ``BAND_RULES`` within the
model's error of the fastest route); this module says, for the first candidates a report shows, which rule decided
each step, what the routes differ in, and why the model gives them equal figures.
"""

from __future__ import annotations

from collections.abc import Sequence

from optimiser.planner import (
    BAND_RULES,
    NO_COMPILER,
    TIE_RULES,
    Candidate,
    Plan,
    Rule,
    measured_basis,
    model_error,
)
from perfmodels import Route

#: Relative difference below which two figures are the same number (an exact tie, not a near one).
EXACT_TIE = 1e-9
#: Relative difference below which two figures print alike: the report says why the model gives them (nearly) the
#: same figure, besides crediting the better one.
NEAR_TIE = 5e-3


def _differences(a: Route, b: Route, layout_applies: bool = True) -> str:
    parts = [
        f"{name} {x} vs {y}"
        for name, x, y in (
            ("framework", a.framework, b.framework),
            ("compiler", a.compiler_label, b.compiler_label),
            ("libraries", "+".join(a.libraries) or "-", "+".join(b.libraries) or "-"),
            ("precision", a.precision, b.precision),
            ("layout", a.layout if layout_applies else "-", b.layout if layout_applies else "-"),
        )
        if x != y
    ]
    return ", ".join(parts) or "nothing"


def _why_equal(plan: Plan, a: Candidate, b: Candidate) -> str:
    """Why the model cannot tell two routes apart (the first reason that applies)."""
    ra, rb = a.route, b.route
    unmeasured = next((c for c in (a, b) if "not measured here" in c.prediction.basis), None)
    if unmeasured is not None and ra.framework == rb.framework:
        return (
            f"{unmeasured.route.compiler_label} was not measured here, so it is predicted as its framework's "
            "measured route (its reported speed-up is not applied)"
        )
    layout = next((c for c in (a, b) if f"; {c.route.layout} not measured" in c.prediction.basis), None)
    if layout is not None and ra.layout != rb.layout:
        return (
            f"{layout.route.layout} was not measured for {layout.route.framework}, so it is predicted as the layout "
            "its rows were measured in"
        )
    peaks = plan.target.device.peak_flops
    if ra.precision != rb.precision and peaks.get(ra.precision) == peaks.get(rb.precision):
        return f"{ra.precision} and {rb.precision} have the same peak on {plan.target.hardware.id} (data sheet)"
    if a.prediction.bound == b.prediction.bound == "memory" and not measured_basis(a.prediction):
        return "both memory-bound: what differs changes compute, not memory traffic"
    if ra.compiler != rb.compiler and ra.compiler_speedup == rb.compiler_speedup == 1.0:
        named = rb if ra.compiler == NO_COMPILER else ra
        return f"no gain over the framework is known for {named.compiler_label} here"
    if NO_COMPILER not in (ra.compiler, rb.compiler) and abs(
        ra.efficiency * ra.compiler_speedup - rb.efficiency * rb.compiler_speedup
    ) < 1e-9:
        return "both compiled routes reach the kernel ceiling of the compiler prior (0.85 of peak)"
    if measured_basis(a.prediction) and ra.libraries != rb.libraries:
        return "the measurements are per framework, not per library"
    return "the priors give these choices the same factors"


def _deciding_rule(winner: Candidate, loser: Candidate, rules: Sequence[Rule] = TIE_RULES) -> str:
    for name, rule in rules:
        if rule(winner) != rule(loser):
            return name
    return "none (identical routes)"


def _same(a: float, b: float, tolerance: float = EXACT_TIE) -> bool:
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-300)


def _by_figure(plan: Plan, a: Candidate, b: Candidate) -> str:
    """The better figure decided: said with why the model gives them nearly the same one, where it does."""
    if _same(plan.objective(a), plan.objective(b), NEAR_TIE):
        return f"{_BY_FIGURE}, by under {NEAR_TIE:.1%} ({_why_equal(plan, a, b)})"
    return _BY_FIGURE


def _step(plan: Plan, k: int, rules: Sequence[Rule] = TIE_RULES) -> str:
    """``#k over #k+1 (what differs): rule`` for the ranked pair at 0-based index ``k``."""
    a, b = plan.candidates[k], plan.candidates[k + 1]
    what = _differences(a.route, b.route, plan.layout_applies)
    return f"#{k + 1} over #{k + 2} ({what}): {_deciding_rule(a, b, rules)}"


_BY_FIGURE = "by the better predicted figure"


def _band_rule(plan: Plan, k: int) -> str:
    """Within the error band: the band rule that ordered the pair, else their figures (then the tie rules)."""
    a, b = plan.candidates[k], plan.candidates[k + 1]
    decided = _deciding_rule(a, b, BAND_RULES)
    if decided != "none (identical routes)":
        return _step(plan, k, BAND_RULES)
    if not _same(plan.objective(a), plan.objective(b)):
        what = _differences(a.route, b.route, plan.layout_applies)
        return f"#{k + 1} over #{k + 2} ({what}): {_by_figure(plan, a, b)}"
    return _step(plan, k) + f" (the same figure: {_why_equal(plan, a, b)})"


def why_ordered(plan: Plan, k: int) -> str:
    """How the ranked pair at 0-based index ``k`` was ordered: a band rule within the model's error of the fastest,
    else the better figure, else (equal figures) the tie rule that decided."""
    if k + 1 < plan.band:
        return _band_rule(plan, k)
    a, b = plan.candidates[k], plan.candidates[k + 1]
    if _same(plan.objective(a), plan.objective(b)):
        return _step(plan, k)
    return f"#{k + 1} over #{k + 2}: {_by_figure(plan, a, b)}"


def explain_ties(plan: Plan, top: int | None = None) -> list[str]:
    """How the first ``top`` candidates were ordered where the model cannot separate them: one line for the routes
    within the model's error of the fastest (ordered by the band rules, each step named), and one line per exact tie
    below that band (what the tied routes differ in, why their figures are equal, the rule that ordered them)."""
    shown = min(top or plan.spec.optimisation.top, len(plan.candidates))
    ranked = plan.candidates
    lines: list[str] = []
    band = min(plan.band, len(ranked))
    if band > 1:
        fastest = min(range(band), key=lambda k: (plan.objective(ranked[k]), k))
        error, source = model_error(ranked[fastest].prediction)
        gap = abs(plan.objective(ranked[0]) / plan.objective(ranked[fastest]) - 1)
        lead = (
            "#1 is also the fastest predicted"
            if _same(plan.objective(ranked[0]), plan.objective(ranked[fastest]))
            else f"#1 is predicted {gap:.1%} slower than the fastest (#{fastest + 1}), within the error"
        )
        decided = [_band_rule(plan, k) for k in range(min(band, shown + 1) - 1)]
        by_rule = [step for step in decided if not step.endswith(_BY_FIGURE)]
        rest = "" if len(by_rule) == len(decided) else ("; the rest " if by_rule else "all ") + _BY_FIGURE
        steps = "; ".join(by_rule) + rest
        more = f" (steps shown to #{shown})" if band > shown + 1 else ""
        lines.append(
            f"within the model's error (±{error:.0%}, {source}): #1-#{band} cannot be separated by the model, so they "
            f"are ordered by measured basis (over a prior) before their figures; {lead}; "
            f"broken by: {steps}{more}; measure them on the target (appopt bench run) to be sure"
        )
    i = band
    while i < shown:
        j = i
        while j + 1 < len(ranked) and _same(plan.objective(ranked[i]), plan.objective(ranked[j + 1])):
            j += 1
        if j > i:
            steps = "; ".join(_step(plan, k) for k in range(i, j))
            why = _why_equal(plan, ranked[i], ranked[i + 1])
            lines.append(f"exact tie #{i + 1}-#{j + 1}: the same figure ({why}); broken by: {steps}")
        i = j + 1
    return lines
