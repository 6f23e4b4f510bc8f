"""ONNX nodes -> MIL ops through the Builder: the driver and what every op's lowering shares.

Values are either known at import (`np.ndarray`: initializers, Constant nodes, and whatever is
computed from them alone, evaluated at import: app/onnx/fold.py) or computed by the
program (`Var`). A node whose inputs are all known is evaluated and disappears; any other is
lowered by its handler (app/onnx/ops_*.py) onto the IR's existing primitives. Floats are fp16 in
the program, integers int32 (int64 values are range-checked on the way in).

Unsupported nodes are collected, not raised one by one: the error names every one of them (op
type, node, domain, opset), and what each waits on. A node fed by an unsupported one is skipped
(its own support cannot be judged without its inputs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from onnx import NodeProto, helper

from app.errors import ErrorKind, RequestError
from app.kernels.compressed import CompressingBuilder, QuantizedWeight
from app.kernels.weight_check import check_values
from app.mil import Builder, DType, MILBuildError, OpsetError, Var, ops
from app.mil.ceilings import CeilingError
from app.mil.ops import Trait
from app.onnx.fold import evaluate
from app.onnx.names import sanitized
from app.onnx.reader import DEFAULT_DOMAINS, MICROSOFT, OnnxModel, node_field, node_label
from app.onnx.support import MICROSOFT_ADVICE, REFUSED, WAITING
from app.quantize import QuantizeConfig, QuantizeConfigError, check_config

Value = Var | np.ndarray


class Waits(Exception):
    """The node needs a MIL primitive the IR does not have yet (or a value known at import)."""

    def __init__(self, primitive: str):
        self.primitive = primitive


@dataclass
class Node:
    """One node being lowered: its proto, attributes, input values and its outputs' names."""

    proto: NodeProto
    index: int
    inputs: list[Value | None]
    attrs: dict[str, Any]
    out: list[str]  # the program names its outputs get

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def label(self) -> str:
        return node_label(self.proto, self.index)

    @property
    def field(self) -> str:
        return node_field(self.proto, self.index)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, i: int) -> Value | None:
        return self.inputs[i] if i < len(self.inputs) else None

    def given(self, i: int) -> Value:
        """Input `i`, known or computed, which the op cannot do without."""
        value = self.input(i)
        if value is None:
            raise RequestError(self.field, f"{self.op_type} input {i} is missing")
        return value

    def var(self, i: int) -> Var:
        """Input `i` computed from the data, which the op cannot do without (a constant there is
        refused, naming it: the handler lowers the op for a computed value only)."""
        value = self.given(i)
        if not isinstance(value, Var):
            raise RequestError(
                self.field,
                f"{self.op_type} node {self.label!r}: its input {i} ({self.proto.input[i]!r}) is "
                "a constant; the importer lowers this op for a value computed from the data there",
            )
        return value

    def known(self, i: int, what: str, *, waits: str | None = None) -> np.ndarray | None:
        """Input `i` as known at import (None when absent); computed from the data, it waits on
        `waits` or is refused, naming the input."""
        value = self.input(i)
        if value is None or isinstance(value, np.ndarray):
            return value
        if waits is not None:
            raise Waits(waits)
        raise RequestError(
            self.field,
            f"{self.op_type} node {self.label!r}: its {what} ({self.proto.input[i]!r}) is computed "
            "from the data; the importer needs it known at import (fix the input shapes with "
            f"--shape, or export with a constant {what})",
        )

    def axis(self, axis: int, rank: int) -> int:
        """An axis the node names (an attribute or an input), within [-rank, rank) as ONNX
        requires, counted from the front."""
        if not -rank <= axis < rank:
            raise RequestError(
                self.field,
                f"{self.op_type} node {self.label!r}: axis {axis} of a rank-{rank} tensor",
            )
        return axis % rank

    def ints(self, i: int, what: str) -> list[int]:
        """Input `i`, known at import, as integers (an empty list when absent): ONNX gives
        shapes, axes, pads and sizes as int64 tensors, and a tensor of another type there is
        refused naming it."""
        value = self.known(i, what)
        if value is None:
            return []
        if value.dtype.kind not in "iu":
            raise RequestError(
                self.field,
                f"{self.op_type} node {self.label!r}: its {what} ({self.proto.input[i]!r}) holds "
                f"{value.dtype}, not integers",
            )
        return [int(v) for v in value.reshape(-1)]


