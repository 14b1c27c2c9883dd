"""What ``appopt compile`` and ``appopt run-model`` do, without any CLI library.

``compile_to_dir`` checks, optimises and writes a model as a compiled directory; ``run_model`` loads a model or
compiled directory, builds inputs (``.npy``/``.pb`` files or random data), runs it ``repeat`` times and returns
output summaries and latency figures; ``format_*`` turn those into printable lines.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from runtime.artifact import save_artifact
from runtime.engines import ModelRunner, compile_for_engine, engine_names, open_runner
from runtime.errors import RuntimeModelError
from runtime.executor import compile_model
from runtime.ir import Value
from runtime.profiling import Profile


@dataclass
class OutputSummary:
    name: str
    kind: str
    dtype: str
    shape: list[int]
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    length: int | None = None  # sequences


@dataclass
class RunReport:
    model: str
    outputs: list[OutputSummary]
    latencies_s: list[float]
    compile_s: float
    threads: int | None
    inputs: dict[str, str] = field(default_factory=dict)
    #: Per-node times of the timed runs, when asked for.
    profile: Profile | None = None
    #: What ran the model: ``appopt`` (this runtime) or ``onnxruntime`` (with its execution providers).
    engine: str = "appopt"

    @property
    def median_ms(self) -> float:
        return statistics.median(self.latencies_s) * 1e3

    @property
    def p90_ms(self) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] * 1e3


def compile_to_dir(
    model_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    disable: list[str] | None = None,
    max_alloc_bytes: int | None = None,
    engine: str = "appopt",
    trials: int | None = None,
    batch: int | None = None,
) -> dict[str, Any]:
    """Compile ``model_path`` and write it to ``out_dir``; returns the manifest. ``engine`` ``openvino``, ``tvm`` or
    ``iree`` writes that engine's artefact instead (``runtime.engines.compile_for_engine``; ``trials``: TVM's
    tuning budget)."""
    if engine != "appopt":
        if disable:
            raise RuntimeModelError("--disable names this runtime's graph passes: it needs --engine appopt")
        return compile_for_engine(engine, model_path, out_dir, trials, batch)
    if trials is not None or batch is not None:
        raise RuntimeModelError("--trials is the tuning budget of --engine tvm; this runtime does not search")
    exe = compile_model(str(model_path), disable=disable or (), max_alloc_bytes=max_alloc_bytes)
    return save_artifact(exe, out_dir)


def format_compile(manifest: dict[str, Any], out_dir: str | os.PathLike[str]) -> list[str]:
    if "engine" in manifest:  # another engine's artefact (runtime.engines.write_engine_dir)
        trials = manifest.get("trials")
        tuned = f", tuned over {trials} trials in {manifest.get('tune_s', 0):.0f} s" if trials else ""
        return [
            f"compiled -> {out_dir} (engine: {manifest['engine']}, {manifest['artifact']}){tuned}",
            "  inputs:  " + ", ".join(manifest["inputs"]),
            "  outputs: " + ", ".join(manifest["outputs"]),
        ]
    stats = manifest.get("stats", {})
    lines = [f"compiled -> {out_dir}"]
    lines.append("  inputs:  " + ", ".join(_io_text(v) for v in manifest["inputs"]))
    lines.append("  outputs: " + ", ".join(_io_text(v) for v in manifest["outputs"]))
    passes = stats.get("passes", {})
    lines.append(
        f"  nodes: {manifest['nodes']}, initializers: {manifest['initializers']}, passes: "
        + (", ".join(f"{k}={v}" for k, v in passes.items()) or "none")
    )
    expanded = stats.get("expanded_schema_functions") or {}
    inlined = stats.get("inlined_local_functions") or {}
    if expanded or inlined:
        lines.append(
            "  functions: "
            + ", ".join(
                [f"{k} expanded x{v}" for k, v in expanded.items()] + [f"{k} inlined x{v}" for k, v in inlined.items()]
            )
        )
    return lines


def _io_text(v: dict[str, Any]) -> str:
    if v.get("kind") != "tensor":
        return f"{v['name']} ({v.get('kind')})"
    shape = (
        "?" if v.get("shape") is None else "[" + ", ".join(str(d) if d is not None else "?" for d in v["shape"]) + "]"
    )
    return f"{v['name']} {v.get('dtype')}{shape}"


def parse_input_specs(specs: list[str]) -> dict[str, Path]:
    """``["name=path.npy", ...]`` -> ``{name: Path}``."""
    out: dict[str, Path] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise RuntimeModelError(f"--input {spec!r}: expected NAME=FILE (.npy or .pb)")
        out[name] = Path(path)
    return out


def load_input_file(name: str, path: Path) -> Any:
    if not path.is_file():
        raise RuntimeModelError(f"input {name!r}: file {str(path)!r} not found")
    try:
        if path.suffix == ".pb":
            tensor = onnx.TensorProto()
            tensor.ParseFromString(path.read_bytes())
            return numpy_helper.to_array(tensor)
        return np.load(path, allow_pickle=False)
    except Exception as exc:
        raise RuntimeModelError(f"input {name!r}: cannot read {str(path)!r}: {exc}") from None


#: Most bytes ``--random`` makes for one input (a declared dim of 2**31 would otherwise allocate 8 GiB).
MAX_RANDOM_INPUT_BYTES = 1 << 30


def random_input(value: Value, rng: np.random.Generator) -> np.ndarray:
    """Random data for a declared tensor input; unknown dimensions become 1 (as onnx's backend tests do)."""
    if value.kind != "tensor" or value.dtype is None:
        raise RuntimeModelError(f"input {value.name!r}: --random can only make tensors, not {value.kind}")
    shape = tuple(d if isinstance(d, int) else 1 for d in (value.shape or ()))
    dtype = value.dtype
    nbytes = math.prod(shape) * (dtype.itemsize if dtype != np.dtype(object) else 8)
    if nbytes > MAX_RANDOM_INPUT_BYTES or any(not 0 <= d <= MAX_RANDOM_INPUT_BYTES for d in shape):
        raise RuntimeModelError(
            f"input {value.name!r}: declared shape {list(shape)} is too large for --random data (over "
            f"{MAX_RANDOM_INPUT_BYTES >> 20} MiB); pass --input {value.name}=FILE.npy"
        )
    if dtype == np.dtype(object):
        return np.full(shape, "a", dtype=object)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(0, 2, size=shape).astype(dtype)
    return rng.random(shape).astype(dtype)


def build_feeds(
    exe: ModelRunner, files: dict[str, Path], random: bool, seed: int = 0
) -> tuple[dict[str, Any], dict[str, str]]:
    """Feeds for ``exe`` (any engine's runner) plus a description of where each came from."""
    for name in files:
        if name not in exe.inputs:
            raise RuntimeModelError(f"--input {name!r}: the model has no such input; it takes {exe.input_names}")
    rng = np.random.default_rng(seed)
    feeds: dict[str, Any] = {}
    where: dict[str, str] = {}
    for name in exe.input_names:
        if name in files:
            feeds[name] = load_input_file(name, files[name])
            where[name] = str(files[name])
        elif random:
            feeds[name] = random_input(exe.inputs[name], rng)
            where[name] = f"random {feeds[name].dtype}{list(feeds[name].shape)}"
        else:
            raise RuntimeModelError(f"input {name!r} not given: pass --input {name}=FILE.npy or --random")
    for name in files:
        if name not in feeds:  # overriding an initializer-backed input
            feeds[name] = load_input_file(name, files[name])
            where[name] = str(files[name])
    return feeds, where


def summarize(name: str, value: Any) -> OutputSummary:
    if isinstance(value, list):
        return OutputSummary(name, "sequence", "-", [], length=len(value))
    if value is None:
        return OutputSummary(name, "optional", "-", [])
    arr = np.asarray(value)
    summary = OutputSummary(name, "tensor", str(arr.dtype), [int(d) for d in arr.shape])
    if arr.size and (arr.dtype.kind in "fiub"):
        data = arr.astype(np.float64)
        summary.mean, summary.min, summary.max = float(data.mean()), float(data.min()), float(data.max())
    return summary


def run_model(
    model: str | os.PathLike[str],
    inputs: list[str] | None = None,
    random: bool = False,
    repeat: int = 1,
    threads: int | None = None,
    seed: int = 0,
    profile: bool = False,
    engine: str = "appopt",
) -> RunReport:
    """Compile (or load) ``model``, run it ``repeat`` times; outputs of the last run are summarised.

    ``engine`` ``onnxruntime`` runs an ONNX file through onnxruntime instead (the image of an onnxruntime plan);
    ``openvino`` and ``tvm`` run an ONNX file or the directory ``compile --engine`` wrote for them.
    With ``profile`` (this runtime only), one untimed warm-up run comes first and the timed runs record per-node
    times.
    """
    if repeat < 1:
        raise RuntimeModelError(f"--repeat must be at least 1, got {repeat}")
    if engine not in engine_names():
        raise RuntimeModelError(f"--engine must be one of {', '.join(engine_names())}, not {engine!r}")
    if profile and engine != "appopt":
        raise RuntimeModelError("--profile times this runtime's nodes: it needs --engine appopt")
    if not Path(model).exists():
        raise RuntimeModelError(f"model {str(model)!r} does not exist")
    started = time.perf_counter()
    runner: ModelRunner
    if engine != "appopt":
        runner, engine_text = open_runner(engine, model, threads)
    else:
        runner = exe = compile_model(str(model), threads=threads)
        engine_text = "appopt"
    compile_s = time.perf_counter() - started
    feeds, where = build_feeds(runner, parse_input_specs(inputs or []), random, seed)
    latencies = []
    outputs: dict[str, Any] = {}
    if profile:
        exe.run(feeds)  # the first run plans buffers and tunes: not what a profile should show
    with exe.profiling() if profile else contextlib.nullcontext() as recorded:
        for _ in range(repeat):
            t0 = time.perf_counter()
            outputs = runner.run(feeds)
            latencies.append(time.perf_counter() - t0)
    summaries = [summarize(name, outputs[name]) for name in runner.output_names]
    return RunReport(str(model), summaries, latencies, compile_s, threads, where, recorded, engine_text)


def format_run(report: RunReport) -> list[str]:
    engine = "" if report.engine == "appopt" else f", engine: {report.engine}"
    lines = [
        f"model: {report.model} (loaded in {report.compile_s * 1e3:.1f} ms, threads: {report.threads or 'default'}"
        f"{engine})"
    ]
    for name, source in report.inputs.items():
        lines.append(f"  input  {name}: {source}")
    for s in report.outputs:
        if s.kind == "sequence":
            lines.append(f"  output {s.name}: sequence of {s.length}")
        elif s.kind == "optional":
            lines.append(f"  output {s.name}: empty optional")
        elif s.mean is None:
            lines.append(f"  output {s.name}: {s.dtype}{s.shape}")
        else:
            lines.append(f"  output {s.name}: {s.dtype}{s.shape} mean={s.mean:.6g} min={s.min:.6g} max={s.max:.6g}")
    lines.append(
        f"latency over {len(report.latencies_s)} run(s): median {report.median_ms:.3f} ms, p90 {report.p90_ms:.3f} ms"
    )
    if report.profile is not None:
        lines.extend(report.profile.lines())
    return lines
