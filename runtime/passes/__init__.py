"""Graph passes over the runtime IR; ``pipeline.py`` holds the ordered list and runs it."""

from __future__ import annotations

from runtime.passes.pipeline import PIPELINE, PassContext, pass_names, run_passes

__all__ = ["PIPELINE", "PassContext", "pass_names", "run_passes"]
