"""Compiled artifacts: a directory holding the checked, optimised model and a JSON manifest.

Layout::

    OUT/model.onnx        the graph after function expansion and passes (weights inline, or in
                          model.onnx.data when they exceed ~1 GiB)
    OUT/manifest.json     inputs/outputs (name, dtype, shape), opsets, per-node opsets of expanded function
                          bodies, pass and expansion stats, runtime version

Loading an artifact skips onnx inference, the static checks and the passes (they ran at compile time) when the
manifest's runtime version matches this runtime; otherwise the model is compiled again from ``model.onnx``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from runtime.errors import RuntimeModelError
from runtime.ir import elem_type_name

if TYPE_CHECKING:
    from runtime.executor import Executable

FORMAT = "appopt-compiled-model"
FORMAT_VERSION = 1
MODEL_FILE = "model.onnx"
MANIFEST_FILE = "manifest.json"
#: Above this many initializer bytes the weights go to an external data file (protobuf caps a message at 2 GiB).
EXTERNAL_DATA_THRESHOLD = 1 << 30


def is_artifact_dir(path: str | os.PathLike[str]) -> bool:
    """True for a directory written by ``save_artifact``."""
    manifest = Path(path) / MANIFEST_FILE
    if not manifest.is_file():
        return False
    try:
        return json.loads(manifest.read_text()).get("format") == FORMAT
    except (OSError, ValueError):
        return False


def _describe(values: Any) -> list[dict[str, Any]]:
    return [
        {
            "name": v.name,
            "kind": v.kind,
            "dtype": elem_type_name(v.elem_type) if v.kind == "tensor" else None,
            "shape": list(v.shape) if v.shape is not None else None,
        }
        for v in values
    ]


def build_manifest(exe: Executable) -> dict[str, Any]:
    from runtime import __version__

    model = exe.model
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "runtime_version": __version__,
        "onnx_version": onnx.__version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "ir_version": model.ir_version,
        "opsets": model.opsets,
        "inputs": _describe(model.graph.inputs[i] for i, _ in enumerate(model.graph.inputs)),
        "required_inputs": exe.input_names,
        "outputs": _describe(model.graph.outputs),
        "node_opsets": model.node_opset_overrides(),
        "nodes": len(model.graph.nodes),
        "initializers": len(model.graph.initializers),
        "stats": _jsonable(model.stats),
    }


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def save_artifact(exe: Executable, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Write ``exe``'s optimised model and manifest into ``out_dir`` (created; existing files replaced)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RuntimeModelError(f"output {str(out)!r} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    proto = exe.model.to_onnx()
    weights = sum(arr.nbytes for arr in exe.model.graph.initializers.values())
    model_path = out / MODEL_FILE
    data_file = MODEL_FILE + ".data"
    if (out / data_file).exists():
        (out / data_file).unlink()
    if weights > EXTERNAL_DATA_THRESHOLD:
        onnx.save_model(proto, model_path, save_as_external_data=True, location=data_file, size_threshold=1024)
    else:
        onnx.save_model(proto, model_path)
    manifest = build_manifest(exe)
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        manifest: dict[str, Any] = json.loads((Path(path) / MANIFEST_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise RuntimeModelError(f"{path}: unreadable {MANIFEST_FILE}: {exc}") from None
    if manifest.get("format") != FORMAT:
        raise RuntimeModelError(f"{path}: not an appopt compiled model (format {manifest.get('format')!r})")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise RuntimeModelError(
            f"{path}: artifact format {manifest['format_version']} is newer than this runtime reads ({FORMAT_VERSION})"
        )
    return manifest


def load_artifact(path: str | os.PathLike[str], threads: int | None = None) -> Executable:
    """Load a compiled directory; fast path when it was written by this runtime version."""
    from runtime import __version__
    from runtime.executor import CompileOptions, compile_proto
    from runtime.loader import load_model_proto

    manifest = read_manifest(path)
    proto = load_model_proto(Path(path) / MODEL_FILE)
    same_runtime = manifest.get("runtime_version") == __version__
    options = CompileOptions(
        threads=threads,
        passes=[] if same_runtime else None,
        node_opsets={str(k): int(v) for k, v in manifest.get("node_opsets", {}).items()},
        prechecked=same_runtime,
    )
    exe = compile_proto(proto, options)
    exe.stats["artifact"] = {"path": str(path), "fast_load": same_runtime, "compiled_stats": manifest.get("stats")}
    return exe
