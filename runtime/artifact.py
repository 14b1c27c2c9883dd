"""Compiled artifacts: a directory holding the checked, optimised model and a JSON manifest.

Layout::

    OUT/model.onnx        the graph after function expansion and passes (weights inline, or in
                          model.onnx.data when they exceed ~1 GiB)
    OUT/manifest.json     inputs/outputs (name, dtype, shape), opsets, per-node opsets of expanded function
                          bodies, pass and expansion stats, runtime version

Loading an artifact skips onnx inference and the passes (they ran at compile time) when the manifest's runtime
version matches this runtime and ``model.onnx`` still has the SHA-256 digest the manifest records; otherwise the
model is compiled again from ``model.onnx``. The manifest is verified, not trusted: a digest that does not match
refuses the directory, every field is type-checked (one-line ``RuntimeModelError``), and the runtime's own static
checks run on every load (they are cheap; onnx's inference is what the fast path saves).
"""

from __future__ import annotations

import hashlib
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
    """True for a directory that holds a ``manifest.json`` (as ``save_artifact`` writes): loading it then reads
    and verifies that manifest, so a damaged one is reported as such, not as a missing model file."""
    try:
        return Path(path).is_dir() and (Path(path) / MANIFEST_FILE).is_file()
    except OSError:
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
    manifest["model_sha256"] = file_sha256(model_path)
    (out / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: Highest opset number a manifest may name for a node (anything above is not an opset, but a corrupted file).
MAX_NODE_OPSET = 1000


def _check_manifest_fields(path: str | os.PathLike[str], manifest: dict[str, Any]) -> None:
    """Type-check the fields loading reads; the first bad one is refused naming the field."""

    def bad(field: str, want: str) -> RuntimeModelError:
        value = json.dumps(manifest.get(field), default=str)[:80]
        return RuntimeModelError(f"{path}: {MANIFEST_FILE} field {field!r} must be {want}, got {value}")

    version = manifest.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise bad("format_version", "a positive integer")
    if "runtime_version" in manifest and not isinstance(manifest["runtime_version"], str):
        raise bad("runtime_version", "a string")
    digest = manifest.get("model_sha256")
    if digest is not None and (
        not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest)
    ):
        raise bad("model_sha256", "64 lowercase hex digits")
    opsets = manifest.get("node_opsets", {})
    if not isinstance(opsets, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_NODE_OPSET
        for k, v in opsets.items()
    ):
        raise bad("node_opsets", f"an object of node names to opsets from 1 to {MAX_NODE_OPSET}")
    stats = manifest.get("stats")
    if stats is not None and not isinstance(stats, dict):
        raise bad("stats", "an object")


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        text = (Path(path) / MANIFEST_FILE).read_text(encoding="utf-8")
        manifest = json.loads(text, parse_constant=_refuse_constant)
    except (OSError, ValueError, RecursionError) as exc:
        raise RuntimeModelError(f"{path}: unreadable {MANIFEST_FILE}: {exc}") from None
    if not isinstance(manifest, dict):
        raise RuntimeModelError(f"{path}: {MANIFEST_FILE} must hold a JSON object, not {type(manifest).__name__}")
    if manifest.get("format") != FORMAT:
        shown = json.dumps(manifest.get("format"), default=str)[:80]
        raise RuntimeModelError(f"{path}: not an appopt compiled model (format {shown})")
    _check_manifest_fields(path, manifest)
    if manifest["format_version"] > FORMAT_VERSION:
        raise RuntimeModelError(
            f"{path}: artifact format {manifest['format_version']} is newer than this runtime reads ({FORMAT_VERSION})"
        )
    return manifest


def _refuse_constant(name: str) -> float:
    """JSON has no NaN or Infinity; Python's reader accepts them unless told otherwise."""
    raise ValueError(f"{name} is not JSON")


def load_artifact(path: str | os.PathLike[str], threads: int | None = None) -> Executable:
    """Load a compiled directory; fast path when it was written by this runtime version."""
    from runtime import __version__
    from runtime.executor import CompileOptions, compile_proto
    from runtime.loader import load_model_proto

    manifest = read_manifest(path)
    model_path = Path(path) / MODEL_FILE
    digest = manifest.get("model_sha256")
    try:
        actual = file_sha256(model_path) if digest is not None else None
    except OSError as exc:
        raise RuntimeModelError(f"{path}: cannot read {MODEL_FILE}: {exc.strerror or exc}") from None
    if digest is not None and actual != digest:
        raise RuntimeModelError(
            f"{path}: {MODEL_FILE} does not match the digest in {MANIFEST_FILE} (changed after it was compiled); "
            "compile the model again"
        )
    proto = load_model_proto(model_path)
    # without a digest (an older artifact) nothing says model.onnx is what was checked: compile it in full
    same_runtime = manifest.get("runtime_version") == __version__ and digest is not None
    options = CompileOptions(
        threads=threads,
        passes=[] if same_runtime else None,
        node_opsets=dict(manifest.get("node_opsets", {})),
        prechecked=same_runtime,
    )
    exe = compile_proto(proto, options)
    exe.stats["artifact"] = {"path": str(path), "fast_load": same_runtime, "compiled_stats": manifest.get("stats")}
    return exe
