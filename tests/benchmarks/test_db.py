"""The result database: schema validation, checksummed rows, crash-safe appends, merges."""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pandas as pd
import pytest

from perfmodels.results_db import (
    COLUMN_NAMES,
    COLUMNS,
    HEADER_LINE,
    ResultsSchemaError,
    append_rows,
    format_row,
    make_row,
    merge,
    read_results,
    schema_markdown,
    write_rows,
)

REPO = Path(__file__).resolve().parents[2]


def row(**overrides):
    fields = dict(
        source="measured",
        target="cpu-x-2c",
        backend="onnxruntime",
        model="mlp",
        scenario="SingleStream",
        metric="p90_latency_ms",
        value=1.5,
        median_ms=1.2,
        threads=2,
        batch=1,
        precision="fp32",
        library_versions={"onnxruntime": "1.31"},
        settings={"seed": 0},
        notes='a, quoted "note"',
    )
    fields.update(overrides)
    return make_row(**fields)


def test_round_trip_keeps_values_and_types(tmp_path):
    path = tmp_path / "db.csv"
    rows = [row(), row(model="bert", value=7.25, median_ms=None)]
    assert append_rows(path, rows) == 2
    frame = read_results(path)
    assert list(frame.columns) == list(COLUMN_NAMES)
    assert frame["model"].tolist() == ["mlp", "bert"]
    assert frame["value"].tolist() == [1.5, 7.25]
    assert frame["threads"].tolist() == [2, 2]
    assert pd.isna(frame.loc[1, "median_ms"])
    assert frame.loc[0, "notes"] == 'a, quoted "note"'
    assert frame.attrs["dropped_rows"] == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"source": "guess"}, "source"),
        ({"scenario": "Marathon"}, "scenario"),
        ({"value": float("nan")}, "value: required"),
        ({"value": float("inf")}, "value"),
        ({"threads": 1.5}, "threads"),
        ({"source": "literature"}, "citation"),
        ({"model": ""}, "model: required"),
    ],
)
def test_invalid_rows_are_rejected_naming_the_column(overrides, message):
    with pytest.raises(ResultsSchemaError, match=message):
        row(**overrides)


def test_unknown_column_is_rejected():
    with pytest.raises(ResultsSchemaError, match="unknown column"):
        row(speed="fast")


def test_wrong_header_is_a_schema_error(tmp_path):
    path = tmp_path / "db.csv"
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ResultsSchemaError, match="header"):
        read_results(path)


def test_valid_checksum_with_invalid_value_is_a_schema_error(tmp_path):
    import zlib

    path = tmp_path / "db.csv"
    append_rows(path, [row()])
    lines = path.read_text().splitlines()
    content = lines[1].rpartition(",")[0].replace(",measured,", ",bogus,", 1)
    lines[1] = f"{content},{zlib.crc32(content.encode()):08x}"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsSchemaError, match=r"db.csv:2: source"):
        read_results(path)


def test_torn_last_row_is_dropped_and_the_next_append_starts_a_fresh_line(tmp_path):
    path = tmp_path / "db.csv"
    append_rows(path, [row(model="a"), row(model="b")])
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 40])  # cut the last row mid-way, as a killed writer would
    with pytest.warns(UserWarning, match="dropped 1 damaged"):
        assert read_results(path)["model"].tolist() == ["a"]
    append_rows(path, [row(model="c")])
    frame = read_results(path, warn=False)
    assert frame["model"].tolist() == ["a", "c"]
    assert len(frame.attrs["dropped_rows"]) == 1


def test_hand_edited_row_fails_its_checksum_and_is_dropped(tmp_path):
    path = tmp_path / "db.csv"
    append_rows(path, [row(model="a"), row(model="b")])
    path.write_text(path.read_text().replace(",1.5,", ",9.5,", 1))
    frame = read_results(path, warn=False)
    assert frame["model"].tolist() == ["b"]
    assert "checksum" in frame.attrs["dropped_rows"][0]


