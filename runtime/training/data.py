"""Training data plumbing in NumPy only: fitting arrays to a model's inputs, splitting, and ``.npz`` datasets.

(Named datasets such as scikit-learn's digits are loaded outside ``runtime/``, which depends on NumPy and onnx
only.)
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from runtime.ir import Value
from runtime.training.config import TrainingError

Features = np.ndarray | Mapping[str, np.ndarray]


@dataclass
class Dataset:
    """Train and (optional) test arrays."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray | None = None
    y_test: np.ndarray | None = None


def fit_to_input(x: np.ndarray, value: Value, what: str = "data") -> np.ndarray:
    """``x`` reshaped and cast to a model input: per-sample element counts must match (e.g. 64 -> 1x8x8)."""
    arr = np.asarray(x)
    dtype = value.dtype or np.dtype(np.float32)
    shape = value.shape
    if shape is None or len(shape) == 0:
        return arr.astype(dtype, copy=False)
    sample = [d for d in shape[1:] if isinstance(d, int)]
    if len(sample) == len(shape) - 1:
        want = math.prod(sample)
        have = math.prod(arr.shape[1:])
        if have != want:
            raise TrainingError(
                f"{what}: samples have shape {list(arr.shape[1:])} ({have} values) but model input {value.name!r} "
                f"takes {list(sample)} ({want} values)"
            )
        arr = arr.reshape(arr.shape[0], *sample)
    if isinstance(shape[0], int) and shape[0] != arr.shape[0]:
        raise TrainingError(f"{what}: model input {value.name!r} has a fixed batch of {shape[0]}; use that batch size")
    return arr.astype(dtype, copy=False)


def as_feeds(x: Features, inputs: Mapping[str, Value]) -> dict[str, np.ndarray]:
    """One array for a single-input model, or a mapping input name -> array; each fitted to its input."""
    if isinstance(x, Mapping):
        unknown = [k for k in x if k not in inputs]
        missing = [k for k in inputs if k not in x]
        if unknown or missing:
            raise TrainingError(f"data: the model takes inputs {list(inputs)}, got {list(x)}")
        return {k: fit_to_input(v, inputs[k], k) for k, v in x.items()}
    if len(inputs) != 1:
        raise TrainingError(f"data: the model takes {len(inputs)} inputs {list(inputs)}; pass a mapping name -> array")
    ((name, value),) = inputs.items()
    return {name: fit_to_input(np.asarray(x), value)}


def split(x: np.ndarray, y: np.ndarray, test_fraction: float, seed: int = 0) -> Dataset:
    """A seeded random train/test split."""
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = round(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return Dataset(x[train], y[train], x[test], y[test])


def load_npz(path: str | os.PathLike[str], test_fraction: float = 0.2, seed: int = 0) -> Dataset:
    """Arrays ``x_train``/``y_train`` (+ optional ``x_test``/``y_test``), or ``x``/``y`` split here."""
    file = Path(path)
    if not file.is_file():
        raise TrainingError(f"data file {str(file)!r} does not exist")
    try:
        with np.load(file, allow_pickle=False) as data:
            arrays: dict[str, Any] = {k: data[k] for k in data.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise TrainingError(f"data file {str(file)!r} is not a readable .npz: {exc}") from None
    if "x_train" in arrays and "y_train" in arrays:
        return Dataset(arrays["x_train"], arrays["y_train"], arrays.get("x_test"), arrays.get("y_test"))
    if "x" in arrays and "y" in arrays:
        return split(arrays["x"], arrays["y"], test_fraction, seed)
    raise TrainingError(
        f"data file {str(file)!r} needs arrays x_train and y_train (or x and y); it has {sorted(arrays) or 'none'}"
    )


def class_ids(y: np.ndarray) -> np.ndarray:
    """``y`` as int64 class ids (cross-entropy's targets); TrainingError naming the dtype when they are not integers."""
    arr = np.asarray(y)
    if arr.dtype.kind not in "iu":
        raise TrainingError(f"labels must be integer class ids for cross_entropy, got {arr.dtype}")
    return arr.astype(np.int64, copy=False)
