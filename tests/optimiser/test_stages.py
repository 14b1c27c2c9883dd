"""``appopt plan``'s stages (optimiser.stages): each a function of the one before, each carrying what came before."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
import yaml

from optimiser import planner
from optimiser.errors import PlanError, SpecError
from optimiser.planner import analyse, enumerate_routes, place, predict, rank
from optimiser.spec import AppSpec, parse_spec
from optimiser.stages import Analysed, Enumerated, Predicted, Targeted, objective
from perfmodels.roofline import RooflinePrior
from tests.optimiser.fake_catalog import fake_catalog


def spec_for(**application: Any) -> AppSpec:
    doc = {
        "name": "t",
        "application": {"type": "training", "model": {"architecture": "net"}, "batch_size": 32, **application},
        "target": {"cpu": {"arch": "x86_64", "model": "cpu1"}},
    }
    return parse_spec(yaml.safe_dump(doc))


def test_each_stage_keeps_the_previous_stage_and_adds_its_own_fields() -> None:
    targeted = place(spec_for(), fake_catalog())
    analysed = analyse(targeted)
    enumerated = enumerate_routes(analysed)
    predicted = predict(enumerated, RooflinePrior())
    for before, after in ((targeted, analysed), (analysed, enumerated), (enumerated, predicted)):
        assert all(getattr(after, f.name) is getattr(before, f.name) for f in fields(before))
    assert [f.name for f in fields(Predicted)][len(fields(Enumerated)):] == ["candidates", "model_name"]
    assert issubclass(Predicted, Enumerated) and issubclass(Enumerated, Analysed) and issubclass(Analysed, Targeted)
    # predictions: one per enumerated route, in enumeration order, with the model's name
    assert [c.route for c in predicted.candidates] == [o.route for o in enumerated.options]
    assert predicted.model_name == RooflinePrior().name


def test_the_plan_stage_ranks_by_the_goal_and_keeps_every_exclusion() -> None:
    predicted = predict(enumerate_routes(analyse(place(spec_for(), fake_catalog()))), RooflinePrior())
    plan = rank(predicted)
    assert sorted(plan.candidates, key=lambda c: c.route.key) == sorted(predicted.candidates, key=lambda c: c.route.key)
    figures = [objective(plan.spec, c.prediction) for c in plan.candidates[plan.band :]]
    assert figures == sorted(figures)  # past the model's error band, fastest first
    assert plan.excluded == predicted.excluded and plan.model_name == predicted.model_name
    assert planner.make_plan(plan.spec, fake_catalog(), RooflinePrior()).candidates == plan.candidates


def test_a_spec_error_stops_at_the_target_stage_and_no_route_at_the_candidates_stage() -> None:
    with pytest.raises(SpecError, match=r"application\.framework: unknown 'fats'"):
        place(spec_for(framework="fats"), fake_catalog())
    analysed = analyse(place(spec_for(framework="onnxonly"), fake_catalog()))  # inference only: nothing trains
    with pytest.raises(PlanError, match="no route satisfies the spec") as info:
        enumerate_routes(analysed)
    assert info.value.exit_code == 3
