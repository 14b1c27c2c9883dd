"""Optional kernels: an optional is its value (a tensor or a sequence) or ``None`` when empty.

Results are wrapped in a 1-tuple so that a sequence value is not read as several outputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from runtime.kernels.base import Kernel, register


@register
class Optional(Kernel):
    """Wrap the input as an optional; no input gives an empty optional (typed by the ``type`` attribute)."""

    op_type = "Optional"
    since_version = 15

    def compute(self, x: Any = None) -> tuple[Any]:
        return (x,)


@register
class OptionalHasElement(Kernel):
    """Whether the optional holds a value (an absent input counts as empty)."""

    op_type = "OptionalHasElement"
    since_version = 15

    def compute(self, x: Any = None) -> np.ndarray:
        return np.array(x is not None)


@register
class OptionalGetElement(Kernel):
    """The optional's value (a plain tensor or sequence passes through, opset 18); empty is an error."""

    op_type = "OptionalGetElement"
    since_version = 15

    def compute(self, x: Any) -> tuple[Any]:
        if x is None:
            raise ValueError("the optional input is empty")
        return (x,)
