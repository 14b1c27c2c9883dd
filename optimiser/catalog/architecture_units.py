"""Named architectures cut into kernel units, so that plans for ``model: {architecture: NAME}`` are priced unit by
unit as an ONNX model's are (the inference unit sums, and training steps whose forward is priced by kernel units).

The units are those of the graph ``runtime.architectures`` builds for the name at the catalog entry's
``input_shape`` (its last dimension: image side or sequence length), one sample, cut by ``analysis.unitgraph``;
they ship in ``data/architecture_units.json`` because building a graph costs seconds a plan should not pay.
Architectures ``runtime.architectures`` does not build have none (their plans price the published FLOPs alone).
Regenerate after changing an architecture's graph or the catalog's input shapes (a test keeps them equal)::

    python -m optimiser.catalog.architecture_units
"""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path

from analysis.units import Unit, decode_units, encode_units
from optimiser.catalog.models import Architecture

UNITS_FILE = Path(__file__).with_name("data") / "architecture_units.json"


@functools.lru_cache(maxsize=2)
def _table(path: Path = UNITS_FILE) -> dict[str, str]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def architecture_units(arch: Architecture) -> tuple[Unit, ...]:
    """The shipped kernel units of one sample through ``arch`` (empty where none were built)."""
    encoded = _table().get(arch.id)
    return tuple(decode_units(encoded)) if encoded else ()


def built_units(arch: Architecture) -> str:
    """``arch``'s units cut from the graph ``runtime.architectures`` builds now (encoded as shipped)."""
    from analysis.unitgraph import graph_units
    from runtime.architectures import build_architecture

    return encode_units(graph_units(build_architecture(arch.id, image_size=arch.input_shape[-1])))


def write(path: Path = UNITS_FILE) -> None:
    from optimiser.catalog import load_catalog
    from runtime.architectures import ARCHITECTURES

    catalog = load_catalog()
    table = {a.id: built_units(a) for a in catalog.architectures.values() if a.id in ARCHITECTURES}
    path.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else UNITS_FILE)
