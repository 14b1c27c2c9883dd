"""Apache TVM (Relax) as a runner engine (``--engine tvm``), and its build-stage compile.

``compile_model`` imports the ONNX model (``relax.frontend.onnx.from_onnx``) and compiles it untuned for an LLVM
CPU target; ``compile_to_dir`` exports that as a shared library (``model.so``) in the image's build stage, so the
final stage only loads it (``tvm.runtime.load_module``) into the Relax VM. The target CPU is the build host's
(``mcpu`` as LLVM detects it) unless ``APPOPT_TVM_MCPU`` names another: an image compiled on one CPU generation may
use instructions an older one lacks.

Linking the exported objects needs a linker: a C compiler on PATH when there is one (TVM's own default), else the
``ziglang`` wheel's ``zig cc`` (so a slim image builds from the wheelhouse alone).

Catalog: compilers ``tvm`` and ``tvm-tuned`` (after a MetaSchedule search, ``runtime.engine_tvm_tuning``) over
framework ``onnxruntime``, no library (TVM generates its own kernels); installed by the ``tvm`` extra. The benchmark
backend ``tvm`` compiles untuned in-process (``compile_session``; untuned TVM is far slower than onnxruntime);
``tvm-tuned``'s backend, which caches its searches per host, is ``benchmarks.engines.tvm_tuning``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from runtime.engine_base import (
    ENGINE_MANIFEST,
    Benchmark,
    CompiledModel,
    Engine,
    Search,
    Signature,
    first_line,
    read_engine_dir,
    read_model,
    require,
    write_engine_dir,
)
from runtime.errors import RuntimeModelError

LIBRARY_FILE = "model.so"


def llvm_target(threads: int | None) -> Any:
    """The LLVM target for this CPU (``mcpu`` as LLVM detects it, or ``APPOPT_TVM_MCPU``) with ``threads`` cores;
    TVM 0.27 refuses target strings."""
    tvm = require("tvm", "tvm")
    from tvm.target import codegen

    mcpu = os.environ.get("APPOPT_TVM_MCPU") or str(codegen.llvm_get_system_cpu())
    target: dict[str, Any] = {"kind": "llvm", "mcpu": mcpu}
    if threads:
        target["num-cores"] = threads
    return tvm.target.Target(target)


def compile_model(model: onnx.ModelProto, threads: int | None) -> Any:
    """The Relax executable of ``model``, untuned, for this CPU; RuntimeModelError naming what TVM refused."""
    tvm = require("tvm", "tvm")
    from tvm.relax.frontend.onnx import from_onnx

    try:
        module = from_onnx(model, keep_params_in_input=False)
        return tvm.compile(module, target=llvm_target(threads))
    except RuntimeModelError:
        raise
    except Exception as exc:  # the importer raises OpNotImplemented/ValueError/TVMError… on what it cannot take
        raise RuntimeModelError(f"tvm cannot compile the model: {type(exc).__name__}: {first_line(exc)}") from None


def set_threads(threads: int | None) -> None:
    """Size TVM's thread pool (affinity mode 0, ``threads`` workers); None keeps TVM's default (TVM_NUM_THREADS,
    OMP_NUM_THREADS, else the cores)."""
    if not threads:
        return
    tvm = require("tvm", "tvm")
    configure = tvm.get_global_func("runtime.config_threadpool", allow_missing=True)
    if configure is not None:
        # TVM pins the calling thread (its worker 0) to one core: give it back its mask, or the rest of the process
        # (other backends, the host key of every later result row) would run as if on a 1-core machine
        mask = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        configure(0, threads)
        if mask is not None:
            os.sched_setaffinity(0, mask)


def _zig_linker(output: str, objects: list[str], options: Any = None, **_: Any) -> None:
    """TVM's ``fcompile`` hook: link ``objects`` into the shared library ``output`` with the ziglang wheel.

    ``-nostdlib``: the library's few libc/libm calls resolve against the process that loads it (Python has both
    loaded), as its TVM runtime calls do; linking zig's own glibc stubs instead costs about a minute on a cold cache.
    """
    argv = [sys.executable, "-m", "ziglang", "cc", "-shared", "-fPIC", "-nostdlib", "-o", output, *objects]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeModelError(f"zig cc could not link the TVM library: {first_line(RuntimeError(proc.stderr))}")


def linker() -> Any:
    """TVM's ``fcompile`` for ``export_library``: None (TVM's C compiler) when one is on PATH, else zig's."""
    require("tvm", "tvm")
    from tvm.support import cc

    if cc.get_cc() is not None:
        return None
    if importlib.util.find_spec("ziglang") is not None:
        return _zig_linker
    raise RuntimeModelError(
        "--engine tvm: exporting the compiled model needs a linker: a C compiler on PATH (gcc, cc) or the ziglang "
        "package"
    )


def compile_to_dir(model_path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                   search: Search | None = None) -> dict[str, Any]:
    """Compile ``model_path`` and export ``model.so`` in ``out_dir`` (with ``engine.json`` and ``io.onnx``).

    With a ``search`` (the ``tvm-tuned`` route's image), MetaSchedule searches its trials first and the library
    carries the best schedules; the records stay in ``out_dir/tuning``. A search needs static shapes, so a symbolic
    batch dimension is fixed at the search's batch (the plan's) and the signature declares it so."""
    tvm = require("tvm", "tvm")
    model = read_model(model_path)
    signature = Signature(model.graph)
    started = time.perf_counter()
    extra: dict[str, Any] = {}
    if search is None:
        executable = compile_model(model, None)
    else:
        executable, fixed, extra = _tuned(model, search, Path(out_dir) / "tuning")
        signature = Signature(fixed.graph)  # the batch fixed for the search
    fcompile = linker()
    try:
        executable.export_library(str(Path(out_dir) / LIBRARY_FILE), fcompile=fcompile)
    except RuntimeModelError:
        raise
    except Exception as exc:
        raise RuntimeModelError(f"tvm cannot export the compiled model: {first_line(exc)}") from None
    seconds = time.perf_counter() - started
    target = llvm_target(None)
    return write_engine_dir(out_dir, "tvm", LIBRARY_FILE, signature,
                            {"tvm": str(tvm.__version__), "mcpu": str(target.mcpu), "compile_s": round(seconds, 3),
                             **extra})


