"""The planner's user errors, on the shared base of :mod:`apperrors` (re-exported: optimiser modules import
``AppoptError`` and ``SpecError`` from here)."""

from __future__ import annotations

from apperrors import MAX_LINE_CHARS, AppoptError, SpecError

__all__ = ["MAX_LINE_CHARS", "AppoptError", "CatalogError", "PlanError", "SpecError"]


class CatalogError(AppoptError):
    """The shipped or user-supplied catalog is inconsistent."""


class PlanError(AppoptError):
    """No route satisfies the spec; ``lines`` says why each one failed."""

    exit_code = 3
