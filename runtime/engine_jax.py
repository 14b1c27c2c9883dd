"""JAX (XLA) as a runner engine (``--engine jax``): the ONNX graph translated to JAX code of our own, compiled whole by
``jax.jit``, which hands XLA one HLO module per input shape.

Translation (``JaxGraph``): nodes computed only from initializers run once, when the graph is loaded (the model's
parameters, as a JAX model holds them); large float constants are then passed to the jitted function as arguments
(kept on the device), small and integer ones stay NumPy constants, so shape arithmetic (``Shape -> Gather -> Concat
-> Reshape``) runs in NumPy at trace time and every shape XLA sees is static (``runtime.jax_ops``). Every op is
checked against the translator's table before anything is traced: an unsupported one is a ``RuntimeModelError``
naming op and node.

Threads: XLA's CPU client starts one pool of worker threads per process, as many as the CPUs the process may use,
and those threads do the model's work (the calling thread waits); no compile option narrows it (``--xla_cpu_multi_
thread_eigen=false`` left the work on both of a 2-CPU pool's threads). So ``threads=N`` confines the pool's threads
to the first N of the process's CPUs (``pin_pool``: thread affinity, Linux) before the graph compiles or runs.
jax is imported lazily: an image carries it only for this engine's route.

Catalog: compiler ``xla`` over framework ``onnxruntime`` (the route "ONNX model, compiled by XLA"), no library (XLA
generates its own kernels and calls Eigen for convolutions and matrix products); installed by the ``jax`` extra.
There is no build-stage compile: XLA compiles at the first run, for the CPU it runs on. The benchmark backend
``jax-xla`` keeps the cold compile at the declared shapes (batch 1) as ``compile_ms``; another batch size compiles
during the harness's warm-up queries, and more threads than CPUs is a skip with the reason.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from runtime.engine_base import Benchmark, CompiledModel, Engine, Signature, require
from runtime.errors import RuntimeModelError

#: Constants with more elements than this are passed to the compiled function as arguments, not baked into its code.
INLINE_LIMIT = 64
#: Ops never run at load time even when their inputs are constants (their outputs change per call).
NONDETERMINISTIC = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                              "Bernoulli"})


def _jax() -> Any:
    jax = require("jax", "jax")
    from runtime.jax_ops import load_ops

    load_ops()
    return jax


#: The name XLA's CPU client gives its pool threads (Eigen's thread pool, created with the client).
POOL_THREAD_NAME = "tf_XLAEigen"
#: The CPU count the pool is confined to now (one pool per process; None: all the process's CPUs).
_pinned: dict[str, int | None] = {}


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on (XLA sizes its pool by the same mask)."""
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


def check_threads(threads: int | None) -> None:
    """A one-line error when ``threads`` cannot be honoured here."""
    cpus = allowed_cpus()
    if threads is None or threads == len(cpus):
        return
    if threads < 1 or threads > len(cpus):
        raise RuntimeModelError(f"--engine jax: threads must be 1 to {len(cpus)} (the CPUs this process may use), "
                                f"not {threads}")
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeModelError(f"--engine jax: confining XLA's pool to {threads} CPUs needs thread affinity "
                                "(Linux); run with all the process's CPUs")


def pool_tids() -> list[int]:
    """Ids of XLA's pool threads in this process (Linux: by name, from /proc/self/task)."""
    tids = []
    for task in Path("/proc/self/task").glob("*"):
        try:
            if (task / "comm").read_text(encoding="ascii").startswith(POOL_THREAD_NAME):
                tids.append(int(task.name))
        except (OSError, ValueError):  # a thread that ended meanwhile
            continue
    return tids


def pin_pool(threads: int | None) -> None:
    """Confine XLA's pool threads to the first ``threads`` CPUs this process may use (all of them for None); a
    no-op when they already are."""
    if "threads" in _pinned and _pinned["threads"] == threads:
        return
    cpus = allowed_cpus()
    wanted = set(cpus[:threads] if threads else cpus)
    tids = pool_tids()
    if not tids and len(wanted) < len(cpus):
        raise RuntimeModelError(f"--engine jax: found no XLA pool threads (named {POOL_THREAD_NAME}…) to confine to "
                                f"{threads} CPUs")
    for tid in tids:
        try:
            os.sched_setaffinity(tid, wanted)
        except OSError:  # the thread ended meanwhile
            continue
    _pinned["threads"] = threads


