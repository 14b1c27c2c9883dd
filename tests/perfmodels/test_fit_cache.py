"""The fitted model is kept on disk keyed by the database's digest: a second process neither reads the CSV nor
refits, and an edited database is refitted."""

from __future__ import annotations

from pathlib import Path

import pytest

import perfmodels.results_db as results_db
from perfmodels import fitted
from perfmodels.results_db import DEFAULT_DB, frame_rows, read_results, write_rows


def test_a_second_load_comes_from_the_cache_and_an_edit_refits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    frame = read_results(DEFAULT_DB, warn=False)
    db = tmp_path / "small.csv"
    rows = frame_rows(frame[frame["scenario"] == "SingleStream"])
    write_rows(db, rows)
    first = fitted._load.__wrapped__(str(db), 0)  # type: ignore[attr-defined]
    assert isinstance(first, fitted.FittedModel) and fitted.fit_cache_file(db).exists()  # type: ignore[union-attr]

    def no_reading(*_: object, **__: object) -> None:
        raise AssertionError("read the CSV although the cache holds its fit")

    monkeypatch.setattr(results_db, "read_results", no_reading)
    second = fitted._load.__wrapped__(str(db), 0)  # type: ignore[attr-defined]
    assert isinstance(second, fitted.FittedModel)
    assert [g.coef for g in second.result.groups] == [g.coef for g in first.result.groups]
    monkeypatch.undo()
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    write_rows(db, rows[: len(rows) // 2])  # another database: another digest, so it is read and fitted again
    monkeypatch.setattr(results_db, "read_results", no_reading)
    with pytest.raises(AssertionError, match="read the CSV"):
        fitted._load.__wrapped__(str(db), 0)  # type: ignore[attr-defined]
