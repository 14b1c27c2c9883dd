"""Kernel base class and the single op registry.

One class per op (or per opset range of an op). A kernel is built once per node at compile time with the node's
decoded attributes; ``run`` is then called once per execution with NumPy arrays (``None`` for an absent optional
input). Kernels never modify their inputs in place; they may return views.

Example::

    @register
    class Relu(Kernel):
        op_type = "Relu"
        since_version = 6

        def compute(self, x):
            return np.maximum(x, 0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeVar, cast

import numpy as np

from runtime.errors import KernelError, UnsupportedOpError

#: What a compiled subgraph looks like to a kernel (If/Loop/Scan): call with the subgraph's inputs in order
#: (outer-scope values are bound by the executor), get the subgraph's outputs in order.
SubgraphFn = Callable[..., list[Any]]

#: How automatic mixed precision treats an op (``runtime.passes.amp``): run in the low type, keep fp32, follow the
#: widest input type, or follow whatever arrives. ``None``: unknown to AMP, kept in fp32.
AmpClass = Literal["low", "fp32", "widest", "either"]


@dataclass(frozen=True)
class NodeContext:
    """What a kernel may know about its node besides its attributes."""

    name: str
    op_type: str
    domain: str = ""
    opset: int = 21
    n_inputs: int = 1
    n_outputs: int = 1
    #: False where an optional input is given as the empty name.
    input_present: tuple[bool, ...] = ()
    #: False where an optional output is not wanted (empty name).
    output_present: tuple[bool, ...] = ()
    #: Compiles a GraphProto attribute into a callable; provided by the executor for control-flow ops.
    compile_subgraph: Callable[[Any], SubgraphFn] | None = field(default=None, compare=False)


class Kernel:
    """Base class: subclasses set ``op_type``/``since_version`` and implement ``compute``."""

    op_type: ClassVar[str] = ""
    domain: ClassVar[str] = ""
    since_version: ClassVar[int] = 1
    #: Attribute defaults; attributes absent from the node take these values.
    attr_defaults: ClassVar[dict[str, Any]] = {}

    # Traits: what the compiler and the passes need to know about the op. runtime.op_traits derives its tables
    # from them, so a new kernel declares its traits here and joins no side table.
    #: The kernel (or its NumPy fallback) may call BLAS: the executor caps BLAS threads around it.
    uses_blas: ClassVar[bool] = False
    #: Returns a view of its first input: memory-planned execution may skip it once that input is fixed.
    is_view: ClassVar[bool] = False
    #: Output size follows input values (shapes, repeats, ranges): the executor guards against huge outputs.
    creates_size: ClassVar[bool] = False
    #: Never evaluated by constant folding (random, or meaningful only per run).
    never_fold: ClassVar[bool] = False
    #: Mixed-precision class (see ``AmpClass``).
    amp_class: ClassVar[AmpClass | None] = None

    def __init__(self, node: NodeContext, attrs: dict[str, Any]) -> None:
        self.node = node
        self.attrs: dict[str, Any] = {**self.attr_defaults, **attrs}
        self.setup()

    def setup(self) -> None:
        """Precompute whatever depends only on attributes (called once, at compile time)."""

    def compute(self, *inputs: Any) -> Any:
        """Return one output (an array) or a tuple/list of outputs."""
        raise NotImplementedError

    def run(self, *inputs: Any) -> tuple[Any, ...]:
        """Run ``compute`` and normalise to a tuple; errors name the node and op."""
        try:
            out = self.compute(*inputs)
        except KernelError:
            raise
        except Exception as exc:  # a kernel bug or a bad runtime value: say where it happened
            raise KernelError(f"node {self.node.name!r} ({self.node.op_type}): {type(exc).__name__}: {exc}") from exc
        if isinstance(out, tuple | list):
            return tuple(out)
        return (out,)

    def attr(self, name: str) -> Any:
        return self.attrs.get(name)


class IntoKernel(Kernel):
    """A kernel whose work is ``compute_into(out, *inputs)``: it writes its one output into ``out`` (a buffer of the
    memory-planned run) or, given ``None``, into a new array; ``compute`` is that call without a buffer."""

    def compute(self, *inputs: Any) -> Any:
        return self.compute_into(None, *inputs)

    def compute_into(self, out: np.ndarray | None, *inputs: Any) -> Any:
        """The output, written into ``out`` where one is given (the static plan's buffer for this node)."""
        raise NotImplementedError


def store_into(out: np.ndarray | None, y: np.ndarray) -> np.ndarray:
    """``y`` itself, or copied into the planned buffer ``out``."""
    if out is None:
        return y
    np.copyto(out, y)
    return out


_Key = tuple[str, str]
REGISTRY: dict[_Key, dict[int, type[Kernel]]] = {}
_ALIASES = {"ai.onnx": ""}


def _norm_domain(domain: str) -> str:
    return _ALIASES.get(domain, domain)


def register(cls: type[Kernel]) -> type[Kernel]:
    """Class decorator: add ``cls`` under its ``(domain, op_type)`` and ``since_version``."""
    if not cls.op_type:
        raise TypeError(f"{cls.__name__} has no op_type")
    versions = REGISTRY.setdefault((_norm_domain(cls.domain), cls.op_type), {})
    if cls.since_version in versions and versions[cls.since_version] is not cls:
        raise TypeError(f"{cls.op_type} v{cls.since_version} registered twice: {versions[cls.since_version]}, {cls}")
    versions[cls.since_version] = cls
    return cls


K = TypeVar("K", bound=Kernel)


def define_kernel(
    base: type[K], op_type: str, fn: Callable[..., Any] | None = None, doc: str = "", name: str = "", **traits: Any
) -> type[K]:
    """Register one kernel of a table-driven family: a subclass of ``base`` that differs from its siblings only in
    ``fn`` (the function its ``compute`` applies) and class attributes (``since_version``, ``amp_class``…).

    Assign it to a module-level name equal to its class name, ``name`` or else ``op_type`` (pickled kernels find
    their class by that name)::

        Abs = define_kernel(_Unary, "Abs", np.abs, amp_class="either")
    """
    unknown = [name for name in traits if not hasattr(base, name)]
    if unknown:
        raise TypeError(f"{op_type}: {base.__name__} has no attribute {', '.join(unknown)}")
    name = name or op_type
    namespace: dict[str, Any] = {"op_type": op_type, "__module__": base.__module__, "__qualname__": name, **traits}
    if fn is not None:
        namespace["fn"] = staticmethod(fn)
    namespace["__doc__"] = doc or base.__doc__
    return cast(type[K], register(type(name, (base,), namespace)))


def define_legacy(legacy: type[Kernel], current: type[K], since_version: int = 1) -> type[K]:
    """Register ``<current>Legacy``: ``current`` with the older opsets' behaviour that ``legacy`` adds (e.g. the
    opset 1–6 ``broadcast``/``axis`` attributes), from ``since_version``."""
    name = f"{current.__name__}Legacy"
    namespace = {"since_version": since_version, "__module__": current.__module__, "__qualname__": name}
    return cast(type[K], register(type(name, (legacy, current), namespace)))


def resolve(op_type: str, domain: str = "", opset: int = 10_000) -> type[Kernel]:
    """The kernel for ``op_type`` with the highest ``since_version`` not above ``opset``."""
    versions = REGISTRY.get((_norm_domain(domain), op_type))
    if not versions:
        raise UnsupportedOpError(f"op {op_type!r} (domain {domain or 'ai.onnx'!r}) has no kernel")
    usable = [v for v in versions if v <= opset]
    if not usable:
        raise UnsupportedOpError(
            f"op {op_type!r} at opset {opset} has no kernel (kernels exist from opset {min(versions)})"
        )
    return versions[max(usable)]


def supported_ops() -> dict[str, list[int]]:
    """``{op_type: [since_version, ...]}`` for every registered kernel (domain-qualified for non-default)."""
    out: dict[str, list[int]] = {}
    for (domain, op), versions in sorted(REGISTRY.items()):
        out[f"{domain}.{op}" if domain else op] = sorted(versions)
    return out


def as_array(x: Any, dtype: np.dtype[Any] | None = None) -> np.ndarray:
    """np.asarray that keeps 0-d results as arrays (NumPy scalars would lose the dtype contract)."""
    return np.asarray(x, dtype=dtype)
