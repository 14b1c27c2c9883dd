"""Op tables derived from the traits declared on the registered kernel classes.

The executor, shape checks, constant folding and AMP read these tables; nobody writes them by hand. A kernel joins
a table by setting a trait on its class (``uses_blas = True``, ``amp_class = "fp32"``, see ``Kernel``). An op is in a
table when any of its registered kernels (any domain, any version) declares the trait; readers that care about the
domain check it themselves, as they did with the hand-written tables.

Example::

    from runtime.op_traits import BLAS_OPS
    "MatMul" in BLAS_OPS   # True: runtime.kernels.gemm.MatMul sets uses_blas
"""

from __future__ import annotations

from collections.abc import Callable

from runtime import kernels as _kernels  # noqa: F401  (importing it registers every kernel)
from runtime.kernels.base import REGISTRY, AmpClass, Kernel


def ops_where(trait: Callable[[type[Kernel]], bool]) -> frozenset[str]:
    """The op types with at least one registered kernel for which ``trait(cls)`` holds."""
    return frozenset(op for (_domain, op), versions in REGISTRY.items() if any(trait(c) for c in versions.values()))


def ops_with_amp_class(amp_class: AmpClass) -> frozenset[str]:
    """The op types whose kernels declare ``amp_class``."""
    return ops_where(lambda cls: cls.amp_class == amp_class)


#: Ops whose kernels (or NumPy fallbacks) may call BLAS.
BLAS_OPS = ops_where(lambda cls: cls.uses_blas)
#: Ops that return views of their first input (their result is fixed when that input's buffer is).
VIEW_OPS = ops_where(lambda cls: cls.is_view)
#: Ops whose output size follows input values: guarded against oversized outputs.
SIZE_CREATING_OPS = ops_where(lambda cls: cls.creates_size)
#: Ops never folded: random, or whose value is only meaningful per run.
NEVER_FOLD = ops_where(lambda cls: cls.never_fold)
#: AMP: run in the low type (MXNet FP16_FUNCS).
LOW_PRECISION_OPS = ops_with_amp_class("low")
#: AMP: run in fp32 (MXNet FP32_FUNCS).
FP32_OPS = ops_with_amp_class("fp32")
#: AMP: run in the widest float type among the inputs (MXNet WIDEST_TYPE_CASTS).
WIDEST_TYPE_OPS = ops_with_amp_class("widest")
#: AMP: run in either type, following the input (MXNet FP16_FP32_FUNCS).
EITHER_OPS = ops_with_amp_class("either")
