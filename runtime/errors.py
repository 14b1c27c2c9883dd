"""Errors raised by the runtime; ``runtime`` imports nothing else of appopt, so it has its own base."""

from __future__ import annotations


class RuntimeModelError(Exception):
    """A model the runtime cannot accept: malformed, unsupported, or unsafe. Message names node and op."""


class UnsupportedOpError(RuntimeModelError):
    """No kernel is registered for an op at the model's opset."""


class ModelCheckError(RuntimeModelError):
    """The model fails a static check (cycle, missing input, dtype or shape mismatch, absurd allocation)."""


class KernelError(RuntimeModelError):
    """A kernel failed at run time; the message names the node and op."""
