"""Reverse-mode automatic differentiation over the runtime's IR.

``differentiate`` turns a forward graph into forward + backward in the same IR, so training runs on the same
executor and kernels as inference. One gradient rule per op lives in ``runtime/autodiff/rules`` (registered like
the kernels); backward ops ONNX lacks are kernels of the ``ai.appopt.training`` domain
(``runtime/kernels/grad_*.py``). ``gradcheck`` compares every rule with central finite differences.
"""

from __future__ import annotations

from runtime.autodiff.registry import GRAD_RULES, NO_GRADIENT_OPS, grad_rule, has_rule, rule_for
from runtime.autodiff.reverse import GradientProgram, differentiate

__all__ = [
    "GRAD_RULES",
    "NO_GRADIENT_OPS",
    "GradientProgram",
    "differentiate",
    "grad_rule",
    "has_rule",
    "rule_for",
]
