"""IREE (llvm-cpu) as a runner engine (``--engine iree``), and its build-stage compile.

``compile_model`` imports the ONNX model into MLIR's torch dialect with IREE's own ONNX importer (the library behind
``iree-import-onnx``; models below opset 17 are upgraded first, as ``--opset-version 17`` does), then ``iree-compile``
(the compiler wheel's tool) lowers it for the local CPU (``--iree-hal-local-target-device-backends=llvm-cpu``) to a
VM flatbuffer (``.vmfb``). ``compile_to_dir`` writes that file in an image's build stage, so the final stage only
needs the runtime wheel. The target CPU is ``host`` (the build machine's) unless ``APPOPT_IREE_CPU`` names another.

The importer names the entry function after the ONNX graph, not ``main``: the runner calls the module's one exported
function. Threads: ``device_for``.

Catalog: compiler ``iree`` over framework ``onnxruntime`` (the route "ONNX model, compiled by IREE"), no library
(IREE generates its own kernels); installed by the ``iree`` extra (``iree-base-compiler`` to compile,
``iree-base-runtime`` to run). The benchmark backend ``iree`` compiles in-process (``compile_session``) and keeps its
compile time (import plus ``iree-compile``); a model IREE cannot import, compile or load is a skip with the reason.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from runtime import engine_base
from runtime.engine_base import Search, Signature, first_line, read_engine_dir, read_model, require, write_engine_dir
from runtime.errors import RuntimeModelError

VMFB_FILE = "model.vmfb"
#: The opset IREE's ONNX importer is written against; older models are converted up to it (``--opset-version 17``).
IMPORT_OPSET = 17


def target_cpu() -> str:
    """The ``--iree-llvmcpu-target-cpu`` value: ``APPOPT_IREE_CPU``, else ``host`` (the compiling machine's CPU)."""
    return os.environ.get("APPOPT_IREE_CPU") or "host"


def compile_flags() -> list[str]:
    """``iree-compile`` flags for this CPU."""
    return ["--iree-hal-local-target-device-backends=llvm-cpu", f"--iree-llvmcpu-target-cpu={target_cpu()}"]


def _upgraded(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` at opset 17 or later, shapes inferred (what ``iree-import-onnx --opset-version 17`` does)."""
    from onnx import shape_inference, version_converter

    default = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), IMPORT_OPSET)
    if default < IMPORT_OPSET:
        model = version_converter.convert_version(model, IMPORT_OPSET)
    return shape_inference.infer_shapes(model)


def import_onnx(model: onnx.ModelProto) -> str:
    """The model as MLIR text (torch dialect), by IREE's ONNX importer; RuntimeModelError naming what it refused."""
    require("iree.compiler", "iree")
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer

    try:
        info = onnx_importer.ModelInfo(_upgraded(model))
        context = ir.Context()
        module = info.create_module(context=context).operation
        onnx_importer.NodeImporter.define_function(info.main_graph, module).import_all()
        module.verify()
        return str(module.get_asm(assume_verified=True))
    except Exception as exc:  # the importer raises OnnxImportError/ValueError/MLIRError… on what it cannot take
        raise RuntimeModelError(f"iree cannot import the model: {type(exc).__name__}: {first_line(exc)}") from None


def _compiler_error(exc: BaseException) -> str:
    """``iree-compile``'s first diagnostic line (its message starts with the command line, then the errors)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "error:" in line]
    return (errors[0] if errors else first_line(exc))[:300]


def compile_mlir(mlir: str) -> bytes:
    """``iree-compile`` of ``mlir`` for the local CPU: the ``.vmfb`` bytes."""
    require("iree.compiler", "iree")
    from iree.compiler import tools

    try:
        return bytes(tools.compile_str(mlir, target_backends=["llvm-cpu"], extra_args=compile_flags()[1:]))
    except Exception as exc:  # CompilerToolError carries iree-compile's stderr
        raise RuntimeModelError(f"iree cannot compile the model: {_compiler_error(exc)}") from None


def compile_model(model: onnx.ModelProto) -> bytes:
    """The ``.vmfb`` of ``model``: imported, then compiled for this CPU."""
    return compile_mlir(import_onnx(model))


def compile_to_dir(model_path: str | os.PathLike[str], out_dir: str | os.PathLike[str],
                   search: Search | None = None) -> dict[str, Any]:
    """Compile ``model_path`` to ``model.vmfb`` in ``out_dir`` (with ``engine.json`` and ``io.onnx``); IREE has no
    tuning search (``search`` is refused before this is called)."""
    import importlib.metadata

    require("iree.compiler", "iree")
    model = read_model(model_path)
    signature = Signature(model.graph)
    started = time.perf_counter()
    vmfb = compile_model(model)
    seconds = time.perf_counter() - started
    (Path(out_dir) / VMFB_FILE).write_bytes(vmfb)
    return write_engine_dir(out_dir, "iree", VMFB_FILE, signature,
                            {"iree": importlib.metadata.version("iree-base-compiler"), "target_cpu": target_cpu(),
                             "compile_s": round(seconds, 3)})


#: The thread count the process's ``local-task`` executor was created with (None: not created yet).
_TASK_WORKERS: list[int] = []
_DEVICE_LOCK = threading.Lock()


def device_for(threads: int | None) -> Any:
    """The HAL device that runs a module on ``threads`` threads.

    One thread: ``local-sync``, which runs the dispatches inline on the calling thread (IREE's single-threaded
    driver). More (or None, IREE's default of one worker per core): ``local-task``, whose executor has ``threads``
    worker groups (``--task_topology_group_count``). IREE reads the task-topology flags once, when the process first
    creates that driver, and keeps the driver: a process can run one multi-threaded count only, and asking for
    another is refused in one line.
    """
    rt = require("iree.runtime", "iree")
    if threads == 1:
        return rt.get_device("local-sync")
    wanted = threads or 0
    with _DEVICE_LOCK:
        if not _TASK_WORKERS:
            rt.flags.parse_flags(f"--task_topology_group_count={wanted}")
            device = rt.get_device("local-task")
            _TASK_WORKERS.append(wanted)
            return device
    if _TASK_WORKERS[0] != wanted:
        have = _TASK_WORKERS[0] or "its default number of"
        raise RuntimeModelError(
            f"iree: this process's local-task executor runs {have} threads (IREE creates it once per process); "
            f"{threads or 'the default'} threads need another process"
        )
    return rt.get_device("local-task")


class IreeRunner:
    """An IREE VM context over a ``.vmfb`` written by ``compile_to_dir`` (or an ONNX file compiled in-process)."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None) -> None:
        require("iree.runtime", "iree")
        path = Path(path)
        if path.is_dir():
            artifact, signature = read_engine_dir(path, "iree")
            try:
                vmfb = artifact.read_bytes()
            except OSError as exc:
                raise RuntimeModelError(f"iree cannot read {str(artifact)!r}: {exc.strerror}") from None
            self.describe = f"module {artifact.name}"
        else:
            signature = Signature.of_file(path)
            vmfb = compile_model(onnx.load(str(path)))
            self.describe = "compiled now"
        self.session = IreeSession(vmfb, threads)
        self.describe += f", entry {self.session.entry}"
        self.inputs, self.input_names, self.output_names = (
            signature.inputs, signature.input_names, signature.output_names)

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        outputs = self.session.run([feeds[name] for name in self.input_names])
        return dict(zip(self.output_names, outputs, strict=True))


class IreeSession:
    """A loaded ``.vmfb``: ``run(arrays)`` calls its entry function and returns the outputs as NumPy arrays."""

    def __init__(self, vmfb: bytes, threads: int | None) -> None:
        rt = require("iree.runtime", "iree")
        try:
            config = rt.Config(device=device_for(threads))
            module = rt.VmModule.copy_buffer(config.vm_instance, vmfb)
            context = rt.SystemContext(config=config)
            context.add_vm_module(module)
        except RuntimeModelError:
            raise
        except Exception as exc:
            raise RuntimeModelError(f"iree cannot load the compiled module: {first_line(exc)}") from None
        # the importer's one function, named after the ONNX graph (``__init`` and ``$async`` twins are IREE's)
        exported = [name for name in module.function_names
                    if not name.startswith("__") and not name.endswith("$async")]
        if len(exported) != 1:
            raise RuntimeModelError(f"iree module {module.name!r} exports {exported}, not one entry function")
        self.entry = exported[0]
        self._function = context.modules[module.name][self.entry]

    def run(self, arrays: list[Any]) -> list[np.ndarray]:
        result = self._function(*(np.ascontiguousarray(a) for a in arrays))
        outputs = result if isinstance(result, (list, tuple)) else [result]
        return [np.array(out.to_host(), copy=True) if hasattr(out, "to_host") else np.asarray(out)
                for out in outputs]


def compile_session(model: onnx.ModelProto, threads: int, precision: str) -> engine_base.CompiledModel:
    """``model`` compiled in this process and loaded on ``threads`` threads (the benchmark's session)."""
    input_names = Signature(model.graph).input_names
    started = time.perf_counter()
    vmfb = compile_model(model)
    compile_ms = (time.perf_counter() - started) * 1e3
    session = IreeSession(vmfb, threads)
    return engine_base.CompiledModel(lambda feeds: session.run([feeds[name] for name in input_names]), compile_ms)


ENGINE = engine_base.Engine(
    name="iree", runner=IreeRunner, order=40, framework="onnxruntime", compilers=("iree",),
    pip=("iree-base-compiler", "iree-base-runtime"), extra="iree", modules=("iree.compiler", "iree.runtime"),
    compile=compile_to_dir, benchmark=engine_base.Benchmark(backend="iree", compiler="iree", prepare=compile_session),
)
