"""The compile pipeline and the compiled model.

``compile_model`` = load -> (old opsets converted) -> (input shapes fixed, if asked) -> shape/dtype inference -> IR
-> function expansion -> static checks -> graph passes (``runtime/passes/pipeline.py``) -> kernels resolved and
built once, with their constant inputs handed to them (``prepare``: weight packing, per-shape algorithm choice).

Example::

    exe = compile_model("model.onnx", threads=2)
    outputs = exe.run({"input": x})            # {output name: array}
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from runtime.check import (
    DEFAULT_MAX_ALLOC_BYTES,
    topological_order,
)
from runtime.errors import KernelError, ModelCheckError, RuntimeModelError
from runtime.functions import expand_graph, local_function_table
from runtime.ir import Model, Value, elem_type_name
from runtime.loader import ModelSource, load_model_proto, upgrade_old_opset, validate_proto
from runtime.plan import Plan
from runtime.profiling import Profile
from runtime.shapes import infer_model
from runtime.steps import CompileOptions, _check_graph, _Shared, has_kernel
from runtime.threads import available_cpus, limit_threads


class Executable:
    """A compiled model: ``run({name: array}) -> {output name: value}``."""

    def __init__(self, model: Model, plan: Plan, options: CompileOptions, stats: dict[str, Any]) -> None:
        self.model = model
        self.plan = plan
        self.options = options
        self.stats = stats
        graph = model.graph
        required = [v for v in graph.inputs if v.name not in graph.initializers]
        #: Inputs the caller must feed (graph inputs not backed by an initializer).
        self.input_names: list[str] = [v.name for v in required]
        #: Graph inputs with an initializer default; they may be fed to override it.
        self.optional_input_names: list[str] = [v.name for v in graph.inputs if v.name in graph.initializers]
        self.output_names: list[str] = graph.output_names
        self.inputs: dict[str, Value] = {v.name: v for v in graph.inputs}
        self.outputs: dict[str, Value] = {v.name: v for v in graph.outputs}
        self.threads = options.threads
        self.threads_applied = "unlimited"

    def run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """Run once. Tensors are NumPy arrays (strings: dtype=object), sequences lists, empty optionals None.

        Failures are ``RuntimeModelError``s (kernel errors name their node); anything else the executor meets is
        reported as an internal error, with the original as its cause."""
        try:
            return self._profiled_run(feeds)
        except RuntimeModelError:
            raise
        except (MemoryError, RecursionError, ValueError, TypeError, KeyError, IndexError, AttributeError,
                ArithmeticError, AssertionError, RuntimeError, OSError, NotImplementedError) as exc:  # fmt: skip
            raise KernelError(f"internal error while running the model: {type(exc).__name__}: {exc}") from exc

    def _profiled_run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        profile = self.plan.shared.profile
        if profile is None:
            return self._run(feeds)
        started = time.perf_counter()
        try:
            return self._run(feeds)
        finally:
            profile.runs += 1
            profile.run_seconds += time.perf_counter() - started

    def _run(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        env = self._check_feeds(feeds)
        plan = self.plan
        if not plan.may_use_blas:
            # the common planned case: only the compiled kernels' pool to set, two foreign calls
            from runtime import native

            lib = native.lib()
            if lib is not None:
                previous = lib.run_begin(self.threads or available_cpus())
                try:
                    values = plan.execute(env)
                finally:
                    lib.run_end(previous)
                self.threads_applied = "not needed"
                return dict(zip(self.output_names, values, strict=True))
        with limit_threads(self.threads, blas=plan.may_use_blas) as how:
            self.threads_applied = how
            values = plan.execute(env)
        return dict(zip(self.output_names, values, strict=True))

    def input_buffers(self, feeds: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The fixed buffers that this thread's runs with ``feeds``' shapes copy their inputs into ({} until such a
        run has been planned). Feeding one of these arrays itself skips its copy: a caller that keeps a value there
        (a trainer's weights, which its optimiser updates in place between runs) saves a copy per run."""
        return self.plan.staged_buffers(feeds)

    @contextlib.contextmanager
    def profiling(self) -> Iterator[Profile]:
        """Record per-node times of the runs made inside the ``with`` block (one caller thread at a time)."""
        shared = self.plan.shared
        previous, shared.profile = shared.profile, Profile()
        try:
            yield shared.profile
        finally:
            shared.profile = previous

    def _check_feeds(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        unknown = [k for k in feeds if k not in self.inputs]
        if unknown:
            raise RuntimeModelError(f"unknown input {unknown[0]!r}; the model takes {self.input_names}")
        missing = [k for k in self.input_names if k not in feeds]
        if missing:
            raise RuntimeModelError(f"missing input {missing[0]!r}; the model takes {self.input_names}")
        env: dict[str, Any] = {}
        for name, value in feeds.items():
            decl = self.inputs[name]
            if decl.kind == "tensor":
                if not isinstance(value, np.ndarray):
                    value = np.asarray(value, dtype=decl.dtype)
                _check_tensor_feed(name, value, decl)
            env[name] = value
        return env


def _check_tensor_feed(name: str, value: np.ndarray, decl: Value) -> None:
    want = decl.dtype
    if want is not None:
        is_text = value.dtype == object or value.dtype.kind in "US"
        ok = is_text if want == np.dtype(object) else value.dtype == want
        if not ok:
            raise RuntimeModelError(f"input {name!r}: expected {elem_type_name(decl.elem_type)}, got {value.dtype}")
    if decl.shape is not None:
        if len(decl.shape) != value.ndim:
            raise RuntimeModelError(
                f"input {name!r}: expected rank {len(decl.shape)} {list(decl.shape)}, got shape {list(value.shape)}"
            )
        for want_dim, got in zip(decl.shape, value.shape, strict=True):
            if isinstance(want_dim, int) and want_dim != got:
                raise RuntimeModelError(f"input {name!r}: expected shape {list(decl.shape)}, got {list(value.shape)}")


def compile_model(
    model: ModelSource,
    threads: int | None = None,
    *,
    passes: Sequence[str] | None = None,
    disable: Sequence[str] = (),
    max_alloc_bytes: int | None = None,
    base_dir: str | None = None,
    layout: str = "auto",
    tune: bool | None = None,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> Executable:
    """Load, check, optimise and prepare ``model`` (path, bytes or ``onnx.ModelProto``) for ``run``.

    ``layout`` picks the convolution layout ("auto": NHWC where the compiled kernels exist), ``tune`` allows
    measuring algorithm alternatives (default: ``APPOPT_TUNING``), ``input_shapes`` fixes input shapes so every
    shape in the graph becomes static (the model then only accepts those shapes).

    Raises ``RuntimeModelError`` (``UnsupportedOpError``/``ModelCheckError``) before any kernel runs when the
    model is malformed, unsafe or uses an op with neither a kernel nor a function body.

    >>> exe = compile_model("model.onnx", threads=2)   # doctest: +SKIP
    >>> exe.run({"input": x})["output"].shape           # doctest: +SKIP
    """
    from runtime.artifact import is_artifact_dir, load_artifact

    if isinstance(model, str | os.PathLike) and is_artifact_dir(model):
        return load_artifact(model, threads=threads)
    options = CompileOptions(
        threads=threads,
        passes=passes,
        disable=tuple(disable),
        max_alloc_bytes=max_alloc_bytes if max_alloc_bytes is not None else DEFAULT_MAX_ALLOC_BYTES,
        base_dir=base_dir,
        layout=layout,
        tune=tune,
        input_shapes=input_shapes,
    )
    if layout not in ("auto", "nhwc", "nchw"):
        raise RuntimeModelError(f"layout must be 'auto', 'nhwc' or 'nchw', not {layout!r}")
    proto = load_model_proto(model, base_dir)
    return compile_proto(proto, options)


def _sort_proto_nodes(proto: onnx.ModelProto, order: list[int] | None) -> None:
    """Put the proto's nodes in topological order (onnx's checker rejects unsorted graphs)."""
    if order is None:
        return
    nodes = [onnx.NodeProto() for _ in order]
    for target, i in zip(nodes, order, strict=True):
        target.CopyFrom(proto.graph.node[i])
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)


def specialise_input_shapes(proto: onnx.ModelProto, shapes: Mapping[str, Sequence[int]]) -> onnx.ModelProto:
    """A copy of ``proto`` whose named inputs have the given fixed shapes (shape inference then propagates them)."""
    proto = _copy(proto)
    by_name = {vi.name: vi for vi in proto.graph.input}
    for name, dims in shapes.items():
        vi = by_name.get(name)
        if vi is None:
            raise RuntimeModelError(f"input_shapes: the model has no input {name!r}; inputs: {list(by_name)}")
        if not vi.type.HasField("tensor_type"):
            raise RuntimeModelError(f"input_shapes: input {name!r} is not a tensor")
        shape = vi.type.tensor_type.shape
        if len(shape.dim) and len(shape.dim) != len(dims):
            raise RuntimeModelError(f"input_shapes: input {name!r} has rank {len(shape.dim)}, got {list(dims)}")
        for i, d in enumerate(dims):
            if i < len(shape.dim) and shape.dim[i].HasField("dim_value") and shape.dim[i].dim_value != int(d):
                raise RuntimeModelError(
                    f"input_shapes: input {name!r} dim {i} is fixed at {shape.dim[i].dim_value}, got {int(d)}"
                )
        shape.ClearField("dim")
        for d in dims:
            shape.dim.add().dim_value = int(d)
    return proto


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    return out


def compile_proto(proto: onnx.ModelProto, options: CompileOptions) -> Executable:
    """Compile an already loaded ModelProto (external data resolved).

    Whatever goes wrong ends in a ``RuntimeModelError``: a failure no check foresaw (a pass or kernel meeting a
    model it does not expect) is reported as an internal error, one line, with the original as its cause.
    """
    try:
        return _compile_proto(proto, options)
    except RuntimeModelError:
        raise
    except (MemoryError, RecursionError, ValueError, TypeError, KeyError, IndexError, AttributeError,
            ArithmeticError, AssertionError, RuntimeError, OSError, NotImplementedError) as exc:  # fmt: skip
        raise ModelCheckError(f"internal error while compiling the model: {type(exc).__name__}: {exc}") from exc


def _compile_proto(proto: onnx.ModelProto, options: CompileOptions) -> Executable:
    started = time.perf_counter()
    stats: dict[str, Any] = {}
    if not options.prechecked:
        proto = upgrade_old_opset(proto, stats)
    if options.input_shapes:
        proto = specialise_input_shapes(proto, options.input_shapes)
    try:
        model = Model.from_onnx(proto)
    except RuntimeModelError:
        raise
    except Exception as exc:  # malformed attribute or tensor payloads
        raise ModelCheckError(f"cannot read the model: {type(exc).__name__}: {exc}") from None
    # Names and order first: cycles, dangling reads and double definitions get the clearest messages here.
    order = topological_order(model.graph)
    if not options.prechecked:
        position = {id(n): i for i, n in enumerate(model.graph.nodes)}
        indices = [position[id(n)] for n in order]
        _sort_proto_nodes(proto, indices if indices != sorted(indices) else None)
        model.graph.nodes = order
        validate_proto(proto)
        model.graph.apply_types(infer_model(proto, stats).graph)
    for name, opset in options.node_opsets.items():
        for node in model.graph.nodes:
            if node.name == name:
                node.opset = opset
    shared = _Shared(options, local_function_table(proto))
    expand_graph(model.graph, shared.functions, has_kernel, shared.expansion)
    _check_graph(model.graph, {}, options)

    from runtime import tuning
    from runtime.passes.pipeline import run_passes

    tune = options.tune if options.tune is not None else tuning.mode() != "off"
    # tuning inside the passes and kernel preparation must measure under the threading a run uses
    with limit_threads(options.threads):
        stats["passes"] = run_passes(
            model, options.passes, options.disable, options.max_alloc_bytes, options.layout, tune
        )
        order = topological_order(model.graph)
        plan = Plan(model.graph, shared, checked_order=order)
    # the memory plan rewrites nothing, so ``passes=[]`` (e.g. a compiled artifact's fast load) keeps it; it is
    # switched off by name only
    if "memory_plan" not in options.disable:
        plan.enable_static()
    stats.update(shared.expansion.as_dict())
    stats["nodes"] = len(plan.steps)
    stats["subgraphs_compiled"] = shared.subgraphs_compiled
    stats["compile_seconds"] = round(time.perf_counter() - started, 4)
    model.stats = stats
    return Executable(model, plan, options, stats)