_WRITER = textwrap.dedent(
    """
    import sys
    from perfmodels.results_db import append_rows, make_row
    path, tag = sys.argv[1], sys.argv[2]
    i = 0
    while True:
        append_rows(path, [make_row(source="measured", target="t", backend="b", model=f"{tag}{i}",
                                    scenario="SingleStream", metric="m", value=float(i), notes="x" * 2000)])
        i += 1
    """
)


def _start_writers(path: Path, tags: list[str]) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), tag], env=env) for tag in tags]


def _wait_for_rows(path: Path, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") > count:
            return
        time.sleep(0.05)
    raise AssertionError(f"writers produced fewer than {count} rows in {timeout} s")


def test_killing_concurrent_writers_never_corrupts_the_file(tmp_path):
    path = tmp_path / "db.csv"
    writers = _start_writers(path, ["p", "q"])
    try:
        _wait_for_rows(path, 40)
    finally:
        for proc in writers:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    frame = read_results(path, warn=False)
    assert len(frame.attrs["dropped_rows"]) <= 2  # at most the row each writer was writing
    assert len(frame) >= 40
    assert frame["row_id"].is_unique
    for tag in ("p", "q"):  # every writer's surviving rows are consecutive: none lost in the middle
        numbers = sorted(int(m[1:]) for m in frame["model"] if m.startswith(tag))
        assert numbers == list(range(len(numbers)))
    append_rows(path, [row(model="after")])
    assert read_results(path, warn=False)["model"].iloc[-1] == "after"


def test_merge_combines_shards_drops_duplicates_and_replaces_atomically(tmp_path):
    a, b, out = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "merged.csv"
    shared = row(model="shared")
    append_rows(a, [row(model="a1"), shared])
    append_rows(b, [shared, row(model="b1")])
    written, dropped = merge([a, b], out)
    assert written == 3 and dropped == []
    assert sorted(read_results(out)["model"]) == ["a1", "b1", "shared"]
    append_rows(b, [row(model="b2")])
    written, _ = merge([b], out)  # merging into an existing database keeps what it had
    assert written == 4
    assert not list(tmp_path.glob(".*.new"))


def test_write_rows_replaces_the_file(tmp_path):
    path = tmp_path / "db.csv"
    write_rows(path, [row(model="x")])
    write_rows(path, [row(model="y"), row(model="z")])
    assert read_results(path)["model"].tolist() == ["y", "z"]
    assert path.read_text().startswith(HEADER_LINE)


def test_schema_is_documented_for_every_column():
    text = schema_markdown()
    for name in COLUMN_NAMES:
        assert f"| {name} |" in text


_V4 = ("driver", "verdict", "verdict_reason", "log_dir", "flags")


@pytest.mark.parametrize(
    "version, added_since",
    [
        (1, ("cache_bandwidth_gbs", "other_cpu", "units", "boundary_ms", *_V4)),
        (2, ("units", "boundary_ms", *_V4)),
        (3, _V4),
    ],
)
def test_files_of_the_previous_schema_are_read_and_upgraded_by_merge(tmp_path, version, added_since):
    old_names = [c for c in COLUMN_NAMES if c not in added_since]
    old = tmp_path / f"v{version}.csv"
    body = format_row(row(load_avg=0.5))  # a current row, then re-encoded without the newer columns
    fields = next(csv.reader([body.rpartition(",")[0]]))
    kept = [f for c, f in zip(COLUMNS, fields, strict=True) if c.name in old_names]
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow(kept)
    line = buffer.getvalue()
    old.write_text(",".join((*old_names, "crc")) + "\n" + f"{line},{zlib.crc32(line.encode()):08x}\n")
    frame = read_results(old)
    assert len(frame) == 1 and frame["load_avg"].iloc[0] == 0.5 and frame["units"].isna().all()
    assert frame["driver"].iloc[0] == "harness"  # the only scenario driver before schema v4
    with pytest.raises(ResultsSchemaError, match="older schema"):
        append_rows(old, [row()])
    merged = tmp_path / "current.csv"
    merge([old], merged)
    assert merged.read_text().startswith(HEADER_LINE) and len(read_results(merged)) == 1
