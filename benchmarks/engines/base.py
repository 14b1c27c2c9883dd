"""What every engine shares on the benchmark side: the ``Backend`` interface the harness measures through,
``EngineSpec`` (an engine's catalog ids, install needs, backends and image runner), and ``RuntimeEngineBackend``,
the backend made from an engine module's ``runtime.engine_base.Benchmark`` record.

A ``Backend`` says whether it can run here (``unavailable_reason``), which versions it uses, what route it stands for
in the planner's terms (framework, compiler, library, layout), and ``prepare``s a model into a ``Session`` whose
``run(feeds)`` returns the outputs in graph order. A backend that is not installed, or cannot run a given precision, is
reported as skipped: ``BackendSkipped`` carries the reason.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import onnx

from runtime.engine_base import Engine

#: Precisions a caller may ask for; each backend lists the ones it really runs.
PRECISIONS = ("fp32", "fp16", "bf16", "int8")


class BackendSkipped(Exception):
    """The backend cannot run this request here (not installed, precision unsupported, op unsupported)."""


class Session(Protocol):
    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...


@contextlib.contextmanager
def refusal_is_a_skip() -> Iterator[None]:
    """A model the runtime's engine wrapper refuses (``RuntimeModelError``: cannot import, compile or load it) is a
    skip with the reason, not a failure."""
    from runtime.errors import RuntimeModelError

    try:
        yield
    except RuntimeModelError as error:
        raise BackendSkipped(str(error)) from None


@dataclass(frozen=True)
class RouteInfo:
    """The planner's view of what a backend measures: catalog framework id, compiler, library and layout."""

    framework: str
    compiler: str = "none"
    library: str = ""
    layout: str = "NCHW"


class Backend(ABC):
    """One inference engine."""

    name: str
    route: RouteInfo
    precisions: tuple[str, ...] = ("fp32",)
    #: Compiler backends whose numerics may drift (reduced precision inside, reordered reductions): the runner checks
    #: their outputs against the reference once per session and puts the max abs error in every timing row.
    records_error: bool = False

    @abstractmethod
    def unavailable_reason(self) -> str | None:
        """None when the backend can run here, else why not (shown as "skipped: ...")."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Library name -> version of what this backend runs on."""

    @abstractmethod
    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session: ...

    def prepare(self, model: onnx.ModelProto, *, threads: int = 1, precision: str = "fp32") -> Session:
        """Compile ``model`` for ``threads`` at ``precision``; BackendSkipped if it cannot."""
        reason = self.unavailable_reason()
        if reason:
            raise BackendSkipped(reason)
        if precision not in self.precisions:
            raise BackendSkipped(f"{self.name} runs {', '.join(self.precisions)}, not {precision}")
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        return self._prepare(model, threads, precision)


#: Op types that only convert between a model's NCHW inputs/outputs and a backend's internal layout (ours:
#: NHWC; onnxruntime's level ``all``: blocked NCHWc).
LAYOUT_BOUNDARY_OPS = frozenset({"ToNhwc", "ToNchw", "ReorderInput", "ReorderOutput"})


def boundary_ms(session: Session, feeds: Mapping[str, np.ndarray], runs: int = 10) -> float:
    """Milliseconds per run the session spends at the model's inputs and outputs, by the backend's own profiler:
    converting layouts, and (ours) copying the feeds into its fixed buffers and the outputs out of its reused ones.
    0 when the backend does none of that or cannot profile.

    A one-kernel model pays these once per kernel, a whole model once: a kernel sweep subtracts them.
    """
    probe = getattr(session, "boundary_ms", None)
    return float(probe(feeds, runs)) if probe is not None else 0.0


@dataclass(frozen=True)
class EngineSpec:
    """One engine, as the benchmarks and the catalog tests see it.

    ``framework`` and ``compilers`` are catalog ids (optimiser/catalog/data); ``pip`` the wheels an image or a venv
    needs and ``extra`` the pyproject extra that installs them (None: not a pip extra: a core dependency, or torch's CPU
    wheel, which ``scripts/test`` installs); ``image_engine`` the value of ``python -m runtime run --engine`` an image
    runs it with (None: no image runner); ``backends`` builds the benchmark backends (one per configuration, e.g.
    optimisation level); ``order`` places it in lists. Most come from a runtime engine module's record
    (``benchmarks.engines.from_runtime``); an engine without an image runner (torch.compile) declares its own.
    """

    name: str
    framework: str
    compilers: tuple[str, ...]
    pip: tuple[str, ...]
    extra: str | None
    image_engine: str | None
    backends: Callable[[], list[Backend]]
    order: int = 100


@dataclass(frozen=True)
class EngineBackends:
    """Backends a ``benchmarks.engines`` module adds to the runtime engine called ``engine`` (exported as
    ``BACKENDS``): where the benchmark needs code of its own (onnxruntime's levels and int8, TVM's cached tuning)."""

    engine: str
    backends: Callable[[], list[Backend]]


class RuntimeEngineBackend(Backend):
    """The benchmark backend of a runtime engine module: it runs where the engine's modules import, records the
    versions of its wheels, and prepares a model with the module's in-process compile (a model the engine refuses,
    ``RuntimeModelError``, is a skip with the reason)."""

    def __init__(self, engine: Engine) -> None:
        if engine.benchmark is None:
            raise ValueError(f"engine {engine.name!r} declares no benchmark")
        self.engine = engine
        self.bench = engine.benchmark
        self.name = self.bench.backend
        self.route = RouteInfo(engine.framework, compiler=self.bench.compiler, library=self.bench.library,
                               layout=self.bench.layout)
        self.records_error = self.bench.records_error
        self.precisions = self.bench.precisions()

    def unavailable_reason(self) -> str | None:
        return next((reason for module in self.engine.modules if (reason := missing(module, extra=self.engine.extra))),
                    None)

    def versions(self) -> dict[str, str]:
        return {**{dist: version(dist) for dist in self.engine.pip}, "onnx": onnx.__version__, "numpy": np.__version__}

    def _prepare(self, model: onnx.ModelProto, threads: int, precision: str) -> Session:
        with refusal_is_a_skip():
            session: Session = self.bench.prepare(model, threads, precision)
        return session


def version(dist: str) -> str:
    """The installed version of distribution ``dist``, or "" when it is not installed."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return ""


def missing(module: str, extra: str | None = None) -> str | None:
    """None when ``module`` imports, else why not (naming the extra that installs it)."""
    try:
        importlib.import_module(module)
    except ImportError as error:
        hint = f"; install the {extra!r} extra" if extra else ""
        return f"{module}: extra not installed ({error}){hint}"
    return None
