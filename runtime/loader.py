"""Turn a path, bytes or ``onnx.ModelProto`` into a parsed, self-contained ModelProto.

Parsing errors, external data that escapes the model's directory and unusable opsets become
``RuntimeModelError`` here, before anything else looks at the model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import onnx
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from onnx import external_data_helper, version_converter

from runtime.errors import ModelCheckError, RuntimeModelError, UnsupportedOpError

#: Default-domain opsets below this are converted up with onnx's version converter: before opset 7 many ops
#: had legacy attributes (``consumed_inputs``, ``broadcast``/``axis`` broadcasting) that kernels do not implement.
MIN_NATIVE_OPSET = 7
#: Where the converter takes old models.
CONVERT_TO_OPSET = 7

ModelSource = str | os.PathLike[str] | bytes | onnx.ModelProto


def load_model_proto(source: ModelSource, base_dir: str | os.PathLike[str] | None = None) -> onnx.ModelProto:
    """Parse ``source`` and load its external data (only from inside the model's directory).

    ``base_dir`` is where external data lives for bytes/ModelProto sources (default: no external data allowed).
    """
    if isinstance(source, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(source)
    elif isinstance(source, bytes | bytearray):
        proto = parse_model_bytes(bytes(source), "<bytes>")
    else:
        path = Path(source)
        if not path.is_file():
            raise RuntimeModelError(f"model file {str(path)!r} does not exist")
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise RuntimeModelError(f"model file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
        proto = parse_model_bytes(data, str(path))
        if base_dir is None:
            base_dir = path.resolve().parent
    _validate_envelope(proto)
    load_external_data(proto, Path(base_dir) if base_dir is not None else None)
    return proto


def parse_model_bytes(data: bytes, where: str) -> onnx.ModelProto:
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeWarning, ValueError) as exc:
        raise RuntimeModelError(f"{where}: not a valid ONNX protobuf ({exc})") from None
    return proto


def _validate_envelope(proto: onnx.ModelProto) -> None:
    """Cheap sanity checks that catch garbage that happened to parse as protobuf."""
    if not proto.HasField("graph"):
        raise RuntimeModelError("not a valid ONNX model: it has no graph")
    if proto.ir_version <= 0:
        raise RuntimeModelError("not a valid ONNX model: ir_version is missing")
    if not proto.graph.output:
        raise RuntimeModelError(f"graph {proto.graph.name!r} has no outputs")
    if proto.ir_version >= 3 and not proto.opset_import:
        raise RuntimeModelError("model declares no opset_import")
    _check_strings_and_dims(proto, "model")
    newest = max_default_opset()
    for opset in proto.opset_import:
        if opset.domain not in ("", "ai.onnx"):
            continue
        if opset.version < 1:
            raise UnsupportedOpError(f"model declares ai.onnx opset {opset.version}; opsets start at 1")
        if opset.version > newest:
            raise UnsupportedOpError(
                f"model declares ai.onnx opset {opset.version}; this runtime supports opsets 1 to {newest}"
            )


_DTYPE_FIELDS = frozenset({"elem_type", "data_type"})
_DATA_TYPES = frozenset(onnx.TensorProto.DataType.values())
_STRING = FieldDescriptor.TYPE_STRING
_MESSAGE = FieldDescriptor.TYPE_MESSAGE


def _check_strings_and_dims(message: Message, where: str) -> None:
    """Every string field is text (protobuf hands invalid UTF-8 in onnx's proto2 strings back as bytes), every
    data type one ONNX defines, and every declared dimension non-negative (onnx's C++ shape inference aborts the
    process on a negative one)."""
    dimension = isinstance(message, onnx.TensorShapeProto.Dimension)
    if dimension and message.HasField("dim_value") and message.dim_value < 0:
        raise ModelCheckError(f"{where}: dimension {message.dim_value} is negative")
    for field, value in message.ListFields():
        if field.name in _DTYPE_FIELDS and isinstance(value, int) and value not in _DATA_TYPES:
            raise ModelCheckError(f"{where}: {field.name} {value} is not an ONNX data type")
        repeated = _is_repeated(field)
        if field.type == _STRING:
            for text in value if repeated else (value,):
                if not isinstance(text, str):
                    raise ModelCheckError(f"{where}: field {field.name!r} holds {bytes(text)[:40]!r}, not UTF-8 text")
        elif field.type == _MESSAGE:
            inner = f"{where}.{field.name}"
            for item in value if repeated else (value,):
                name = getattr(item, "name", "")
                _check_strings_and_dims(item, f"{inner}[{name[:60]!r}]" if isinstance(name, str) and name else inner)


def _is_repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf >= 6 (``label`` is gone)
    if flag is not None:
        return bool(flag)
    return bool(field.label == FieldDescriptor.LABEL_REPEATED)


def max_default_opset() -> int:
    """The newest ai.onnx opset this runtime takes: the newest the installed onnx has schemas for (its checker
    and shape inference know nothing later; the kernels cover every op up to it)."""
    return int(onnx.defs.onnx_opset_version())


def _all_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, attribute tensors, subgraphs and function bodies."""
    yield from _graph_tensors(proto.graph)
    for fn in proto.functions:
        for node in fn.node:
            yield from _node_tensors(node)


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for sp in graph.sparse_initializer:
        yield sp.values
        yield sp.indices
    for node in graph.node:
        yield from _node_tensors(node)


def _node_tensors(node: onnx.NodeProto) -> Iterator[onnx.TensorProto]:
    A = onnx.AttributeProto
    for attr in node.attribute:
        if attr.type == A.TENSOR:
            yield attr.t
        elif attr.type == A.TENSORS:
            yield from attr.tensors
        elif attr.type == A.SPARSE_TENSOR:
            yield attr.sparse_tensor.values
            yield attr.sparse_tensor.indices
        elif attr.type == A.GRAPH:
            yield from _graph_tensors(attr.g)
        elif attr.type == A.GRAPHS:
            for g in attr.graphs:
                yield from _graph_tensors(g)


def load_external_data(proto: onnx.ModelProto, base_dir: Path | None) -> None:
    """Read every external tensor into ``raw_data``; refuse locations outside ``base_dir``."""
    for tensor in _all_tensors(proto):
        if not external_data_helper.uses_external_data(tensor):
            continue
        location, offset_field, length_field = external_data_fields(tensor)
        if base_dir is None:
            raise RuntimeModelError(
                f"tensor {tensor.name[:80]!r} uses external data {location[:200]!r}, but the model was not given as "
                "a file path (pass base_dir)"
            )
        try:
            _read_external(tensor, base_dir, location, offset_field, length_field)
        except OSError as exc:
            raise ModelCheckError(
                f"tensor {tensor.name[:80]!r}: cannot read external data {location[:200]!r}: {exc.strerror or exc}"
            ) from None


def _read_external(
    tensor: onnx.TensorProto, base_dir: Path, location: str, offset_field: int | None, length_field: int | None
) -> None:
    """Read ``length`` bytes at ``offset`` of ``base_dir/location`` into ``tensor.raw_data``."""
    data_path = resolve_external_path(base_dir, location, tensor.name)
    size = data_path.stat().st_size
    offset = offset_field or 0
    length = length_field if length_field is not None else size - offset
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelCheckError(
            f"tensor {tensor.name[:80]!r}: external data range [{offset}, {offset + length}) is outside "
            f"{location[:200]!r} ({size} bytes)"
        )
    with open(data_path, "rb") as f:
        f.seek(offset)
        tensor.raw_data = f.read(length)
    tensor.data_location = onnx.TensorProto.DEFAULT
    del tensor.external_data[:]


#: Keys of a tensor's ``external_data`` entries (onnx's ``ExternalDataInfo`` reads the same ones).
EXTERNAL_DATA_KEYS = frozenset({"location", "offset", "length", "checksum", "basepath"})


def external_data_fields(tensor: onnx.TensorProto) -> tuple[str, int | None, int | None]:
    """``location``, ``offset`` and ``length`` of an external tensor, parsed strictly: a location without NUL
    characters, offsets and lengths written as plain non-negative decimal integers (no sign, no spaces)."""
    label = f"tensor {tensor.name[:80]!r}"
    fields: dict[str, str] = {}
    for entry in tensor.external_data:
        if entry.key not in EXTERNAL_DATA_KEYS:
            raise ModelCheckError(f"{label}: unknown external data key {entry.key[:40]!r}")
        if entry.key in fields:
            raise ModelCheckError(f"{label}: external data key {entry.key!r} given twice")
        fields[entry.key] = entry.value
    location = fields.get("location", "")
    if "\x00" in location:
        raise ModelCheckError(f"{label}: external data location contains a NUL character")
    numbers: list[int | None] = []
    for key in ("offset", "length"):
        text = fields.get(key)
        if text is None:
            numbers.append(None)
            continue
        if not text.isascii() or not text.isdigit() or len(text) > 19:
            raise ModelCheckError(f"{label}: external data {key} {text[:40]!r} is not a non-negative integer")
        numbers.append(int(text))
    return location, numbers[0], numbers[1]


def resolve_external_path(base_dir: Path, location: str, tensor_name: str) -> Path:
    """``base_dir / location`` if it stays inside ``base_dir`` (after resolving ``..`` and symlinks)."""
    if "\x00" in location:
        raise ModelCheckError(f"tensor {tensor_name[:80]!r}: external data location contains a NUL character")
    if len(location) > 4096:
        raise ModelCheckError(f"tensor {tensor_name[:80]!r}: external data location is {len(location)} characters long")
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")) or ":" in location[:3]:
        raise ModelCheckError(
            f"tensor {tensor_name!r}: external data location {location!r} must be relative to the model directory"
        )
    root = base_dir.resolve()
    target = (root / location).resolve()
    if target != root and root not in target.parents:
        raise ModelCheckError(
            f"tensor {tensor_name!r}: external data location {location!r} escapes the model directory"
        )
    if not target.is_file():
        raise ModelCheckError(f"tensor {tensor_name!r}: external data file {location!r} not found")
    return target


def default_opset(proto: onnx.ModelProto) -> int:
    for o in proto.opset_import:
        if o.domain in ("", "ai.onnx"):
            return int(o.version)
    return 1


def upgrade_old_opset(proto: onnx.ModelProto, stats: dict[str, object]) -> onnx.ModelProto:
    """Convert models older than ``MIN_NATIVE_OPSET`` with onnx's version converter.

    Kept unconverted when the converter cannot handle the model; kernels registered from opset 1 may still run it.
    """
    version = default_opset(proto)
    if version >= MIN_NATIVE_OPSET or not proto.graph.node:
        return proto
    try:
        converted = version_converter.convert_version(proto, CONVERT_TO_OPSET)
    except Exception as exc:  # the converter raises bare RuntimeError/ValueError/ConvertError
        stats["opset_conversion"] = f"kept opset {version}: converter failed ({type(exc).__name__})"
        return proto
    stats["opset_conversion"] = f"{version} -> {CONVERT_TO_OPSET}"
    return converted


#: Checker complaints about declarations only (the computation is fine); onnxruntime accepts such models too.
_BENIGN_CHECKER_MESSAGES = (
    "Field 'shape' of 'type' is required but missing",
    "Field 'type' of 'value_info' is required but missing",
)


def all_graphs(graph: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    """``graph`` and, depth first, every subgraph its nodes hold (If branches, Loop and Scan bodies)."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_graphs(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from all_graphs(g)


def check_inference_hazards(proto: onnx.ModelProto) -> None:
    """Attributes onnx's shape inference would size its own allocations by, refused before it runs: a Split's
    ``num_outputs`` of 10**9 makes it allocate tens of GB (the spec wants it equal to the node's outputs)."""
    for graph in all_graphs(proto.graph):
        for node in graph.node:
            if node.op_type != "Split" or node.domain not in ("", "ai.onnx"):
                continue
            for attr in node.attribute:
                if attr.name == "num_outputs" and attr.i != len(node.output):
                    raise ModelCheckError(
                        f"node {node.name[:80]!r} (Split): num_outputs {attr.i} differs from its {len(node.output)} "
                        "outputs"
                    )


def validate_proto(proto: onnx.ModelProto) -> None:
    """onnx's structural checker (names, attributes, opset/IR consistency) as ModelCheckError."""
    check_inference_hazards(proto)
    if proto.ByteSize() > (1 << 31) - 1:
        return  # the in-memory checker cannot take a message this large; the runtime's own checks still run
    try:
        try:
            onnx.checker.check_model(proto)
        except onnx.checker.ValidationError as exc:
            if not any(benign in " ".join(str(exc).split()) for benign in _BENIGN_CHECKER_MESSAGES):
                raise
            # the checker stops at its first complaint: check the rest (nodes, attribute types) on a copy whose
            # undeclared types are filled in
            onnx.checker.check_model(_declared_copy(proto))
    except onnx.checker.ValidationError as exc:
        first = " ".join(str(exc).split())
        if any(benign in first for benign in _BENIGN_CHECKER_MESSAGES):
            return
        if "No Op registered for" in first or "No opset import for domain" in first:
            raise UnsupportedOpError(f"unknown op: {first[:400]}") from None
        raise ModelCheckError(f"invalid model: {first[:400]}") from None


def _declared_copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``proto`` whose values without a type get a float tensor type and tensor types without a shape
    an empty one: what the checker insists on, and nothing it reads further (it runs no inference)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    graphs = [copy.graph]
    while graphs:
        graph = graphs.pop()
        for vi in [*graph.input, *graph.output, *graph.value_info]:
            if not vi.HasField("type"):
                vi.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
            if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape"):
                vi.type.tensor_type.shape.SetInParent()
        for node in graph.node:
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    graphs.append(attr.g)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    graphs.extend(attr.graphs)
    return copy