class Unlowered(Exception):
    """The node's primitive exists, but not for what this node asks (an attribute, a mode):
    refused with the reason, among the other unsupported nodes."""

    def __init__(self, reason: str):
        self.reason = reason


Handler = Callable[["Lowering", Node], Sequence[Value]]


@dataclass
class Unsupported:
    op_type: str
    node: str
    domain: str
    opset: int
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {
            "op_type": self.op_type,
            "node": self.node,
            "domain": self.domain,
            "opset": self.opset,
            "reason": self.reason,
        }

    def line(self) -> str:
        return f"{self.op_type} node {self.node!r} (domain {self.domain}, opset {self.opset}): {self.reason}"


@dataclass
class Lowering:
    model: OnnxModel
    b: Builder
    handlers: dict[str, Handler]
    values: dict[str, Value] = field(default_factory=dict)
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # key -> array (kernel.json)
    consts: dict[str, str] = field(default_factory=dict)  # key -> its const op
    origin: dict[str, str] = field(default_factory=dict)  # MIL op -> ONNX node label
    node: Node | None = None
    reserved: set[str] = field(default_factory=set)  # program names of graph outputs
    made: dict[tuple[int, tuple[int, ...]], tuple[np.ndarray, Var]] = field(
        default_factory=dict
    )  # (initializer, shape) -> its const
    quantize: QuantizeConfig | None = None  # the request's: compresses weight matrices
    quantized: dict[str, QuantizedWeight] = field(default_factory=dict)  # weight key -> it

    # -- names ---------------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        name = self.b.unique(sanitized(base))
        while name in self.reserved:
            name = self.b.unique(name + "_")
        return name

    # -- building ------------------------------------------------------------------------------
    def op(self, op_type: str, name: str | None = None, **args: Any) -> Var:
        """One MIL op for the current node; named `name` (an output's planned name) or afresh.
        Arrays among the arguments become consts (floats fp16, integers int32)."""
        assert self.node is not None
        name = name or self.fresh(f"{self.node.out[0]}_{op_type}")
        keys = {
            id(value): key
            for key, value in zip(self.node.proto.input, self.node.inputs, strict=False)
            if isinstance(value, np.ndarray)
        }
        given = dict(args)
        record = ops.get(op_type)
        if record is not None and record.has(Trait.ELEMENTWISE, Trait.BINARY):
            args = _full_rank(args)
        bound: dict[str, Any] = {
            k: self.tensor(v, keys.get(id(given[k])), given[k]) if isinstance(v, np.ndarray) else v
            for k, v in args.items()
        }
        result = self.b.op(op_type, name, **bound)
        self.origin[name] = self.node.label
        return result

    def ops(self, op_type: str, names: list[str], **args: Any) -> tuple[Var, ...]:
        assert self.node is not None
        name = names[0] if len(names) == 1 else self.fresh(f"{self.node.out[0]}_{op_type}")
        result = self.b.op_outputs(op_type, name, out=names, **args)
        self.origin[name] = self.node.label
        return result

    def weight(self, value: np.ndarray, key: str, channel_axis: int, input_axis: int) -> Var:
        """A weight matrix (a product's or a convolution's, its output channels on
        `channel_axis`): compressed by the request's quantize config when there is one."""
        compress = (
            (channel_axis, input_axis)
            if self.quantize is not None and value.dtype.kind == "f" and value.ndim >= 2
            else None
        )
        return self.tensor(value, key, compress=compress)

    def tensor(
        self,
        value: np.ndarray,
        key: str | None = None,
        origin: np.ndarray | None = None,
        *,
        compress: tuple[int, int] | None = None,
    ) -> Var:
        """A known value as a program constant: floats fp16 (held to its range), integers
        int32 (held to theirs), bools as they are. `key` lists it in kernel.json's weights;
        `origin` is the value `value` reshapes (one const per value and shape); `compress`,
        (channel axis, input axis), compresses it by the request's quantize config."""
        assert self.node is not None
        origin = value if origin is None else origin
        known = self.made.get((id(origin), value.shape))
        if known is not None and known[0] is origin:  # one const per value, however often used
            return known[1]
        array = np.asarray(value)
        where = f"initializers.{key}" if key else self.node.field
        what = (
            f"tensor {key!r}"
            if key
            else f"a constant of {self.node.op_type} node {self.node.label!r}"
        )
        if array.dtype.kind == "f":
            # an initializer read as fp16 was checked as it was read (a pass over every weight)
            if not (array.dtype == np.float16 and key and self.model.checked(key, origin)):
                try:
                    check_values(where, array, DType.FP16)
                except RequestError as exc:
                    raise RequestError(
                        where, f"{what} {exc.message}", title="fp16 overflow"
                    ) from None
            dtype = DType.FP16
        elif array.dtype.kind in "iu":
            if array.size and (int(array.min()) < -(2**31) or int(array.max()) >= 2**31):
                raise RequestError(where, f"{what} holds integers beyond int32")
            dtype, array = DType.INT32, array.astype(np.int32)
        elif array.dtype.kind == "b":
            dtype = DType.BOOL
        else:
            raise RequestError(
                where, f"{what} has dtype {array.dtype}, which a program cannot hold"
            )
        name = self.fresh(f"{key or self.node.out[0]}_const")
        if compress is not None and key is not None and self.quantize is not None:
            self._compress(name, key, array, compress)
        var = self.b.const(name, array, dtype)
        if array.size >= 16:
            weight_key = key or name
            self.weights[weight_key], self.consts[weight_key] = array, name
        if key is not None:
            self.made[(id(origin), value.shape)] = (origin, var)
        return var

    def _compress(self, name: str, key: str, array: np.ndarray, axes: tuple[int, int]) -> None:
        """The const `name` goes in as the constexpr ops `quantize` compresses `key` into."""
        from app.quantize.compress import quantize  # loads coremltools' arithmetic: only here

        assert self.quantize is not None and isinstance(self.b, CompressingBuilder)
        where = f"initializers.{key}"
        try:
            check_config(
                self.quantize,
                array.shape,
                self.b.target,
                channel_axis=axes[0],
                input_axis=axes[1],
                field="quantize",
            )
            compressed = quantize(
                array,
                self.quantize,
                self.b.target,
                channel_axis=axes[0],
                input_axis=axes[1],
                field="quantize",
                weight_field=where,
            )
        except QuantizeConfigError as exc:
            raise RequestError(exc.field, f"tensor {key!r}: {exc.message}") from None
        self.b.compressed[name] = compressed
        self.quantized[key] = QuantizedWeight(self.quantize, compressed)


