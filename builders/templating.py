"""The Jinja2 environment over the ``templates`` package: layout only, every value already quoted by the builders."""

from __future__ import annotations

from functools import lru_cache
from importlib.resources import files
from typing import Any

import jinja2


def _load(name: str) -> str | None:
    resource = files("templates").joinpath(name)
    return resource.read_text(encoding="utf-8") if resource.is_file() else None


@lru_cache(maxsize=1)
def template_environment() -> jinja2.Environment:
    """Strict (an unset name is an error), no autoescape (these are not HTML), block tags leave no blank lines."""
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_load),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_template(name: str, **values: Any) -> str:
    """Render ``templates/<name>`` with ``values``."""
    return template_environment().get_template(name).render(**values)
