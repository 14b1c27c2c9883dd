"""The builders' user errors on the shared base of :mod:`apperrors`: one family per exit code of the commands
that raise them (``appopt build`` 4, ``push`` 5, ``submit``/``status`` 6), so the CLI prints them without a table."""

from __future__ import annotations

from apperrors import AppoptError


class BuildError(AppoptError):
    """No usable engine, or an image or its inputs (deployment, wheelhouse, root) could not be built."""

    exit_code = 4
    default_line = "build failed"


class PushError(AppoptError):
    """The registry refused the push, could not be reached, or the digest read back did not match."""

    exit_code = 5
    default_line = "push failed"


class SchedulerError(AppoptError):
    """Submission or status failed (client missing, script rejected, unknown job); one line per problem."""

    exit_code = 6
    default_line = "scheduler error"


class RenderError(BuildError, ValueError):
    """One or more deployment fields cannot be rendered; ``lines`` holds ``field: message`` per problem.

    ``appopt plan`` and ``validate`` report it with the spec's exit code (2), ``appopt build`` as a build failure.
    """

    default_line = "cannot render the deployment"