class JaxGraph:
    """An ONNX graph as one jitted JAX function; ``run(feeds)`` returns the outputs in graph order as NumPy arrays.

    The first call at each input shape traces and compiles (``compile_ms`` keeps the first one's time).
    """

    def __init__(self, model: onnx.ModelProto, threads: int | None = None) -> None:
        jax = _jax()
        from runtime.jax_ops import OPS, node_of, run_op

        check_threads(threads)
        self._jax = jax
        self._threads = threads
        jax.devices("cpu")  # starts XLA's CPU client, and with it the pool that pin_pool confines
        graph = model.graph
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
        for proto in graph.node:
            if proto.domain not in ("", "ai.onnx"):
                raise RuntimeModelError(f"jax: node {proto.name or '?'} is op {proto.domain}.{proto.op_type}, a "
                                        "custom domain the JAX translator does not run")
            if proto.op_type not in OPS:
                raise RuntimeModelError(f"jax: {proto.op_type} node {proto.name or '?'}: op not supported by the JAX "
                                        "translator")
        constants: dict[str, Any] = {i.name: np.array(numpy_helper.to_array(i)) for i in graph.initializer}
        signature = Signature(graph)
        self.input_names, self.inputs = signature.input_names, signature.inputs
        self.output_names = signature.output_names
        self._declared = [vi.type.tensor_type.elem_type for vi in graph.output]
        self.steps: list[tuple[Any, list[str], list[str]]] = []
        for proto in graph.node:
            node = node_of(proto, opset)
            names = list(proto.input)
            if proto.op_type not in NONDETERMINISTIC and all(n in constants for n in names if n):
                outputs = run_op(node, [constants[n] if n else None for n in names])
                constants.update((o, np.asarray(v)) for o, v in zip(proto.output, outputs, strict=False) if o)
            else:
                self.steps.append((node, names, list(proto.output)))
        self._pack_weights(constants)
        self._run_op = run_op
        self.static = {k: v for k, v in constants.items() if v.size <= INLINE_LIMIT or not _is_float(v)}
        self.params = {k: jax.device_put(v) for k, v in constants.items() if k not in self.static}
        self._compiled: dict[tuple[Any, ...], Any] = {}
        self.compile_ms: float | None = None

    def _pack_weights(self, constants: dict[str, Any]) -> None:
        """Put constant weights in the layouts XLA's kernels read (``runtime.jax_ops.PACKERS``), once; then drop the
        constants no step or output reads any more."""
        from runtime.jax_ops import PACKERS

        for index, (node, names, outputs) in enumerate(self.steps):
            pack = PACKERS.get(node.op_type)
            weight = constants.get(names[1]) if len(names) > 1 and names[1] else None
            packed = pack(node, weight) if pack is not None and weight is not None else None
            if packed is None:
                continue
            tag, value = packed
            key = f"{names[1]}#{tag}#{node.attrs.get('group', 1)}"
            constants.setdefault(key, value)
            node = dataclasses.replace(node, attrs={**node.attrs, "_packed": tag})
            self.steps[index] = (node, [names[0], key, *names[2:]], outputs)
        read = {name for _, names, _ in self.steps for name in names} | set(self.output_names)
        for name in [name for name in constants if name not in read]:
            del constants[name]

    def _forward(self, params: dict[str, Any], *inputs: Any) -> tuple[Any, ...]:
        env: dict[str, Any] = {**self.static, **params}
        env.update(zip(self.input_names, inputs, strict=True))
        for node, names, outputs in self.steps:
            results = self._run_op(node, [env[n] if n else None for n in names])
            env.update((o, v) for o, v in zip(outputs, results, strict=False) if o)
        return tuple(env[name] for name in self.output_names)

    def _executable(self, args: list[np.ndarray]) -> Any:
        key = tuple((a.shape, a.dtype.str) for a in args)
        executable = self._compiled.get(key)
        if executable is None:
            pin_pool(self._threads)
            started = time.perf_counter()
            try:
                executable = self._jax.jit(self._forward).lower(self.params, *args).compile()
            except RuntimeModelError:
                raise
            except Exception as exc:  # XLA's own errors (XlaRuntimeError, shape errors while tracing)
                text = " ".join(str(exc).split())[:300]
                raise RuntimeModelError(f"jax: XLA cannot compile the model: {type(exc).__name__}: {text}") from None
            if self.compile_ms is None:
                self.compile_ms = (time.perf_counter() - started) * 1e3
            self._compiled[key] = executable
        return executable

    def run_list(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        args = [_for_jax(np.asarray(feeds[name])) for name in self.input_names]
        executable = self._executable(args)
        pin_pool(self._threads)  # another graph of this process may have pinned the pool otherwise
        outputs = executable(self.params, *args)
        return [_declared(np.asarray(out), code) for out, code in zip(outputs, self._declared, strict=True)]

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        return dict(zip(self.output_names, self.run_list(feeds), strict=True))


#: Largest input (bytes) the runner makes to compile at load; past it, the first run compiles.
WARMUP_BYTES = 1 << 28


def declared_feeds(signature: Signature, max_bytes: int | None = WARMUP_BYTES) -> dict[str, np.ndarray] | None:
    """Zeros of each input's declared shape and dtype, symbolic dims as 1 (what ``--random`` feeds too); None when
    an input is not a tensor of a known type or is larger than ``max_bytes`` (None: any size) to make just to
    compile."""
    from onnx import helper

    feeds = {}
    for vi in signature.graph_inputs:
        tensor = vi.type.tensor_type
        if not vi.type.HasField("tensor_type") or not tensor.elem_type:
            return None
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tensor.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
        if max_bytes is not None and int(np.prod(shape, dtype=np.float64)) * dtype.itemsize > max_bytes:
            return None
        feeds[vi.name] = np.zeros(shape, dtype=dtype)
    return feeds


def _is_float(value: np.ndarray) -> bool:
    return bool(np.issubdtype(value.dtype, np.floating))


def _for_jax(value: np.ndarray) -> np.ndarray:
    """64-bit inputs as the 32-bit types jax computes in (its x64 mode stays off, as in most JAX programs)."""
    if value.dtype == np.int64:
        return value.astype(np.int32)
    if value.dtype == np.float64:
        return value.astype(np.float32)
    return np.ascontiguousarray(value)


def _declared(value: np.ndarray, code: int) -> np.ndarray:
    """An output in the dtype the model declares (int64 indices come back from jax as int32)."""
    from onnx import helper

    if not code:
        return value
    wanted = np.dtype(helper.tensor_dtype_to_np_dtype(code))
    return value if value.dtype == wanted else value.astype(wanted)


class JaxRunner(JaxGraph):
    """``--engine jax``: an ONNX file translated and jitted in the process (XLA compiles for the CPU it runs on)."""

    def __init__(self, path: str | os.PathLike[str], threads: int | None = None) -> None:
        if os.path.isdir(path):
            raise RuntimeModelError(f"--engine jax runs an ONNX file; {str(path)!r} is a directory (it has no "
                                    "compile step: XLA compiles at the first run, for the CPU it runs on)")
        signature = Signature.of_file(path)  # a one-line error for what is not a model
        super().__init__(onnx.load(str(path)), threads)
        feeds = declared_feeds(signature)
        if feeds is not None:
            self.run_list(feeds)  # compile now, at the declared shapes: loading includes it
        self.describe = f"jax {self._jax.__version__}, XLA CPU, {threads or len(allowed_cpus())} CPUs"


def compile_session(model: onnx.ModelProto, threads: int, precision: str) -> CompiledModel:
    """``model`` translated and compiled at its declared shapes (batch 1) in this process (the benchmark's session)."""
    graph = JaxGraph(model, threads)
    feeds = declared_feeds(Signature(model.graph), max_bytes=None)
    if feeds is not None:
        graph.run_list(feeds)  # the cold compile at the declared shapes
    return CompiledModel(graph.run_list, float(graph.compile_ms or 0.0))


ENGINE = Engine(
    name="jax", runner=JaxRunner, order=60, framework="onnxruntime", compilers=("xla",), pip=("jax", "jaxlib"),
    extra="jax", modules=("jax",),
    benchmark=Benchmark(backend="jax-xla", compiler="xla", prepare=compile_session),
)
