"""Export trained weights back into the original ONNX model: same graph, same ops, new initializer values.

The result is an ordinary inference model (BatchNorm in inference mode with the trained running statistics,
Dropout as the identity): it runs unchanged in this runtime and in onnxruntime.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from runtime.atomic import write_atomic
from runtime.training.config import TrainingError


def export_trained(
    proto: onnx.ModelProto, values: Mapping[str, np.ndarray], metadata: Mapping[str, str] | None = None
) -> onnx.ModelProto:
    """A copy of ``proto`` whose initializers named in ``values`` hold the trained arrays (dtype kept)."""
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    seen: set[str] = set()
    for i, init in enumerate(out.graph.initializer):
        if init.name not in values:
            continue
        original = numpy_helper.to_array(init)
        arr = np.asarray(values[init.name])
        if arr.shape != original.shape:
            raise TrainingError(f"trained {init.name!r} has shape {arr.shape}, the model expects {original.shape}")
        out.graph.initializer[i].CopyFrom(numpy_helper.from_array(arr.astype(original.dtype), init.name))
        seen.add(init.name)
    missing = sorted(set(values) - seen)
    if missing:
        raise TrainingError(f"trained value {missing[0]!r} is not an initializer of the model")
    for key, value in (metadata or {}).items():
        for prop in out.metadata_props:
            if prop.key == key:
                prop.value = value
                break
        else:
            out.metadata_props.add(key=key, value=value)
    return out


def save_model_atomic(proto: onnx.ModelProto, path: str | os.PathLike[str]) -> Path:
    """Write ``proto`` to ``path`` through a temporary file and ``os.replace``."""
    return write_atomic(path, lambda f: f.write(proto.SerializeToString()))
