"""Read catalog YAML (the shipped data plus an optional user directory), validate it, and check cross-references.

File format: a YAML mapping whose keys are section names (``frameworks``, ``compilers``, ``libraries``, ``hardware``,
``architectures``), each holding a list of entries with an ``id``. The shipped data has one file per section; a user
directory may hold any ``*.yaml`` files. A user entry with a new id is added; one with a shipped id is merged into the
shipped entry field by field (the user's top-level fields replace the shipped ones, so restate a whole list to change
it).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from optimiser.catalog.models import (
    Architecture,
    Catalog,
    Compiler,
    Framework,
    Hardware,
    Library,
    Section,
    did_you_mean,
)
from optimiser.errors import CatalogError

SECTIONS: tuple[Section, ...] = get_args(Section)
ENTRY_MODELS: dict[Section, type[BaseModel]] = {
    "frameworks": Framework,
    "compilers": Compiler,
    "libraries": Library,
    "hardware": Hardware,
    "architectures": Architecture,
}


class _LineDict(dict[str, Any]):
    """A mapping that remembers the YAML line it started on (for error messages)."""

    line: int = 0


try:  # libyaml's parser when PyYAML was built with it (the wheels are): ~10× faster
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class _LineLoader(_BaseLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        mapping = _LineDict({str(key): value for key, value in super().construct_mapping(node, deep=deep).items()})
        mapping.line = node.start_mark.line + 1
        return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)


#: section -> entry id -> (raw entry, "file:line" it came from)
RawCatalog = dict[Section, dict[str, tuple[dict[str, Any], str]]]


def shipped_data() -> Traversable:
    """The directory of YAML files shipped with the package."""
    return resources.files("optimiser.catalog").joinpath("data")


def _yaml_files(location: Traversable | Path) -> list[Traversable | Path]:
    if location.is_file():
        return [location]
    return sorted((f for f in location.iterdir() if f.name.endswith((".yaml", ".yml"))), key=lambda f: f.name)


def _read_file(file: Traversable | Path, raw: RawCatalog, problems: list[str], *, overlay: bool) -> None:
    label = str(file) if overlay else file.name
    try:
        document = yaml.load(file.read_text(encoding="utf-8"), Loader=_LineLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        problems.append(f"{label}{where}: invalid YAML ({problem})")
        return
    except OSError as error:
        problems.append(f"{label}: cannot read ({error.strerror or error})")
        return
    if document is None:
        return
    if not isinstance(document, dict):
        problems.append(f"{label}: expected a mapping of sections ({', '.join(SECTIONS)})")
        return
    for section_name, entries in document.items():
        if section_name not in SECTIONS:
            problems.append(
                f"{label}: unknown section '{section_name}'{did_you_mean(str(section_name), SECTIONS)}; "
                f"known: {', '.join(SECTIONS)}"
            )
            continue
        section: Section = section_name
        if not isinstance(entries, list):
            problems.append(f"{label}: {section}: expected a list of entries")
            continue
        for position, entry in enumerate(entries):
            where = f"{label}:{getattr(entry, 'line', 0)}"
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not entry["id"]:
                problems.append(f"{where}: {section}[{position}]: every entry needs a string 'id'")
                continue
            entry_id = entry["id"]
            existing = raw[section].get(entry_id)
            if existing is not None and not overlay:
                problems.append(f"{where}: {section}.{entry_id}: duplicate id (first at {existing[1]})")
                continue
            merged = {**existing[0], **entry} if existing is not None else dict(entry)
            raw[section][entry_id] = (merged, where)


def read_raw(locations: Iterable[tuple[Traversable | Path, bool]]) -> tuple[RawCatalog, list[str]]:
    """Raw entries from each (location, is_overlay) in order, and the problems found reading them."""
    raw: RawCatalog = {section: {} for section in SECTIONS}
    problems: list[str] = []
    for location, overlay in locations:
        for file in _yaml_files(location):
            _read_file(file, raw, problems, overlay=overlay)
    return raw, problems


def _validation_lines(error: ValidationError, section: Section, entry_id: str, where: str) -> list[str]:
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        lines.append(f"{where}: {section}.{entry_id}{'.' + path if path else ''}: {item['msg']}")
    return lines


def build_catalog(raw: RawCatalog, problems: list[str] | None = None) -> Catalog:
    """Validate raw entries into a ``Catalog``; every problem (schema or cross-reference) becomes one error line."""
    problems = list(problems or [])
    sections: dict[Section, dict[str, BaseModel]] = {section: {} for section in SECTIONS}
    for section in SECTIONS:
        model = ENTRY_MODELS[section]
        for entry_id, (entry, where) in raw[section].items():
            try:
                sections[section][entry_id] = model.model_validate(dict(entry))
            except ValidationError as error:
                problems.extend(_validation_lines(error, section, entry_id, where))
    if problems:
        raise CatalogError(*problems)
    catalog = Catalog.model_validate({section: sections[section] for section in SECTIONS})
    reference_problems = catalog.reference_problems()
    if reference_problems:
        raise CatalogError(*reference_problems)
    return catalog


def read_catalog(extra: Path | None = None) -> Catalog:
    """The shipped catalog, overlaid with ``extra`` (a directory of YAML files, or one file) when given; uncached."""
    locations: list[tuple[Traversable | Path, bool]] = [(shipped_data(), False)]
    if extra is not None:
        if not extra.exists():
            raise CatalogError(f"{extra}: catalog path not found")
        locations.append((extra, True))
    raw, problems = read_raw(locations)
    return build_catalog(raw, problems)
