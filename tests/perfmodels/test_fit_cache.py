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


def test_a_damaged_cache_is_refitted_and_an_unwritable_one_only_costs_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(tmp_path / "cache"))
    frame = read_results(DEFAULT_DB, warn=False)
    db = tmp_path / "small.csv"
    write_rows(db, frame_rows(frame[frame["scenario"] == "SingleStream"]))
    first = fitted._load.__wrapped__(str(db), 0)  # type: ignore[attr-defined]
    cache = fitted.fit_cache_file(db)
    assert cache is not None and cache.stat().st_size < 1_000_000  # the fits, not the 25 MB DataFrame
    cache.write_bytes(b"\x80\x05 not a pickle")
    again = fitted._load.__wrapped__(str(db), 0)  # type: ignore[attr-defined]
    assert [g.coef for g in again.result.groups] == [g.coef for g in first.result.groups]
    assert fitted._read_fit_cache(db) is not None  # written anew
    blocker = tmp_path / "a-file"
    blocker.write_text("x", encoding="utf-8")
    monkeypatch.setenv("APPOPT_CACHE_DIR", str(blocker))  # a file: no cache directory can be made under it
    third = fitted._load.__wrapped__(str(db), 0)  # type: ignore[attr-defined]
    assert [g.coef for g in third.result.groups] == [g.coef for g in first.result.groups]
