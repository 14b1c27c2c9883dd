"""Graph passes over the runtime IR, one module each; ``pipeline.py`` derives their order and runs them."""

from __future__ import annotations

from runtime.passes.pipeline import Pass, PassContext, ordered_passes, pass_names, run_passes

__all__ = ["PIPELINE", "Pass", "PassContext", "ordered_passes", "pass_names", "run_passes"]


def __getattr__(name: str) -> tuple[Pass, ...]:
    """``PIPELINE``: the passes in running order (derived on first use: the pass modules import this package)."""
    if name == "PIPELINE":
        return ordered_passes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
