"""The benchmark result database: one CSV row per measurement, with full provenance, validated on read.

File format
-----------
A UTF-8 CSV file whose first line is the header (exactly ``COLUMNS``'s names, in order). Each following line is one
row, ending with a ``crc`` field: the CRC-32 (8 hex digits) of the line's text before that last comma. JSON-valued
columns hold compact JSON; no field contains a newline. A path ending in ``.gz`` holds the same text gzip-compressed
(the shipped ``default.csv.gz``: a tenth of the size); every reader and writer here takes either.

Why it survives crashes
-----------------------
Every writer (``append_rows``, ``write_rows``, ``merge``, ``rewrite_rows``: the benchmark runner, ``bench merge``,
``bench refresh-features``, ``bench record-default``) holds one lock, ``database_lock``: an exclusive ``flock`` on the
database file itself, re-checked after it is granted to be the file the path names now, since a replacing writer swaps
the inode (a writer that waited on the old inode retries on the new one, so its rows land in the file that stays).
``append_rows`` writes each row with a single ``write(2)`` on an ``O_APPEND`` descriptor and ``fsync``s. A writer
killed mid-row can leave at most one partial line at the end; the next writer starts on a fresh line, and the reader
drops any line whose field count or checksum is wrong. A row with a valid checksum but a value outside its column's
type or range (an int of ``1e400``, a negative thread count) is dropped too. Dropped lines are counted in
``frame.attrs["dropped_rows"]`` and warned about. New files appear atomically (written aside, then hard-linked into
place), and ``write_rows``/``merge`` replace whole files atomically (temp file + ``os.replace``) while holding the lock
for the whole read-modify-write, so no appended row is lost. A gzip database is never appended in place: its rows go
in a new gzip member after a copy of the old bytes, and the copy replaces the file atomically, so it cannot be torn
(gzip readers read concatenated members as one stream). Many nodes write separate shards; ``merge`` combines them,
dropping duplicate ``row_id``s.

Example::

    >>> append_rows("shard.csv", [make_row(model="mlp", backend="onnxruntime", value=0.1, ...)])  # doctest: +SKIP
    >>> frame = read_results("shard.csv")                                                          # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import gzip
import importlib.resources
import io
import json
import math
import os
import shutil
import tempfile
import uuid
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from analysis.units import check_units
from perfmodels.lazy import lazy_import

if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_import("pandas")  # (imported when first used: a cached plan needs no DataFrame)


SCHEMA_VERSION = 4
#: The database shipped with appopt (measurements on the development machine plus literature rows), gzip-compressed.
#: Measurements live with the benchmarks that made them (benchmarks/results/), read here as package data so that
#: perfmodels never imports benchmark code.
DEFAULT_DB = Path(str(importlib.resources.files("benchmarks.results").joinpath("default.csv.gz")))
#: zlib's default level: within a few per cent of the smallest file, several times faster to write than level 9.
GZIP_LEVEL = 6

Kind = Literal["str", "int", "float", "json", "bool"]


@dataclass(frozen=True)
class Column:
    name: str
    kind: Kind
    description: str
    required: bool = False
    choices: tuple[str, ...] = ()


COLUMNS: tuple[Column, ...] = (
    # identity
    Column("row_id", "str", "Unique id of the row (uuid4 hex); merges drop duplicates by it.", True),
    Column("schema_version", "int", "Version of this schema the row was written with.", True),
    Column("timestamp", "str", "UTC time the measurement finished, ISO 8601.", True),
    Column(
        "source",
        "str",
        "measured (by this harness) or literature (a published figure).",
        True,
        ("measured", "literature"),
    ),
    Column("citation", "str", "Where a literature figure comes from (required for literature rows)."),
    # where
    Column("target", "str", "Key the performance models are fitted per: CPU model slug + usable cores.", True),
    Column("host", "str", "Host name."),
    Column("cpu_model", "str", "CPU model name (/proc/cpuinfo)."),
    Column("cpu_flags", "str", "Vector ISA flags that matter to DL kernels, space-separated."),
    Column("cores", "int", "Cores usable by the process."),
    Column("accelerator", "str", "Accelerator(s) present, or none."),
    Column("blas", "str", "BLAS in use (threadpoolctl): internal API, version, kernel architecture."),
    Column("appopt_revision", "str", "git revision of appopt (+dirty with local changes)."),
    # what ran
    Column(
        "backend", "str", "Harness backend name (onnxruntime, appopt-runtime, …; a compiler id for literature).", True
    ),
    Column("framework", "str", "Catalog framework id the backend stands for."),
    Column("compiler", "str", "Catalog compiler id, or none."),
    Column("library", "str", "Primitive library the backend uses (catalog id)."),
    Column("layout", "str", "Memory layout the backend runs (NCHW, NCHWc, NHWC)."),
    Column("backend_version", "str", "Version of the backend's main package."),
    Column("library_versions", "json", "Package -> version of everything the backend depends on."),
    Column("threads", "int", "Threads the backend was allowed."),
    Column("precision", "str", "fp32 | fp16 | bf16 | int8.", False, ("", "fp32", "fp16", "bf16", "int8")),
    Column("mode", "str", "inference or training.", False, ("", "inference", "training")),
    # the workload
    Column("model", "str", "Suite model name (or the workload a literature figure is about).", True),
    Column("family", "str", "Architecture family (the unit held out by leave-one-architecture-out)."),
    Column("batch", "int", "Samples per query (per step for training)."),
    Column("flops_per_sample", "float", "Forward FLOPs per sample (analysis.modelinfo)."),
    Column("flops_by_class", "json", "Forward FLOPs per sample by op class (conv, gemm, elementwise, norm, pool…)."),
    Column("ops_by_class", "json", "Node count by op class."),
    Column("activation_bytes_per_sample", "float", "Bytes of activations written per sample at fp32."),
    Column("params", "float", "Parameter count."),
    Column(
        "units",
        "json",
        "The kernel units of one sample (analysis.units: [kind, dimensions, count] each) (schema v3).",
    ),
    # the measurement
    Column(
        "scenario",
        "str",
        "SingleStream | MultiStream | Server | Offline | accuracy | kernel | training | speedup (literature).",
        True,
        ("SingleStream", "MultiStream", "Server", "Offline", "accuracy", "kernel", "training", "speedup"),
    ),
    Column("settings", "json", "Scenario settings (durations, query counts, seed, QPS bound…)."),
    Column(
        "metric",
        "str",
        "What ``value`` is: p90_latency_ms, p99_latency_ms, max_qps, samples_per_s, gflops, "
        "ms_per_step, speedup, max_abs_error.",
        True,
    ),
    Column("value", "float", "The metric's value.", True),
    Column("unit", "str", "Unit of value."),
    Column("median_ms", "float", "Median latency of one query (one step for training), ms."),
    Column("cpu_ms", "float", "Median process CPU time per query (all threads), ms: robust to a busy machine."),
    Column("p90_ms", "float", "90th-percentile query latency, ms."),
    Column("p99_ms", "float", "99th-percentile query latency, ms."),
    Column("samples_per_s", "float", "Samples processed per second over the run."),
    Column("queries", "int", "Queries (or steps) timed."),
    Column("duration_s", "float", "Wall time of the timed part, s."),
    Column("peak_gflops", "float", "Measured GEMM peak of this machine at these threads, GFLOP/s."),
    Column("bandwidth_gbs", "float", "Measured memory bandwidth (NumPy copy, read + write), GB/s."),
    Column(
        "cache_bandwidth_gbs",
        "float",
        "Measured bandwidth of a copy that stays in the caches (8 MiB, read + write), GB/s (schema v2).",
    ),
    Column("load_avg", "float", "1-minute load average as the measurement ended (it lags and counts this process)."),
    Column(
        "other_cpu",
        "float",
        "Cores' worth of CPU time other processes used while the measurement ran (all CPUs' busy time from "
        "/proc/stat minus this process's, per wall second); above ``BUSY_OTHER_CPU``: measured under load (v2).",
    ),
    Column("accuracy", "str", "pass/fail against the reference backend, or empty.", False, ("", "pass", "fail")),
    Column("max_abs_error", "float", "Largest |output - reference| in accuracy mode."),
    Column(
        "boundary_ms",
        "float",
        "Kernel sweeps: ms per query spent converting layouts at the model's inputs and outputs (the backend's "
        "profiler; a whole model pays it once, a one-kernel model once per kernel) (schema v3).",
    ),
    Column(
        "driver",
        "str",
        "Scenario driver that measured the row: loadgen (MLCommons LoadGen) or harness (benchmarks.harness); "
        "scenario rows of files before schema v4 read as harness (schema v4).",
        False,
        ("", "loadgen", "harness"),
    ),
    Column(
        "verdict",
        "str",
        "LoadGen's judgement of the run: VALID or INVALID (schema v4).",
        False,
        ("", "VALID", "INVALID"),
    ),
    Column("verdict_reason", "str", "Why LoadGen judged the run INVALID (its summary's unmet checks) (schema v4)."),
    Column("log_dir", "str", "The run's LoadGen logs, relative to the database's directory or absolute (schema v4)."),
    Column(
        "flags",
        "str",
        "Space-separated warnings about the measurement, e.g. busy (other_cpu above BUSY_OTHER_CPU); the fit leaves "
        "flagged rows out (schema v4).",
    ),
    Column("notes", "str", "Anything else (skipped reasons are not rows; see the run report)."),
)
COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)
_BY_NAME = {c.name: c for c in COLUMNS}
HEADER_LINE = ",".join((*COLUMN_NAMES, "crc")) + "\n"
#: Columns each older schema version lacks; files in those versions are read with the columns left empty.
_ADDED_IN = {
    2: ("cache_bandwidth_gbs", "other_cpu"),
    3: ("units", "boundary_ms"),
    4: ("driver", "verdict", "verdict_reason", "log_dir", "flags"),
}
#: Scenarios whose rows in files before schema v4 were measured by the home-made harness.
_HARNESS_SCENARIOS = frozenset({"SingleStream", "MultiStream", "Server", "Offline", "accuracy"})
#: Header line -> the columns (in file order) of every schema version a reader accepts.
_KNOWN_HEADERS = {
    ",".join((*names, "crc")) + "\n": names
    for names in (
        tuple(n for n in COLUMN_NAMES if not any(n in added for v, added in _ADDED_IN.items() if v > version))
        for version in range(1, SCHEMA_VERSION + 1)
    )
}
#: A measurement during which other processes used more than this many cores' worth of CPU was made under load.
BUSY_OTHER_CPU = 0.25
#: How ``verdict_reason`` names LoadGen's failed checks (``benchmarks.loadgen_driver.verdict_of`` writes them): the
#: run's length (a run that failed only these ran fewer queries, or for less time, than MLPerf's rules ask of a
#: submission; our recordings stop earlier on purpose, and the median they measured is as good as the harness's),
#: and the latency bound.
MIN_DURATION, MIN_QUERIES, EARLY_STOPPING = "min duration not met", "min query count not met", "early stopping not met"
LENGTH_CHECKS = (MIN_DURATION, MIN_QUERIES, EARLY_STOPPING)
LATENCY_BOUND = "latency bound not met"


class ResultsSchemaError(ValueError):
    """A results file or row breaks the schema; the message names the file, line and column."""


# --- rows ------------------------------------------------------------------------------------------------------


def make_row(**fields: Any) -> dict[str, Any]:
    """A complete row: identity fields filled in, everything else defaulted to empty; validated."""
    row: dict[str, Any] = dict.fromkeys(COLUMN_NAMES, None)
    row.update(
        row_id=uuid.uuid4().hex,
        schema_version=SCHEMA_VERSION,
        timestamp=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    unknown = sorted(set(fields) - set(COLUMN_NAMES))
    if unknown:
        raise ResultsSchemaError(f"unknown column(s): {', '.join(unknown)}")
    row.update(fields)
    validate_row(row)
    return row


def validate_row(row: Mapping[str, Any], where: str = "row") -> None:
    """Raise ResultsSchemaError naming the first problem with ``row``."""
    for column in COLUMNS:
        value = row.get(column.name)
        empty = value is None or value == "" or (isinstance(value, float) and math.isnan(value))
        if empty:
            if column.required:
                raise ResultsSchemaError(f"{where}: {column.name}: required")
            continue
        try:
            _check_value(column, value)
        except (TypeError, ValueError, RecursionError) as error:  # RecursionError: JSON nested too deep
            raise ResultsSchemaError(f"{where}: {column.name}: {error}") from None
    if row.get("source") == "literature" and not row.get("citation"):
        raise ResultsSchemaError(f"{where}: citation: required for literature rows")


#: Smallest value of each int column (counts of cores, threads and samples are positive); every int stays below
#: ``_INT_LIMIT`` (exact in a float and in pandas' Int64).
_INT_MINIMUM = {"schema_version": 1, "cores": 1, "threads": 1, "batch": 1, "queries": 0}
_INT_LIMIT = 2**53


def _check_value(column: Column, value: Any) -> None:
    if column.kind == "int":
        if isinstance(value, bool) or not (isinstance(value, int) or float(value).is_integer()):
            raise ValueError(f"expected an integer, got {str(value)[:40]!r}")
        low = _INT_MINIMUM.get(column.name, -_INT_LIMIT)
        if not low <= int(value) < _INT_LIMIT:
            raise ValueError(f"{str(value)[:40]} is out of range (at least {low}, below 2**53)")
    elif column.kind == "float":
        if isinstance(value, bool) or not math.isfinite(float(value)):
            raise ValueError(f"expected a finite number, got {value!r}")
    elif column.kind == "json":
        parsed = json.loads(value) if isinstance(value, str) else value
        if not isinstance(value, str):
            json.dumps(value)
        if column.name == "units":  # a unit kind this version does not know (a newer appopt's) fits nothing
            check_units(parsed)
    elif column.kind == "str" and not isinstance(value, str):
        raise ValueError(f"expected text, got {type(value).__name__}")
    if column.choices and value not in column.choices:
        raise ValueError(f"{value!r} is not one of {', '.join(c for c in column.choices if c)}")


def _field_text(column: Column, value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if column.kind == "json":
        text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))
    elif column.kind == "float":
        text = repr(float(value))
    elif column.kind == "int":
        text = str(int(value))
    else:
        text = str(value)
    return text.replace("\r", " ").replace("\n", " ")


def format_row(row: Mapping[str, Any]) -> str:
    """One CSV line (with checksum and newline) for a validated row."""
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="").writerow([_field_text(c, row.get(c.name)) for c in COLUMNS])
    body = buffer.getvalue()
    return f"{body},{zlib.crc32(body.encode('utf-8')):08x}\n"


# --- writing -----------------------------------------------------------------------------------------------------


def is_gzip(path: str | Path) -> bool:
    """Whether the database ``path`` is stored gzip-compressed (its name ends in ``.gz``)."""
    return Path(path).suffix == ".gz"


def _stored(path: Path, text: bytes) -> bytes:
    """``text`` as ``path`` stores it: gzip members for a ``.gz`` file (no name or time in them, so the same rows
    give the same bytes), else as is."""
    return gzip.compress(text, GZIP_LEVEL, mtime=0) if is_gzip(path) else text


def _umask_mode() -> int:
    """rw for everyone the process umask allows (mkstemp's 0600 would hide a shipped or shared database)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _ensure_file(path: Path) -> None:
    """Create ``path`` with the header, atomically: a concurrent creator either wins or sees a complete header."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    try:
        os.fchmod(fd, _umask_mode())
        os.write(fd, _stored(path, HEADER_LINE.encode("utf-8")))
        os.fsync(fd)
        os.close(fd)
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


@contextlib.contextmanager
def database_lock(path: str | Path, write: bool = True) -> Iterator[int]:
    """Hold the one lock every writer of the database ``path`` takes; yields an ``O_APPEND`` descriptor of it (or,
    with ``write=False``, a read-only one: a merge's shards, which may be read-only files).

    The lock is an exclusive ``flock`` on the file itself (created with the header when missing). A replacing writer
    (``write_rows``, ``merge``) swaps the file's inode while holding the lock, so a writer granted the lock on an inode
    the path no longer names retries on the current one. A killed holder's lock goes with its process.
    """
    path = Path(path)
    while True:
        try:
            if write:
                _ensure_file(path)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND if write else os.O_RDONLY)
        except FileNotFoundError:
            if not write:
                raise ResultsSchemaError(f"{path}: no such results file") from None
            continue  # replaced or removed between the two calls
        except OSError as exc:
            raise ResultsSchemaError(f"{path}: cannot {'write' if write else 'read'}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held, now = os.fstat(fd), _stat_or_none(path)
            if now is not None and (held.st_dev, held.st_ino) == (now.st_dev, now.st_ino):
                yield fd
                if write:
                    os.fsync(fd)
                return
        finally:
            os.close(fd)  # closing releases the lock


def _stat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() == 0:
            return True
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def _check_current_header(path: Path) -> None:
    """Appending to a file of an older schema version would mix row layouts: ask for a merge (which upgrades)."""
    try:
        with gzip.open(path, "rb") if is_gzip(path) else open(path, "rb") as handle:
            first = handle.readline().decode("utf-8", errors="replace")
    except (OSError, EOFError) as error:
        raise ResultsSchemaError(f"{path}: cannot read its header ({error})") from None
    if first != HEADER_LINE:
        version = "an older schema" if first in _KNOWN_HEADERS else "an unknown schema"
        raise ResultsSchemaError(
            f"{path}:1: written with {version}; upgrade it first (appopt bench merge {path.name} -o NEW.csv)"
        )


def append_rows(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Append validated rows; each lands whole or (if the process dies mid-write) is dropped on read."""
    path = Path(path)
    lines = []
    for row in rows:
        validate_row(row)
        lines.append(format_row(row).encode("utf-8"))
    if not lines:
        return 0
    with database_lock(path) as fd:
        _check_current_header(path)
        if is_gzip(path):
            _replace_bytes(path, lambda out: _copy_then_write(path, out, b"".join(lines)))
            return len(lines)
        if not _ends_with_newline(path):
            os.write(fd, b"\n")  # a writer died mid-row: start on a fresh line, leave its fragment to the reader
        for line in lines:
            os.write(fd, line)
    return len(lines)


def write_rows(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Replace ``path`` with exactly these rows, atomically (readers see the old file or the new one), holding the
    database's lock: rows appended while this runs wait and land in the new file."""
    path = Path(path)
    rows = list(rows)
    with database_lock(path):
        return _replace_rows(path, rows)


def rewrite_rows(path: str | Path, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None]) -> int | None:
    """Read ``path``'s rows, let ``change`` return the new rows (or None for no change) and replace the file, all
    under the database's lock, so no row appended meanwhile is lost; returns the rows written, or None."""
    path = Path(path)
    if not path.exists():
        raise ResultsSchemaError(f"{path}: no such results file")
    with database_lock(path):
        new = change(frame_rows(read_results(path)))
        return None if new is None else _replace_rows(path, new)


def _replace_rows(path: Path, rows: Iterable[Mapping[str, Any]]) -> int:
    """Write ``rows`` aside and rename over ``path`` (the caller holds ``database_lock(path)``)."""
    count = 0

    def write(out: io.BufferedWriter) -> None:
        nonlocal count
        with (
            gzip.GzipFile(filename="", mode="wb", fileobj=out, compresslevel=GZIP_LEVEL, mtime=0)
            if is_gzip(path)
            else contextlib.nullcontext(out)
        ) as stream:
            stream.write(HEADER_LINE.encode("utf-8"))
            for row in rows:
                validate_row(row)
                stream.write(format_row(row).encode("utf-8"))
                count += 1

    _replace_bytes(path, write)
    return count


def _replace_bytes(path: Path, write: Callable[[io.BufferedWriter], object]) -> None:
    """Let ``write`` fill a file beside ``path``, then rename it over ``path`` (readers see the old file or the new
    one; the caller holds ``database_lock(path)``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".new", dir=path.parent)
    os.fchmod(fd, _umask_mode())
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _copy_then_write(path: Path, out: io.BufferedWriter, lines: bytes) -> None:
    """A gzip database's append: its bytes as they are, then ``lines`` as one more gzip member."""
    with open(path, "rb") as source:
        shutil.copyfileobj(source, out)
    out.write(_stored(path, lines))


# --- reading -----------------------------------------------------------------------------------------------------


def _parse_field(column: Column, text: str) -> Any:
    if text == "":
        return None
    if column.kind == "int":
        try:
            return int(text)
        except ValueError:
            number = float(text)  # "8.0" from an older writer; "1e400" is inf and fails the check below
            if not number.is_integer():
                raise ValueError(f"{column.name}: expected an integer, got {text[:40]!r}") from None
            return int(number)
    if column.kind == "float":
        return float(text)
    return text


def _read_rows(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(valid rows, descriptions of dropped lines: damaged, or a value out of its column's type or range);
    ResultsSchemaError for a missing file or a wrong header."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ResultsSchemaError(f"{path}: no such results file") from None
    if is_gzip(path):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as error:  # BadGzipFile is an OSError; a cut-off member an EOFError
            raise ResultsSchemaError(f"{path}: not a readable gzip file ({error})") from None
    text = raw.decode("utf-8", errors="replace")
    lines = text.split("\n")
    names = _KNOWN_HEADERS.get(lines[0] + "\n") if lines else None
    if names is None:
        got = lines[0][:80] if lines else ""
        raise ResultsSchemaError(f"{path}:1: header does not match results schema v{SCHEMA_VERSION} (got {got!r}…)")
    columns = [_BY_NAME[n] for n in names]
    # split() leaves the text after the last newline as the final element: "" when the file ends cleanly, else the
    # fragment of a row whose writer stopped mid-write.
    body, tail = lines[1:-1], lines[-1] if len(lines) > 1 else ""
    rows: list[dict[str, Any]] = []
    dropped: list[str] = []
    if tail:
        dropped.append(f"line {len(lines)}: unterminated (a writer stopped mid-row)")
    for number, line in enumerate(body, start=2):
        if not line:
            continue
        content, _, crc = line.rpartition(",")
        if f"{zlib.crc32(content.encode('utf-8')):08x}" != crc:
            dropped.append(f"line {number}: checksum mismatch (torn write or edited by hand)")
            continue
        fields = next(csv.reader([content]))
        if len(fields) != len(columns):
            dropped.append(f"line {number}: {len(fields)} fields, expected {len(columns)}")
            continue
        try:
            row = dict.fromkeys(COLUMN_NAMES)
            row.update({c.name: _parse_field(c, f) for c, f in zip(columns, fields, strict=True)})
            validate_row(row, f"line {number}")
        except ResultsSchemaError as error:
            dropped.append(str(error))
            continue
        except ValueError as error:
            dropped.append(f"line {number}: {error}")
            continue
        rows.append(row)
    return _older_drivers(rows, names), dropped


def _older_drivers(rows: list[dict[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """Rows of a file before schema v4 (no ``driver`` column): scenario rows were measured by the harness."""
    if "driver" not in names:
        for row in rows:
            if row["source"] == "measured" and row["scenario"] in _HARNESS_SCENARIOS:
                row["driver"] = "harness"  # the only scenario driver before schema v4
    return rows


_PANDAS_DTYPES = {"str": "string", "int": "Int64", "float": "Float64", "json": "string", "bool": "boolean"}


def to_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows as a DataFrame with the schema's column order and nullable dtypes."""
    json_columns = [c.name for c in COLUMNS if c.kind == "json"]
    normalised = [{**row, **{k: _field_text(_BY_NAME[k], row.get(k)) or None for k in json_columns}} for row in rows]
    frame = pd.DataFrame(normalised, columns=list(COLUMN_NAMES))
    return frame.astype({c.name: _PANDAS_DTYPES[c.kind] for c in COLUMNS})


def dropped_rows(path: str | Path) -> list[str]:
    """What ``read_results`` would drop of ``path`` (its ``dropped_rows``), read without building a DataFrame:
    cheap enough for a plan's start-up. ResultsSchemaError for a missing file or a wrong header."""
    return _read_rows(Path(path))[1]


def read_results(*paths: str | Path, warn: bool = True) -> pd.DataFrame:
    """Read and validate one or more results files into one DataFrame (duplicate ``row_id``s dropped).

    ``frame.attrs["dropped_rows"]`` lists damaged lines that were skipped (a killed writer's partial row).
    """
    rows: list[dict[str, Any]] = []
    dropped: list[str] = []
    for path in paths:
        file_rows, file_dropped = _read_rows(Path(path))
        rows.extend(file_rows)
        dropped.extend(f"{path}: {d}" for d in file_dropped)
    if dropped and warn:
        warnings.warn(f"dropped {len(dropped)} damaged or invalid row(s): {dropped[0]}", stacklevel=2)
    frame = to_frame(rows).drop_duplicates("row_id", keep="first").reset_index(drop=True)
    frame.attrs["dropped_rows"] = dropped
    return frame


def frame_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A DataFrame read by ``read_results`` back into plain rows (NA -> None)."""
    out = []
    for record in frame.to_dict(orient="records"):
        out.append(
            {k: (None if v is pd.NA or (isinstance(v, float) and math.isnan(v)) else v) for k, v in record.items()}
        )
    return out


def merge(shards: Sequence[str | Path], out: str | Path) -> tuple[int, list[str]]:
    """Merge shard files (and ``out`` itself if it exists) into ``out``; (rows written, dropped damaged lines).

    Holds the lock of ``out`` and of every shard (taken in path order, so two merges never wait on each other), so
    rows appended to any of them meanwhile are neither lost from ``out`` nor read half-written from a shard.
    """
    out = Path(out)
    sources = [Path(s) for s in shards if Path(s).resolve() != out.resolve()]
    if not sources and not out.exists():
        raise ResultsSchemaError("merge: no shard files given")
    for source in sources:
        if not source.is_file():
            raise ResultsSchemaError(f"{source}: no such results file")
    with contextlib.ExitStack() as stack:
        target = out.resolve()
        for locked in sorted({p.resolve() for p in (*sources, out)}):
            stack.enter_context(database_lock(locked, write=locked == target))
        frame = read_results(out, *sources, warn=False)
        frame = frame.sort_values(["timestamp", "row_id"], kind="stable")
        written = _replace_rows(out, frame_rows(frame))
    return written, list(frame.attrs["dropped_rows"])


def schema_markdown() -> str:
    """The schema as a Markdown table (for docs and ``appopt bench schema``)."""
    lines = ["| column | type | required | meaning |", "|---|---|---|---|"]
    for c in COLUMNS:
        meaning = c.description + (f" One of: {', '.join(x for x in c.choices if x)}." if c.choices else "")
        lines.append(f"| {c.name} | {c.kind} | {'yes' if c.required else ''} | {meaning} |")
    lines.append("| crc | hex | yes | CRC-32 of the line before its last comma (detects torn writes). |")
    return "\n".join(lines)


_NO_ACCELERATOR = ("", "none", "nan")


def on_gpu(frame: pd.DataFrame) -> pd.Series:
    """Rows measured on an accelerator (the ``accelerator`` column names one)."""
    if "accelerator" not in frame:
        return pd.Series(False, index=frame.index)
    return ~frame["accelerator"].fillna("").astype(str).str.strip().str.lower().isin(_NO_ACCELERATOR)


def cpu_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` without the rows measured on an accelerator: what the CPU models fit."""
    return frame[~on_gpu(frame)] if len(frame) else frame
