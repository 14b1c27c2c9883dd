"""The suite's model analyser: what the performance models read of a model, from :mod:`analysis` at batch 1."""

from __future__ import annotations

import functools

import onnx

from analysis.modelinfo import analyse_onnx
from analysis.unitgraph import graph_units
from analysis.units import encode_units
from benchmarks.runner import ModelFeatures


def model_features(model: onnx.ModelProto) -> ModelFeatures:
    """Per-sample FLOPs, activation bytes, parameters, per-class FLOPs and op counts, and the encoded kernel units."""
    cost = analyse_onnx(model, batch_size=1)
    return ModelFeatures(
        flops_per_sample=cost.flops,
        activation_bytes_per_sample=cost.activation_bytes,
        params=float(cost.params),
        flops_by_class={str(k): v.flops for k, v in cost.by_class.items()},
        ops_by_class={str(k): v.count for k, v in cost.by_class.items()},
        units=encode_units(graph_units(model)),
    )


@functools.cache
def training_model(task: str) -> onnx.ModelProto | None:
    """The forward graph a training-suite task's rows describe: its seed-0 module exported as the trainers export it
    (``SharedModel.onnx_bytes``); ``None`` for a name that is not a training task, or when torch is not installed."""
    try:
        from benchmarks.trainers.base import SharedModel
        from benchmarks.training_suite import get_task
    except ImportError:  # torch: the training extra is not installed
        return None
    try:
        spec = get_task(task)
    except KeyError:
        return None
    data = spec.data(0)
    return onnx.load_from_string(SharedModel(spec.build(0), data.x_train[:2]).onnx_bytes())