Pattern = tuple[list[str], Handler]  # the values a pattern reads, and its lowering


def _full_rank(args: dict[str, Any]) -> dict[str, Any]:
    """A constant operand of lower rank than the program value it meets, with leading unit axes
    up to that rank ([C] over [1, S, C] as [1, 1, C]): the same broadcast, and the ANE compiler
    rejects rank-1 broadcast constants (the preflight's broadcast.const-shape)."""
    x, y = args.get("x"), args.get("y")
    for const, other in (("x", y), ("y", x)):
        value = args.get(const)
        if isinstance(value, np.ndarray) and isinstance(other, Var) and value.size > 1:
            missing = other.tensor.rank - value.ndim
            if missing > 0:
                args = {**args, const: value.reshape((1,) * missing + value.shape)}
    return args


def lower(
    lowering: Lowering, outputs: dict[str, str], replaced: dict[int, Pattern], skipped: set[int]
) -> None:
    """Lower every node in order (a pattern's nodes `skipped`, its last one lowered by the
    pattern's handler in `replaced`); raise once, naming every unsupported node."""
    model = lowering.model
    lowering.reserved = set(outputs.values())
    unsupported: list[Unsupported] = []
    poisoned: set[str] = set()
    for index, proto in enumerate(model.nodes):
        if index in skipped:
            continue
        pattern = replaced.get(index)
        reads = pattern[0] if pattern is not None else list(proto.input)
        if any(name in poisoned for name in reads):
            # fed by an unsupported node: judged by its type alone
            if pattern is None and proto.op_type not in lowering.handlers:
                unsupported.append(_refusal(lowering, proto, index))
            poisoned.update(proto.output)
            continue
        problem = _lower_node(lowering, proto, index, outputs, reads, pattern)
        if problem is not None:
            unsupported.append(problem)
            poisoned.update(proto.output)
    if unsupported:
        raise RequestError(
            "nodes",
            f"{len(unsupported)} node(s) cannot be imported: "
            + "; ".join(u.line() for u in unsupported),
            title="Unsupported ONNX ops",
            unsupported=[u.to_json() for u in unsupported],
        )


