"""Errors raised by the runtime; ``runtime`` imports nothing else of appopt, so it has its own base."""

from __future__ import annotations

#: Longest message an error keeps (a model's names and attribute values can be arbitrarily long).
MAX_MESSAGE_CHARS = 600


def one_line(message: object, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``message`` with every run of whitespace (newlines included) made one space, cut to ``limit`` chars."""
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class RuntimeModelError(Exception):
    """A model the runtime cannot accept: malformed, unsupported, or unsafe. Message names node and op.

    The message is always one line of bounded length: the CLI prints it as ``error: <message>``.
    """

    def __init__(self, message: object = "", *args: object) -> None:
        super().__init__(one_line(message), *args)


class UnsupportedOpError(RuntimeModelError):
    """No kernel is registered for an op at the model's opset."""


class ModelCheckError(RuntimeModelError):
    """The model fails a static check (cycle, missing input, dtype or shape mismatch, absurd allocation)."""


class KernelError(RuntimeModelError):
    """A kernel failed at run time; the message names the node and op."""
