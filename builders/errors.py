"""The builders' one user-facing error: a deployment field that cannot be rendered safely.

Builders never import the optimiser, so this is not an ``AppoptError``; ``optimiser.artifacts`` re-raises it as one
(``AppoptError(*err.lines)``) so the CLI prints it as one line per problem.
"""

from __future__ import annotations


class RenderError(ValueError):
    """One or more deployment fields cannot be rendered; ``lines`` holds ``field: message`` per problem."""

    def __init__(self, *lines: str) -> None:
        self.lines: tuple[str, ...] = lines or ("cannot render the deployment",)
        super().__init__("\n".join(self.lines))
