"""Write the training suite's models cut into kernel units (``perfmodels.training_units.TRAINING_UNITS``).

The shipped training rows were recorded before rows carried their models' units; the training fit prices them from
this file, keyed by task name. Each task's seed-0 module is exported as the trainers export it
(``benchmarks.features.training_model``) and cut by ``analysis.unitgraph``. Regenerate after changing a suite model::

    python -m benchmarks.training_units
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from analysis.unitgraph import graph_units
from analysis.units import encode_units
from benchmarks.features import training_model
from benchmarks.training_suite import TASK_NAMES
from perfmodels.training_units import TRAINING_UNITS


def suite_units(names: tuple[str, ...] = TASK_NAMES) -> dict[str, str]:
    """Encoded forward units of each named task's model (``analysis.units.encode_units``)."""
    out = {}
    for name in names:
        model = training_model(name)
        if model is None:
            raise RuntimeError(f"{name}: torch: extra not installed (the training suite builds its models in PyTorch)")
        out[name] = encode_units(graph_units(model))
    return out


def write(path: Path = TRAINING_UNITS) -> None:
    path.write_text(json.dumps(suite_units(), indent=0) + "\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else TRAINING_UNITS)