def _tuned(model: onnx.ModelProto, search: Search, work_dir: Path) -> tuple[Any, onnx.ModelProto, dict[str, Any]]:
    """The executable tuned with the search's trials in ``work_dir``, the batch-fixed model it was tuned for (whose
    signature the directory declares), and what ``engine.json`` records of the search."""
    from runtime.engine_tvm_tuning import tuned_executable, with_batch

    trials = search.trials
    if trials < 1:
        raise RuntimeModelError(f"--trials: the tuning budget must be at least 1 trial, got {trials}")
    if search.batch < 1:
        raise RuntimeModelError(f"--batch: the batch a search fixes must be at least 1, got {search.batch}")
    fixed = with_batch(model, search.batch)
    # MetaSchedule refuses a target without its core count: the build machine's usable cores
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    try:
        tuned = tuned_executable(fixed, cores, trials, work_dir)
    except RuntimeModelError:
        raise
    except Exception as exc:  # the importer's, MetaSchedule's and the builders' errors alike
        raise RuntimeModelError(f"tvm cannot tune the model: {type(exc).__name__}: {first_line(exc)}") from None
    figures = {"trials": trials, "batch": search.batch, "tune_s": round(tuned.tune_s, 3), "records": work_dir.name}
    return tuned.executable, fixed, figures


class TvmRunner:
    """A Relax VM over a library exported by ``compile_to_dir`` (or an ONNX file compiled in-process)."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None) -> None:
        tvm = require("tvm", "tvm")
        from tvm import relax

        path = Path(path)
        if path.is_dir():
            artifact, signature = read_engine_dir(path, "tvm")
            try:
                executable = tvm.runtime.load_module(str(artifact))
            except Exception as exc:
                raise RuntimeModelError(f"tvm cannot load {str(artifact)!r}: {first_line(exc)}") from None
            trials = json.loads((path / ENGINE_MANIFEST).read_text(encoding="utf-8")).get("trials")
            tuned = f", tuned over {trials} trials" if trials else ""
            self.describe = f"library {artifact.name}{tuned}"
        else:
            signature = Signature.of_file(path)
            executable = compile_model(read_model(path), threads)
            self.describe = "compiled now, untuned"
        set_threads(threads)
        self.vm = relax.VirtualMachine(executable, tvm.cpu())
        self.inputs, self.input_names, self.output_names = (
            signature.inputs, signature.input_names, signature.output_names)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        return dict(zip(self.output_names, self.run_list(feeds), strict=True))

    def run_list(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """Outputs in graph order."""
        for name in self.input_names:
            self._check_shape(name, np.shape(feeds[name]))
        return run_vm(self.vm, self.input_names, feeds)

    def _check_shape(self, name: str, shape: tuple[int, ...]) -> None:
        """One line where an input's shape differs from a fixed one the library was compiled for (a tuned library
        runs the batch it was searched at), instead of the VM's traceback."""
        declared = self.inputs[name].shape
        if declared is None:
            return
        fixed = [d if isinstance(d, int) else None for d in declared]
        if len(fixed) != len(shape) or any(d is not None and d != s for d, s in zip(fixed, shape, strict=False)):
            wanted = "(" + ", ".join("?" if d is None else str(d) for d in fixed) + ")"
            raise RuntimeModelError(
                f"input {name!r} has shape {tuple(shape)}, but the TVM library takes {wanted} ({self.describe}; a "
                "tuned library runs the batch it was searched at: compile with --batch)"
            )


def run_vm(vm: Any, input_names: list[str], feeds: Mapping[str, Any]) -> list[np.ndarray]:
    """A Relax VM's ``main`` on ``feeds`` (by ``input_names``): its outputs in graph order, as NumPy arrays."""
    tvm = require("tvm", "tvm")
    result = vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(feeds[name])) for name in input_names))
    outputs = result if isinstance(result, (list, tuple)) or type(result).__name__ == "Array" else [result]
    return [np.asarray(out.numpy()) for out in outputs]


def compile_session(model: onnx.ModelProto, threads: int, precision: str) -> CompiledModel:
    """``model`` compiled untuned in this process for ``threads`` cores, on a Relax VM (the benchmark's session)."""
    tvm = require("tvm", "tvm")
    from tvm import relax

    input_names = Signature(model.graph).input_names
    started = time.perf_counter()
    executable = compile_model(model, threads)
    compile_ms = (time.perf_counter() - started) * 1e3
    set_threads(threads)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return CompiledModel(lambda feeds: run_vm(vm, input_names, feeds), compile_ms)


ENGINE = Engine(
    name="tvm", runner=TvmRunner, order=30, framework="onnxruntime", compilers=("tvm", "tvm-tuned"),
    pip=("apache-tvm",), extra="tvm", modules=("tvm",), compile=compile_to_dir, tunes=True,
    benchmark=Benchmark(backend="tvm", compiler="tvm", prepare=compile_session),
)
