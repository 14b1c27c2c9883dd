"""Stand-ins for a fitted whole-model group and a fit result: what ``perfmodels.evaluate._estimates`` and
``FittedModel.units_seconds`` read of them."""

from __future__ import annotations

from perfmodels.fit import RouteKey


class WholeModelGroup:
    """A usable whole-model group of ``key``'s route (target, framework, compiler, layout, precision, threads) whose
    fit answers 2 ms with no per-node share."""

    def __init__(self, key: tuple) -> None:
        self.key = key
        self.route = RouteKey(*key[1:5])

    def whole_seconds(self, x: object) -> float:
        return 2e-3

    def overhead_share(self, x: object) -> float:
        return 0.0

    def below_range(self, x: object) -> bool:
        return False


class NoRatios:
    """A fit result with no compiler ratio models."""

    def ratio_for(self, group: object) -> None:
        return None
