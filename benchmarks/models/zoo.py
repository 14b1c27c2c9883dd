"""The nine light model-zoo networks shipped inside the onnx wheel (opset 9, weights from ConstantOfShape).

They keep the original graphs' ops and shapes (BatchNormalization, Sum, LRN, Concat…) with constant weights, so they
cost what the real networks cost without a download. Their batch is fixed at 1.
"""

from __future__ import annotations

from pathlib import Path

import onnx

#: File stem -> (suite name, architecture family).
LIGHT_MODELS: dict[str, tuple[str, str]] = {
    "light_bvlc_alexnet": ("zoo_alexnet", "alexnet"),
    "light_zfnet512": ("zoo_zfnet512", "alexnet"),
    "light_densenet121": ("zoo_densenet121", "densenet"),
    "light_inception_v1": ("zoo_inception_v1", "inception"),
    "light_inception_v2": ("zoo_inception_v2", "inception"),
    "light_resnet50": ("zoo_resnet50", "resnet"),
    "light_shufflenet": ("zoo_shufflenet", "shufflenet"),
    "light_squeezenet": ("zoo_squeezenet", "squeezenet"),
    "light_vgg19": ("zoo_vgg19", "vgg"),
}


def light_model_dir() -> Path:
    """Where the onnx wheel keeps its light models."""
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def light_model_path(stem: str) -> Path:
    return light_model_dir() / f"{stem}.onnx"


def load_light_model(stem: str) -> onnx.ModelProto:
    """Load one light model by file stem (e.g. ``light_resnet50``); FileNotFoundError if the wheel lacks it."""
    path = light_model_path(stem)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not in this onnx wheel")
    return onnx.load(str(path))