def _weight_only_qdq(proto: NodeProto, inputs: list[Value | None]) -> bool:
    """A DequantizeLinear of an int8 or uint8 weight: kept compressed in the program
    (constexpr_affine_dequantize, app/onnx/ops_quant.py), not evaluated into fp16."""
    data = inputs[0] if inputs else None
    return (
        proto.op_type == "DequantizeLinear"
        and isinstance(data, np.ndarray)
        and data.dtype in (np.int8, np.uint8)
        and data.size >= 16
        and not any(a.name == "block_size" and a.i for a in proto.attribute)
    )


def _refusal(lowering: Lowering, proto: NodeProto, index: int) -> Unsupported:
    """Why a node of a type no handler lowers is refused."""
    domain = proto.domain or "ai.onnx"
    if proto.domain == MICROSOFT:
        reason = MICROSOFT_ADVICE
    elif proto.domain not in DEFAULT_DOMAINS:
        reason = f"domain {proto.domain!r} is not one the importer knows (only ai.onnx)"
    elif proto.op_type in WAITING:
        reason = f"waits on the MIL primitive {WAITING[proto.op_type]}"
    elif proto.op_type in REFUSED:
        reason = f"refused {REFUSED[proto.op_type]}"
    else:
        reason = "no lowering onto the IR's primitives"
    return Unsupported(
        proto.op_type, node_label(proto, index), domain, lowering.model.opset, reason
    )


def _lower_node(
    lowering: Lowering,
    proto: NodeProto,
    index: int,
    outputs: dict[str, str],
    reads: list[str],
    pattern: Pattern | None,
) -> Unsupported | None:
    model = lowering.model
    domain = proto.domain or "ai.onnx"

    def refused(reason: str) -> Unsupported:
        return Unsupported(proto.op_type, node_label(proto, index), domain, model.opset, reason)

    if proto.domain not in DEFAULT_DOMAINS:
        return _refusal(lowering, proto, index)
    inputs = [lowering.values[name] if name else None for name in reads]
    attrs = {a.name: helper.get_attribute_value(a) for a in proto.attribute}
    names = [
        outputs.get(out) or lowering.fresh(out or f"{proto.op_type}_{index}")
        for out in proto.output
    ]
    node = Node(proto, index, inputs, attrs, names)
    lowering.node = node
    handler = pattern[1] if pattern is not None else lowering.handlers.get(proto.op_type)
    known = [v for v in inputs if not isinstance(v, Var)]  # every one, for a node computed now
    try:
        if (
            pattern is None
            and all(v is None or isinstance(v, np.ndarray) for v in inputs)
            and proto.op_type not in ("Dropout",)
            and not _weight_only_qdq(proto, inputs)
        ):
            results: Sequence[Value] = evaluate(
                proto, known, attrs, model.opset, (node.field, node.label)
            )
        elif handler is None:
            return _refusal(lowering, proto, index)
        else:
            results = handler(lowering, node)
    except Waits as wait:
        return refused(f"waits on the MIL primitive {wait.primitive}")
    except Unlowered as exc:
        return refused(exc.reason)
    except OpsetError as exc:
        raise RequestError(
            "target", f"{proto.op_type} node {node.label!r}: not in the target's opset: {exc}"
        ) from None
    except MILBuildError as exc:
        message = f"{proto.op_type} node {node.label!r}: {exc}"
        if isinstance(exc, CeilingError):
            raise RequestError(
                node.field, message, kind=ErrorKind.TOO_LARGE, title="Tensor too large"
            ) from None
        raise RequestError(node.field, message) from None
    except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as exc:
        # What a handler computes from values the file gives (sizes, axes, attributes) that
        # no check above caught: the node is named, not a traceback given (each such case met
        # has its own check and test: tests/onnx_hostile.py).
        raise RequestError(
            node.field, f"{proto.op_type} node {node.label!r} cannot be imported: {exc}"
        ) from None
    missing = [name for name in proto.output[len(results) :] if name]
    if missing:  # e.g. Dropout's mask: not computed by the program
        return refused(f"its output {missing[0]!r} has no lowering")
    for name, value in zip(proto.output, results, strict=False):
        if name:
            lowering.values[name] = value
    return None
