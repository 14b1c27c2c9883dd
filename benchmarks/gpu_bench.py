"""GPU step times of PyTorch routes: training and inference, eager and ``torch.compile``, fp32 / bf16 / fp16 autocast,
NCHW / NHWC (channels_last), on the training suite's models and the catalog's named architectures at full size.

It has two halves, because a GPU machine holds PyTorch but not this project's other dependencies:

* ``measure`` runs on the GPU machine and needs only PyTorch and NumPy:
  ``python -m benchmarks.gpu_bench measure --out DIR [--budget SECONDS] [--quick]``. It writes ``DIR/gpu_runs.jsonl``:
  a header (GPU, driver, CPU, versions, the GPU's measured matrix-product peaks and copy bandwidth), then one line per
  configuration, flushed as it goes, so a run stopped at its limit keeps what it measured. A configuration that fails
  (out of memory, a compile error) gets a line naming the error, never a crash of the run.
* ``rows`` runs here: ``python -m benchmarks.gpu_bench rows DIR/gpu_runs.jsonl --db PATH``. It rebuilds each model
  from its seed, exports it to ONNX, analyses it (``benchmarks.features``) and appends result-database rows with the
  GPU machine's provenance (``target`` is the GPU's key, ``accelerator`` its name).

Timing: inputs are generated on the GPU once (synthetic data: no host-to-device copy in a step); after warm-up steps
(the first one's time is recorded apart: for ``torch.compile`` it holds the compile), ``BLOCKS`` blocks of
``STEPS_PER_BLOCK`` steps are timed, each block ended by one synchronisation; the figure is the median block's time
per step. Training is SGD with momentum 0.9 and cross-entropy, as every trainer of ``benchmarks.trainers``; fp16
training scales the loss (``torch.amp.GradScaler``). ``torch.backends.cudnn.benchmark`` is on, PyTorch's other
defaults are kept (cuDNN convolutions in TF32 at fp32, matrix products in full fp32).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import training_suite as suite
from benchmarks.results.provenance import appopt_revision
from perfmodels.targets import cpu_model_and_flags, kernel_flags, slug, usable_cores

BLOCKS = 3
STEPS_PER_BLOCK = 5
WARMUP_STEPS = 3
PRECISIONS = ("fp32", "bf16", "fp16")
#: backend column of the rows, by compiler
BACKENDS = {"none": "torch-cuda", "inductor": "torch-compile-cuda"}
LIBRARIES = "cublas+cudnn"


@dataclass(frozen=True)
class GpuModel:
    """One model of the GPU suite: how to build it (seeded) and feed it."""

    name: str
    family: str
    build: Callable[[], Any]
    #: per-sample input shape; token models take integer ids below ``vocab``
    shape: tuple[int, ...]
    batches: tuple[int, ...]
    vocab: int = 0
    convolutional: bool = True

    def example(self, batch: int) -> np.ndarray:
        """A seeded host batch (for the ONNX export the rows' features come from)."""
        rng = np.random.default_rng(0)
        if self.vocab:
            return rng.integers(0, self.vocab, (batch, *self.shape)).astype(np.int64)
        return rng.standard_normal((batch, *self.shape)).astype(np.float32)


def _encoder(vocab: int, length: int, hidden: int, heads: int, layers: int, classes: int) -> Callable[[], Any]:
    def build() -> Any:
        suite._seeded(0)
        return suite._torch_modules().Encoder(vocab, length, hidden, heads, layers, classes)

    return build


MODELS: tuple[GpuModel, ...] = (
    GpuModel("digits_mlp", "mlp", lambda: suite.digits_mlp(0), (64,), (128, 1024), convolutional=False),
    GpuModel("digits_cnn", "cnn", lambda: suite.digits_cnn(0), (1, 8, 8), (128, 1024)),
    GpuModel("resnet8", "resnet", lambda: suite.resnet8(0), (3, 16, 16), (128, 1024)),
    GpuModel("resnet50_224", "resnet", lambda: suite.resnet50(0, 1000), (3, 224, 224), (32, 128)),
    GpuModel("mobilenet_v2_224", "mobilenet", lambda: suite.mobilenet_v2(0, 1000), (3, 224, 224), (32, 128)),
    GpuModel("transformer_tiny", "transformer", lambda: suite.transformer_tiny(0), (16,), (128, 1024), 64, False),
    GpuModel("bert_like", "transformer", lambda: suite.bert_like(0), (32,), (32, 256), 1024, False),
    GpuModel("bert_base_128", "transformer", _encoder(30522, 128, 768, 12, 12, 2), (128,), (32, 128), 30522, False),
)

#: The catalog's architectures at full size, measured first.
FULL_SIZE = ("resnet50_224", "bert_base_128", "mobilenet_v2_224")

#: torch.compile configurations, most wanted first (each compiles for one batch: the model's largest)
COMPILED: tuple[tuple[str, str, str, str], ...] = (
    ("resnet50_224", "training", "bf16", "NHWC"),
    ("bert_base_128", "training", "bf16", "NCHW"),
    ("resnet8", "training", "bf16", "NHWC"),
    ("digits_mlp", "training", "fp32", "NCHW"),
    ("transformer_tiny", "training", "bf16", "NCHW"),
    ("resnet50_224", "inference", "bf16", "NHWC"),
    ("mobilenet_v2_224", "training", "bf16", "NHWC"),
    ("bert_base_128", "inference", "bf16", "NCHW"),
    ("digits_cnn", "training", "fp32", "NHWC"),
    ("resnet50_224", "training", "fp32", "NCHW"),
    ("bert_like", "training", "bf16", "NCHW"),
    ("mobilenet_v2_224", "inference", "bf16", "NHWC"),
)


def get_model(name: str) -> GpuModel:
    for model in MODELS:
        if model.name == name:
            return model
    raise KeyError(f"{name}: not a GPU suite model (known: {', '.join(m.name for m in MODELS)})")


def layouts(model: GpuModel) -> tuple[str, ...]:
    return ("NCHW", "NHWC") if model.convolutional else ("NCHW",)


# --- the GPU side -------------------------------------------------------------------------------------------------


def _timed_blocks(step: Callable[[], None], sync: Callable[[], None]) -> tuple[float, list[float]]:
    """Seconds of the first step, and seconds per step of each timed block."""
    t0 = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - t0
    for _ in range(WARMUP_STEPS - 1):
        step()
    sync()
    blocks = []
    for _ in range(BLOCKS):
        t0 = time.perf_counter()
        for _ in range(STEPS_PER_BLOCK):
            step()
        sync()
        blocks.append((time.perf_counter() - t0) / STEPS_PER_BLOCK)
    return first, blocks


def _step_fn(torch: Any, model: GpuModel, mode: str, compiler: str, precision: str, layout: str, batch: int) -> Any:
    """The module prepared as the route runs it, and a closure that runs one step."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    module = model.build().to(device)
    if model.vocab:
        x = torch.randint(0, model.vocab, (batch, *model.shape), device=device)
    else:
        x = torch.randn(batch, *model.shape, device=device)
    if layout == "NHWC":
        module = module.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if dtype else None
    forward = torch.compile(module) if compiler == "inductor" else module
    if mode == "inference":
        module.eval()

        def infer() -> None:
            with torch.inference_mode():
                if autocast:
                    with autocast():
                        forward(x)
                else:
                    forward(x)

        return infer
    module.train()
    y = torch.randint(0, 2, (batch,), device=device)
    optimizer = torch.optim.SGD(module.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")

    def train() -> None:
        optimizer.zero_grad(set_to_none=True)
        if autocast:
            with autocast():
                logits = forward(x)
        else:
            logits = forward(x)
        loss = loss_fn(logits.float(), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

    return train


def measure_one(
    torch: Any, model: GpuModel, mode: str, compiler: str, precision: str, layout: str, batch: int
) -> dict[str, Any]:
    """One configuration's record (``error`` set, no times, when it cannot run)."""
    record: dict[str, Any] = {
        "model": model.name,
        "family": model.family,
        "mode": mode,
        "compiler": compiler,
        "precision": precision,
        "layout": layout,
        "batch": batch,
    }
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    try:
        if torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()
        step = _step_fn(torch, model, mode, compiler, precision, layout, batch)
        first, blocks = _timed_blocks(step, sync)
        record.update(
            first_step_s=first,
            block_ms=[b * 1e3 for b in blocks],
            step_ms=statistics.median(blocks) * 1e3,
            peak_memory_bytes=int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else 0,
        )
    except Exception as exc:
        record["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    finally:
        if compiler != "none":
            torch._dynamo.reset()  # drop the compiled graphs (and the module they hold)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return record


def probes(torch: Any) -> dict[str, float]:
    """Measured matrix-product TFLOP/s per precision (8192^3, mean of 10 after 3) and device copy GB/s."""
    if not torch.cuda.is_available():
        return {}
    out: dict[str, float] = {}
    n = 8192
    for name, dtype, tf32 in (
        ("bf16", torch.bfloat16, False),
        ("fp16", torch.float16, False),
        ("tf32", torch.float32, True),
        ("fp32", torch.float32, False),
    ):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        torch.cuda.synchronize()
        out[f"{name}_tflops"] = 2 * n**3 * 10 / (time.perf_counter() - t0) / 1e12
    torch.backends.cuda.matmul.allow_tf32 = False
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        dst.copy_(src)
    torch.cuda.synchronize()
    out["copy_gbs"] = 2 * src.numel() * 10 / (time.perf_counter() - t0) / 1e9
    return out


def header(torch: Any) -> dict[str, Any]:
    import subprocess

    cpu_model, flags = cpu_model_and_flags()
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    driver = ""
    with contextlib.suppress(OSError):
        driver = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    props = torch.cuda.get_device_properties(0) if torch.cuda.is_available() else None
    return {
        "kind": "header",
        "gpu": gpu,
        "gpu_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
        "multiprocessors": getattr(props, "multi_processor_count", 0),
        "gpu_memory_bytes": getattr(props, "total_memory", 0),
        "driver": driver,
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "",
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 0,
        "host": platform.node(),
        "cpu_model": cpu_model,
        "cpu_flags": " ".join(kernel_flags(flags)),
        "cores": usable_cores(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "revision": appopt_revision(),
        "probes": _safe_probes(torch),
    }


def _safe_probes(torch: Any) -> dict[str, Any]:
    try:
        return probes(torch)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"[:300]}


#: Share of the budget eager configurations may take before the compiled ones start.
EAGER_SHARE = 0.6


Compiled = tuple[tuple[str, str, str, str], ...]


def plan(
    quick: bool, only: tuple[str, ...] = (), compiled: Compiled | None = COMPILED
) -> Iterator[tuple[GpuModel, str, str, str, str, int]]:
    """Eager configurations first (cheap; the catalog's full-size models before the small ones), then the compiled
    ones in ``compiled``'s order (None: none). ``only`` names the models measured eagerly (``("none",)``: none)."""
    models = MODELS[:3] if quick else tuple(sorted(MODELS, key=lambda m: m.name not in FULL_SIZE))
    if only == ("none",):
        models = ()
    elif only:
        models = tuple(get_model(name) for name in only)
    for model in models:
        for mode in ("training", "inference"):
            for batch in model.batches[:1] if quick else model.batches:
                for precision in PRECISIONS[:2] if quick else PRECISIONS:
                    for layout in layouts(model):
                        yield model, mode, "none", precision, layout, batch
    for name, mode, precision, layout in (compiled or ())[: 1 if quick else None]:
        model = get_model(name)
        if quick and model not in models:
            model, layout = models[0], layouts(models[0])[0]
        yield model, mode, "inductor", precision, layout, max(model.batches)


def measure(
    out: Path,
    budget_s: float,
    quick: bool = False,
    echo: Callable[[str], None] = print,
    only: tuple[str, ...] = (),
    compiled: Compiled | None = COMPILED,
) -> Path:
    """Measure every configuration of ``plan`` until ``budget_s`` has passed; returns the JSONL file."""
    import torch

    torch.backends.cudnn.benchmark = True
    started = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_runs.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        head = header(torch)
        handle.write(json.dumps(head) + "\n")
        handle.flush()
        echo(f"gpu: {head['gpu']} driver {head['driver']} torch {head['torch']}; probes {head['probes']}")
        for model, mode, compiler, precision, layout, batch in plan(quick, only, compiled):
            spent = time.perf_counter() - started
            if compiled and compiler == "none" and spent > budget_s * EAGER_SHARE:
                continue  # leave the rest of the budget to the compiled configurations
            if spent > budget_s:
                handle.write(json.dumps({"kind": "stopped", "reason": f"budget of {budget_s:.0f} s spent"}) + "\n")
                echo(f"budget of {budget_s:.0f} s spent: stopping")
                break
            record = measure_one(torch, model, mode, compiler, precision, layout, batch)
            handle.write(json.dumps({"kind": "run", **record}) + "\n")
            handle.flush()
            figure = f"{record['step_ms']:.3f} ms" if "step_ms" in record else record.get("error", "?")
            echo(f"{model.name} {mode} {compiler} {precision} {layout} b{batch}: {figure}")
    return path


# --- this side: rows for the result database ---------------------------------------------------------------------


def gpu_target_key(gpu: str, count: int = 1) -> str:
    """``nvidia-h100-80gb-hbm3-1g``: a slug of the GPU's name and the GPU count, as ``target_key`` is for CPUs.

    >>> gpu_target_key("NVIDIA H100 80GB HBM3")
    'nvidia-h100-80gb-hbm3-1g'
    """
    return f"{slug(gpu, 'unknown-gpu')}-{count}g"


def merged_runs(paths: list[Path]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The runs of several ``measure`` outputs of one GPU, a configuration measured in more than one pooled: its
    blocks together, the figure their median (``repeats`` says how many outputs measured it)."""
    head: dict[str, Any] | None = None
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for path in paths:
        this, runs = read_runs(path)
        if head is not None and this["gpu"] != head["gpu"]:
            raise ValueError(f"{path}: measured on {this['gpu']}, not {head['gpu']}: record each GPU apart")
        head = head or this
        for run in runs:
            if "step_ms" not in run:
                continue
            key = tuple(run[k] for k in ("model", "mode", "compiler", "precision", "layout", "batch"))
            if key in merged:
                kept = merged[key]
                kept["block_ms"] = kept["block_ms"] + run["block_ms"]
                kept["step_ms"] = statistics.median(kept["block_ms"])
                kept["repeats"] += 1
            else:
                merged[key] = {**run, "repeats": 1}
    if head is None:
        raise ValueError("no measure output given")
    return head, list(merged.values())


def read_runs(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the run records of a ``gpu_runs.jsonl`` (a torn last line is dropped)."""
    head: dict[str, Any] | None = None
    runs = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, 1):
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            if number == len(lines):
                break  # cut off mid-write
            raise ValueError(f"{path}:{number}: not a JSON line") from None
        if item.get("kind") == "header":
            head = item
        elif item.get("kind") == "run":
            runs.append(item)
    if head is None:
        raise ValueError(f"{path}: no header line (not a gpu_bench measure output)")
    return head, runs


def rows_of(head: dict[str, Any], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Result-database rows of the measured runs (runs with an error give none: ``measure`` printed them)."""
    from benchmarks.features import model_features
    from benchmarks.trainers.base import export_onnx
    from perfmodels.results_db import make_row

    revision = head.get("revision") or (
        f"not recorded on the GPU machine (an early header); rows made at {appopt_revision()}"
    )
    features: dict[str, Any] = {}
    probes_ = head.get("probes", {})
    rows = []
    for run in runs:
        if "step_ms" not in run:
            continue
        model = get_model(run["model"])
        if model.name not in features:
            import onnx

            features[model.name] = model_features(onnx.load_from_string(export_onnx(model.build(), model.example(2))))
        f = features[model.name]
        peak = probes_.get(f"{'tf32' if run['precision'] == 'fp32' else run['precision']}_tflops")
        base = {
            "source": "measured",
            "timestamp": head["timestamp"],
            "target": gpu_target_key(head["gpu"], 1),
            "host": head["host"],
            "cpu_model": head["cpu_model"],
            "cpu_flags": head.get("cpu_flags") or "not recorded (an early gpu_bench header)",
            "cores": head["cores"],
            "accelerator": head["gpu"],
            "blas": "cublas",
            "appopt_revision": revision,
            "backend": BACKENDS[run["compiler"]],
            "framework": "pytorch",
            "compiler": run["compiler"],
            "library": LIBRARIES,
            "layout": run["layout"],
            "backend_version": head["torch"],
            "library_versions": {
                "torch": head["torch"],
                "cuda": head["cuda"],
                "cudnn": head["cudnn"],
                "nvidia_driver": head.get("driver", ""),
            },
            "threads": 1,
            "precision": run["precision"],
            "mode": run["mode"],
            "model": model.name,
            "family": model.family,
            "batch": run["batch"],
            "flops_per_sample": f.flops_per_sample,
            "flops_by_class": f.flops_by_class,
            "ops_by_class": f.ops_by_class,
            "activation_bytes_per_sample": f.activation_bytes_per_sample,
            "params": f.params,
            "peak_gflops": peak * 1e3 if peak else None,
            "bandwidth_gbs": probes_.get("copy_gbs"),
            "driver": "harness",
            "settings": json.dumps(
                {
                    "device": "cuda",
                    "autocast": run["precision"] != "fp32",
                    "channels_last": run["layout"] == "NHWC",
                    "cudnn_benchmark": True,
                    "blocks": BLOCKS,
                    "steps_per_block": STEPS_PER_BLOCK,
                    "block_ms": [round(b, 4) for b in run["block_ms"]],
                    "first_step_ms": round(run["first_step_s"] * 1e3, 3),
                    "repeats": run.get("repeats", 1),
                    "synthetic_data_on_device": True,
                    "optimizer": "sgd-momentum-0.9" if run["mode"] == "training" else None,
                },
                sort_keys=True,
            ),
            "notes": f"GPU {head['gpu']} (driver {head.get('driver', '?')}), host CPU {head['cpu_model']}",
        }
        step = float(run["step_ms"])
        rate = run["batch"] * 1e3 / step
        if run["mode"] == "training":
            rows.append(make_row(**base, scenario="training", metric="ms_per_step", value=step, unit="ms",
                                 median_ms=step, samples_per_s=rate, queries=BLOCKS * STEPS_PER_BLOCK))
            rows.append(make_row(**base, scenario="training", metric="compile_s", value=run["first_step_s"], unit="s"))
            rows.append(make_row(**base, scenario="training", metric="peak_rss_mib",
                                 value=run["peak_memory_bytes"] / 2**20, unit="MiB"))
        else:
            rows.append(make_row(**base, scenario="SingleStream", metric="p90_latency_ms", unit="ms",
                                 value=max(run["block_ms"]), median_ms=step, samples_per_s=rate,
                                 queries=BLOCKS * STEPS_PER_BLOCK))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_bench", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run the GPU suite (on the GPU machine)")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--budget", type=float, default=420.0, help="seconds after which no new configuration starts")
    m.add_argument("--quick", action="store_true", help="a few small configurations (a smoke test)")
    m.add_argument("--models", default="", help="comma-separated GPU suite models (default: all)")
    m.add_argument("--no-compile", action="store_true", help="eager configurations only")
    m.add_argument("--compiled", default="", help="only these compiled configurations: MODEL:MODE:PRECISION:LAYOUT,...")
    r = sub.add_parser("rows", help="turn a measure output into result-database rows")
    r.add_argument("runs", type=Path, nargs="+", help="measure outputs of one GPU (repeats are pooled)")
    r.add_argument("--db", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "measure":
        only = tuple(n for n in args.models.split(",") if n)
        configs: Compiled | None = None if args.no_compile else COMPILED
        if args.compiled:
            parts = [tuple(c.split(":")) for c in args.compiled.split(",")]
            if any(len(p) != 4 for p in parts):
                parser.error("--compiled: each item is MODEL:MODE:PRECISION:LAYOUT")
            configs, only = tuple((p[0], p[1], p[2], p[3]) for p in parts), ("none",)
        measure(args.out, args.budget, args.quick, only=only, compiled=configs)
        return 0
    from perfmodels.results_db import append_rows

    try:
        head, runs = merged_runs(args.runs)
        written = append_rows(args.db, rows_of(head, runs))
    except (OSError, ValueError, KeyError) as exc:
        print(f"gpu_bench rows: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {written} rows from {len(runs)} runs on {head['gpu']} to {args.db}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
