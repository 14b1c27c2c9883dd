"""Every test sees an empty per-user data directory: a host store left by a real ``appopt calibrate`` in the
developer's home would otherwise change every local plan's predictions. Plans skip the quick probe of an
uncalibrated host (``APPOPT_NO_PROBE``), which would otherwise measure for seconds in every test that plans on
``local``; the probe's own tests clear it."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _empty_xdg_data_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
    monkeypatch.setenv("APPOPT_NO_PROBE", "1")
