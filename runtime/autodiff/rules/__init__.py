"""Gradient rules, one module per op family; importing this package registers them all."""

from __future__ import annotations

from runtime.autodiff.rules import elementwise, losses, nn, shape

__all__ = ["elementwise", "losses", "nn", "shape"]
