"""``appopt models show``'s table: every fitted feature has a header and a unit scale."""

from __future__ import annotations

from perfmodels.fit import FEATURES
from perfmodels.rates_table import DISPLAY, describe_rates


def test_models_show_has_a_column_for_every_fitted_feature() -> None:
    assert set(FEATURES) <= set(DISPLAY)
    header = describe_rates([])[0]
    assert "us/convnode" in header and "us/node" in header and "conv_nodes" not in header
