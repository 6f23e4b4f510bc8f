"""The bounded, checked reading of an ONNX model: its file parsed within a size limit, its opsets,
graph, names and shapes checked before anything is built, its initializers read on demand (by
offset from external data, see app/onnx/tensors.py).

Every refusal is a RequestError naming the file, node or tensor at fault, so the CLI exits 2 and
the service answers 4xx. The file is the protobuf ModelProto of onnx's spec
(https://onnx.ai/onnx/repo-docs/IR.html); protobuf cannot hold a message over 2 GiB, so a larger
model keeps its weights as external data, and a model file over that is not an ONNX model.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx.checker
import onnx.inliner
from google.protobuf.message import DecodeError
from onnx import GraphProto, ModelProto, NodeProto, TensorProto, ValueInfoProto

from app.errors import ErrorKind, RequestError
from app.graphs.spec import dependency_order
from app.onnx.files import MODEL_FIELD, ModelFiles
from app.onnx.tensors import External, element_count, fp16_bytes, read_tensor, stored_dtype
from app.onnx.wire import lean_model

MAX_MODEL_BYTES = (2 << 30) - 1  # protobuf's limit on one message
MAX_NODES = 100_000  # a Whisper-large encoder export has ~4,000
MAX_RANK = 5  # the program's inputs (app/mil/builder.py)
MIN_OPSET = 13  # the opset where Split, Squeeze, Unsqueeze and ReduceSum took their axes as inputs
DEFAULT_DOMAINS = ("", "ai.onnx")
MICROSOFT = "com.microsoft"


@dataclass(frozen=True)
class ReadLimits:
    max_model_bytes: int = MAX_MODEL_BYTES
    max_nodes: int = MAX_NODES
    max_weight_bytes: int | None = None  # the initializers as fp16; None: no limit here


@dataclass(frozen=True)
class GraphInput:
    name: str
    elem_type: int
    dims: tuple[int | str | None, ...]  # a size, a symbolic name, or unknown


@dataclass
class OnnxModel:
    """A checked model: its default-domain opset, inputs, outputs, nodes in a topological order,
    and its initializers (read by `value`)."""

    files: ModelFiles
    proto: ModelProto
    opset: int
    inputs: list[GraphInput]
    outputs: list[str]
    nodes: list[NodeProto]
    initializers: dict[str, TensorProto]
    embedded: dict[str, tuple[int, int]] = field(default_factory=dict)  # raw_data left in the file
    _read: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def graph(self) -> GraphProto:
        return self.proto.graph

    def value(self, name: str) -> np.ndarray:
        """An initializer's values (read once; the proto's copy is dropped as it is read)."""
        if name not in self._read:
            tensor = self.initializers[name]
            where = f"initializers.{name}"
            self._read[name] = read_tensor(tensor, where, self._external(tensor, where))
        return self._read[name]

    def checked(self, name: str, array: np.ndarray) -> bool:
        """Whether `array` is initializer `name` as read: its values were checked then (finite,
        and within fp16's range when read as fp16)."""
        return self._read.get(name) is array

    def _external(self, tensor: TensorProto, where: str) -> External | None:
        if tensor.data_location != TensorProto.EXTERNAL:
            at = self.embedded.get(tensor.name)
            if at is None:
                return None
            return External(self.files.model, self.files.model_path, at[0], at[1])
        info = {e.key: e.value for e in tensor.external_data}
        file, path = self.files.external(info.get("location", ""), tensor.name)
        try:
            offset = int(info.get("offset", 0))
            length = int(info["length"]) if "length" in info else None
        except ValueError:
            raise RequestError(
                where, f"tensor {tensor.name!r}: external-data offset or length is not a number"
            ) from None
        return External(file, path, offset, length)


def read_model(files: ModelFiles, limits: ReadLimits = ReadLimits()) -> OnnxModel:
    """Parse and check the model (not its weights, which `OnnxModel.value` reads as they are
    needed)."""
    proto, embedded = parse_lean(files, limits)
    opset = _opset(proto)
    graph = proto.graph
    if proto.functions:
        proto = _inlined(proto)
        graph = proto.graph
    if len(graph.node) > limits.max_nodes:
        raise RequestError(
            MODEL_FIELD,
            f"{len(graph.node)} nodes, over the limit of {limits.max_nodes}",
            kind=ErrorKind.TOO_LARGE,
            title="Model too large",
            limit=limits.max_nodes,
        )
    initializers = _initializers(graph, limits)
    inputs = [_input(v) for v in graph.input if v.name not in initializers]
    if not inputs:
        raise RequestError(MODEL_FIELD, "the graph has no inputs (every input is an initializer)")
    outputs = [v.name for v in graph.output]
    if not outputs:
        raise RequestError(MODEL_FIELD, "the graph has no outputs")
    nodes = _ordered(graph, {*initializers, *(i.name for i in inputs)}, outputs)
    _check_nodes(graph, proto.ir_version, opset)
    return OnnxModel(files, proto, opset, inputs, outputs, nodes, initializers, embedded)


def parse_model(files: ModelFiles, limits: ReadLimits) -> ModelProto:
    """The model file's protobuf, parsed within the size limit (not yet checked)."""
    return parse_lean(files, limits)[0]


LEAN_MIN_BYTES = 64 << 20  # a model file this large is parsed without its weights' bytes


def parse_lean(
    files: ModelFiles, limits: ReadLimits
) -> tuple[ModelProto, dict[str, tuple[int, int]]]:
    """The model file's protobuf, parsed within the size limit (not yet checked); a large one
    without its initializers' raw_data (app/onnx/wire.py), each one's (offset, length) in the
    file given beside it."""
    name, path = files.model, files.model_path
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise RequestError(MODEL_FIELD, f"cannot read {name!r}: {exc.strerror}") from None
    if size > limits.max_model_bytes:
        raise RequestError(
            MODEL_FIELD,
            f"{name!r} takes {size} bytes, over the limit of {limits.max_model_bytes} for a model "
            "file (keep the weights as external data: torch.onnx.export(..., external_data=True))",
            kind=ErrorKind.TOO_LARGE,
            title="Model too large",
            limit=limits.max_model_bytes,
        )
    handed = _HANDOFF.pop(_file_key(path), None)
    _HANDOFF.clear()
    if handed is not None:
        return handed
    proto = ModelProto()
    lean = lean_model(path, size) if size >= LEAN_MIN_BYTES else None
    raw: dict[str, tuple[int, int]] = {}
    try:
        if lean is not None:
            proto.ParseFromString(lean[0])
            raw = lean[1]
        else:
            proto.ParseFromString(path.read_bytes())
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise RequestError(
            MODEL_FIELD, f"{name!r} is not an ONNX model (its protobuf does not parse: {exc})"
        ) from None
    if proto.ir_version < 3 or not proto.HasField("graph") or not proto.opset_import:
        raise RequestError(
            MODEL_FIELD,
            f"{name!r} is not an ONNX model (no IR version, graph or opset import)",
        )
    return proto, raw


def _opset(proto: ModelProto) -> int:
    newest = onnx.defs.onnx_opset_version()
    opsets = {o.domain: o.version for o in proto.opset_import}
    version = next((opsets[d] for d in DEFAULT_DOMAINS if d in opsets), None)
    if version is None:
        raise RequestError(MODEL_FIELD, "the model imports no version of the ONNX operator set")
    if version > newest:
        raise RequestError(
            MODEL_FIELD,
            f"opset {version} is newer than the {newest} this service's onnx {onnx.__version__} "
            "knows",
        )
    if version < MIN_OPSET:
        raise RequestError(
            MODEL_FIELD,
            f"opset {version} is older than {MIN_OPSET}; export again with opset_version "
            f"{MIN_OPSET} or newer (torch writes 17 or 18 by default)",
        )
    return version


def _inlined(proto: ModelProto) -> ModelProto:
    """Model-local functions (the torch dynamo exporter can write them) inlined into the graph."""
    try:
        return onnx.inliner.inline_local_functions(proto)
    except Exception as exc:  # the inliner's own faults: a malformed function
        raise RequestError(MODEL_FIELD, f"cannot inline the model's functions: {exc}") from None


def _initializers(graph: GraphProto, limits: ReadLimits) -> dict[str, TensorProto]:
    found: dict[str, TensorProto] = {}
    total = 0
    for tensor in graph.initializer:
        where = f"initializers.{tensor.name}"
        if not tensor.name:
            raise RequestError("initializers", "an initializer without a name")
        if tensor.name in found:
            raise RequestError(where, f"two initializers are named {tensor.name!r}")
        element_count(tensor.dims, f"tensor {tensor.name!r}", where)
        stored_dtype(tensor, where)
        total += fp16_bytes(tensor)
        found[tensor.name] = tensor
    if graph.sparse_initializer:
        name = graph.sparse_initializer[0].values.name
        raise RequestError(f"initializers.{name}", "sparse initializers are not supported")
    if limits.max_weight_bytes is not None and total > limits.max_weight_bytes:
        raise RequestError(
            "initializers",
            f"the initializers take {total} bytes in fp16, over the limit of "
            f"{limits.max_weight_bytes} bytes per program",
            kind=ErrorKind.TOO_LARGE,
            title="Model too large",
            limit=limits.max_weight_bytes,
        )
    return found


def _input(value: ValueInfoProto) -> GraphInput:
    where = f"inputs.{value.name}"
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise RequestError(
            where, f"input {value.name!r} is a {kind or 'untyped value'}, not a tensor"
        )
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        raise RequestError(where, f"input {value.name!r} has no shape (not even its rank)")
    dims: list[int | str | None] = []
    for d in tensor.shape.dim:
        which = d.WhichOneof("value")
        dims.append(d.dim_value if which == "dim_value" else d.dim_param if which else None)
    known = [d for d in dims if isinstance(d, int)]
    element_count(known, f"input {value.name!r}", where)
    if not 1 <= len(dims) <= MAX_RANK:
        raise RequestError(
            where, f"input {value.name!r} has rank {len(dims)}; a program input has rank 1 to 5"
        )
    return GraphInput(value.name, tensor.elem_type, tuple(dims))


def node_label(node: NodeProto, index: int) -> str:
    """How errors name a node: its name, else its op type and position."""
    return node.name or f"{node.op_type}#{index}"


def node_field(node: NodeProto, index: int) -> str:
    return f"nodes.{node_label(node, index)}"


def _ordered(graph: GraphProto, given: set[str], outputs: list[str]) -> list[NodeProto]:
    """The nodes in a topological order (the listed order where it is one): every input defined
    once, by a graph input, an initializer or a node; a cycle refused naming its nodes."""
    producer: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            if not out:
                continue
            if out in producer or out in given:
                raise RequestError(
                    node_field(node, i), f"output {out!r} is defined twice (the graph is not SSA)"
                )
            producer[out] = i
    needs: list[set[int]] = []
    for i, node in enumerate(graph.node):
        deps = set()
        for name in _inputs_of(node):
            if name in producer:
                deps.add(producer[name])
            elif name not in given:
                raise RequestError(
                    node_field(node, i),
                    f"{node.op_type} node reads {name!r}, which no input, initializer or node "
                    "defines",
                )
        needs.append(deps)
    for out in outputs:
        if out not in producer and out not in given:
            raise RequestError(f"outputs.{out}", f"graph output {out!r} is defined by no node")
    order, cycle = dependency_order(needs)
    if cycle:
        raise RequestError(
            node_field(graph.node[min(cycle)], min(cycle)),
            "the graph has a cycle: " + " -> ".join(node_label(graph.node[i], i) for i in cycle),
        )
    return [graph.node[i] for i in order]


def _check_nodes(graph: GraphProto, ir_version: int, opset: int) -> None:
    """Each node of the default domain against its operator's schema in the model's opset, by
    onnx's own checker: its number of inputs and outputs, its required attributes, each
    attribute's type, no attribute the operator lacks (onnxruntime refuses such a node too). The
    lowering reads a node's inputs and attributes by position and name trusting this. An op the
    opset does not define, one of another domain, or one holding subgraphs (whose names reach
    into the graph around it) is left to the lowering, which refuses what it cannot translate;
    so is one whose schema onnx marks deprecated (GroupNormalization of opset 18: onnxruntime
    runs it, the checker refuses it)."""
    context = onnx.checker.C.CheckerContext()
    context.ir_version = ir_version
    context.opset_imports = {domain: opset for domain in DEFAULT_DOMAINS}
    scope = onnx.checker.C.LexicalScopeContext()
    for i, node in enumerate(graph.node):
        if (
            node.domain not in DEFAULT_DOMAINS
            or any(a.HasField("g") or a.graphs for a in node.attribute)
            or not onnx.defs.has(node.op_type, opset, "")
            or onnx.defs.get_schema(node.op_type, opset, "").deprecated
        ):
            continue
        try:
            onnx.checker.C.check_node(node.SerializeToString(), context, scope)
        except onnx.checker.ValidationError as exc:
            reason = str(exc).strip().splitlines()[0]
            raise RequestError(
                node_field(node, i), f"{node.op_type} node {node_label(node, i)!r}: {reason}"
            ) from None


def _inputs_of(node: NodeProto) -> Iterator[str]:
    """The values a node reads, those of its subgraphs included (an If's branches)."""
    yield from (name for name in node.input if name)
    for attr in node.attribute:
        for sub in (*([attr.g] if attr.HasField("g") else []), *attr.graphs):
            inner = {v.name for v in sub.input} | {t.name for t in sub.initializer}
            inner |= {o for n in sub.node for o in n.output}
            yield from (n for sub_node in sub.node for n in _inputs_of(sub_node) if n not in inner)


# A model parsed by `local_files(..., keep=True)`, taken by the next `parse_model` of the same
# file (unchanged since): the command line lists a model's files, then imports it, and an
# embedded model's protobuf takes seconds to parse (one entry, dropped by any other parse).
_HANDOFF: dict[tuple[str, int, int], tuple[ModelProto, dict[str, tuple[int, int]]]] = {}


def _file_key(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)


def local_files(model_path: str | Path, *, keep: bool = False) -> dict[str, Path]:
    """The model and the external-data files its tensors name, by their names relative to the
    model's folder (each location checked as `ModelFiles.external` checks it); `keep` hands
    the parsed model to the import that follows in this process."""
    files = ModelFiles.in_folder(model_path)
    parsed = parse_lean(files, ReadLimits())
    proto = parsed[0]
    if keep:
        _HANDOFF[_file_key(files.model_path)] = parsed
    found = {files.model: files.model_path}
    graphs = [proto.graph]
    while graphs:
        graph = graphs.pop()
        tensors = list(graph.initializer)
        for node in graph.node:
            for attr in node.attribute:
                tensors += [attr.t] if attr.HasField("t") else []
                graphs += ([attr.g] if attr.HasField("g") else []) + list(attr.graphs)
        for tensor in tensors:
            if tensor.data_location == TensorProto.EXTERNAL:
                location = next((e.value for e in tensor.external_data if e.key == "location"), "")
                name, path = files.external(location, tensor.name)
                found[name] = path
    return found
