"""MIL types and values as `model.mil` text (protobuf -> text), in either dialect.

Proven by the goldens: `tensor<fp16, [1, 10]>`, unknown dims as `?`, rank-0 as
`tensor<T, []>` (1.0) or bare `T` (1.3), `list<tensor<int32, [2]>, ?>`, `tuple<...>`,
`dict<K, V>`, immediate tensors nested per dimension (`tensor<fp32, [1, 9]>([[...]])`), values
inside a tuple/list/dict written bare (`("DefaultShapes", {{"x", [1, 266]}})`), dictionary
entries sorted by key, BLOBFILE as `T(BLOBFILE(path = ..., offset = ...))`.
Not seen in any golden, chosen to stay parseable: `state<T>` (the spelling coremltools and
other emitters use), a list of known length as `list<T, 3>`, a variadic unknown dimension as
`...`, an unknown rank as `tensor<T, ?>`, string escapes `\\"` and `\\\\`, an empty dict `{}`.
"""

from __future__ import annotations

from typing import Any

from app.language.dialect import Dialect
from app.language.elements import FLOATS, decode_elements, text_name
from app.language.errors import BadPackageError
from app.language.hexfloat import format_hex
from app.language.messages import MIL_pb2

D = MIL_pb2


def quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dim_text(dim: MIL_pb2.Dimension) -> str:
    if dim.WhichOneof("dimension") == "constant":
        return str(dim.constant.size)
    return "..." if dim.unknown.variadic else "?"


def tensor_type_text(t: MIL_pb2.TensorType, dialect: Dialect, where: str) -> str:
    name = text_name(t.dataType, where)
    if t.rank < 0:
        return f"tensor<{name}, ?>"
    if t.rank == 0 and not t.dimensions:
        return name if dialect.bare_scalars else f"tensor<{name}, []>"
    return f"tensor<{name}, [{', '.join(dim_text(d) for d in t.dimensions)}]>"


# Programs repeat a few types and small values many times: their text is kept, keyed by the
# message's bytes (bounded, so a huge program cannot grow it without limit).
_TYPES: dict[tuple[bytes, bool], str] = {}
_VALUES: dict[tuple[bytes, bool], str] = {}
_CACHE_LIMIT = 8192
_SMALL_VALUE = 256


def _remember(cache: dict, key: tuple[bytes, bool], text: str) -> str:
    if len(cache) < _CACHE_LIMIT:
        cache[key] = text
    return text


def type_text(vt: MIL_pb2.ValueType, dialect: Dialect, where: str = "") -> str:
    key = (vt.SerializeToString(), dialect.bare_scalars)
    text = _TYPES.get(key)
    return text if text is not None else _remember(_TYPES, key, _type_text(vt, dialect, where))


def _type_text(vt: MIL_pb2.ValueType, dialect: Dialect, where: str) -> str:
    kind = vt.WhichOneof("type")
    if kind == "tensorType":
        return tensor_type_text(vt.tensorType, dialect, where)
    if kind == "listType":
        length = vt.listType.length
        size = dim_text(length) if length.WhichOneof("dimension") else "?"
        return f"list<{type_text(vt.listType.type, dialect, where)}, {size}>"
    if kind == "tupleType":
        return f"tuple<{', '.join(type_text(t, dialect, where) for t in vt.tupleType.types)}>"
    if kind == "dictionaryType":
        d = vt.dictionaryType
        return f"dict<{type_text(d.keyType, dialect, where)}, {type_text(d.valueType, dialect, where)}>"
    if kind == "stateType":
        return f"state<{type_text(vt.stateType.wrappedType, dialect, where)}>"
    raise BadPackageError("value type with no kind set", where)


def element_text(code: int, value: Any) -> str:
    if code == D.BOOL:
        return "true" if value else "false"
    if code == D.STRING:
        return quote(value)
    if code in FLOATS:
        return format_hex(float(value))
    return str(int(value))


def _nested(items: list[str], shape: list[int]) -> str:
    if not shape:
        return items[0] if items else ""
    if len(shape) == 1:
        return "[" + ", ".join(items) + "]"
    step = 1
    for n in shape[1:]:
        step *= n
    rows = [_nested(items[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]
    return "[" + ", ".join(rows) + "]"


def tensor_literal(tensor: MIL_pb2.TensorValue, t: MIL_pb2.TensorType, where: str) -> str:
    """The elements of an immediate tensor: bare for rank 0, else nested brackets per dim."""
    shape = [d.constant.size for d in t.dimensions]
    known = all(d.WhichOneof("dimension") == "constant" for d in t.dimensions)
    count = 1
    for n in shape:
        count *= n
    if t.rank == 0 and not t.dimensions:
        count = 1
    values = decode_elements(tensor, t.dataType, count if known else None)
    if not known:
        count = len(values)
    if len(values) < count:
        raise BadPackageError(
            f"immediate tensor holds {len(values)} values, its type needs {count}", where
        )
    items = [element_text(t.dataType, v) for v in values[:count]]
    if t.rank == 0 and not t.dimensions:
        return items[0]
    if not known:
        return "[" + ", ".join(items) + "]"
    return _nested(items, shape)


def _sort_key(key: MIL_pb2.Value) -> tuple:
    if key.HasField("immediateValue") and key.immediateValue.WhichOneof("value") == "tensor":
        t = key.type.tensorType
        values = decode_elements(key.immediateValue.tensor, t.dataType, 1)
        if values:
            return (0, values[0]) if not isinstance(values[0], str) else (1, values[0])
    return (2, "")


def bare_literal(v: MIL_pb2.Value, vt: MIL_pb2.ValueType, dialect: Dialect, where: str) -> str:
    """A value as written inside a tuple, list or dictionary literal (no type prefix)."""
    if v.WhichOneof("value") == "blobFileValue":
        return value_text(v, dialect, where, vt)
    imm = v.immediateValue
    kind = imm.WhichOneof("value")
    if kind == "tensor":
        return tensor_literal(imm.tensor, vt.tensorType, where)
    if kind == "tuple":
        types = list(vt.tupleType.types)
        parts = [
            bare_literal(x, types[i] if i < len(types) else x.type, dialect, where)
            for i, x in enumerate(imm.tuple.values)
        ]
        return "(" + ", ".join(parts) + ")"
    if kind == "list":
        element_type = vt.listType.type
        return (
            "["
            + ", ".join(bare_literal(x, element_type, dialect, where) for x in imm.list.values)
            + "]"
        )
    if kind == "dictionary":
        d = vt.dictionaryType
        pairs = sorted(imm.dictionary.values, key=lambda kv: _sort_key(kv.key))
        entries = [
            "{"
            + bare_literal(kv.key, d.keyType, dialect, where)
            + ", "
            + bare_literal(kv.value, d.valueType, dialect, where)
            + "}"
            for kv in pairs
        ]
        return "{" + ", ".join(entries) + "}"
    raise BadPackageError("value with neither an immediate nor a BLOBFILE payload", where)


def _scalar(code: int, text: str, dialect: Dialect) -> str:
    name = text_name(code)
    return f"{name}({text})" if dialect.bare_scalars else f"tensor<{name}, []>({text})"


def value_text(
    v: MIL_pb2.Value, dialect: Dialect, where: str, vt: MIL_pb2.ValueType | None = None
) -> str:
    """A value with its type, as an argument or attribute: `tensor<int32, [2]>([1, 1])`."""
    if vt is None:
        raw = v.SerializeToString()
        if len(raw) <= _SMALL_VALUE:
            key = (raw, dialect.bare_scalars)
            text = _VALUES.get(key)
            if text is None:
                text = _remember(_VALUES, key, _value_text(v, v.type, dialect, where))
            return text
        return _value_text(v, v.type, dialect, where)
    return _value_text(v, vt, dialect, where)


def _value_text(v: MIL_pb2.Value, vt: MIL_pb2.ValueType, dialect: Dialect, where: str) -> str:
    prefix = type_text(vt, dialect, where)
    if v.WhichOneof("value") == "blobFileValue":
        blob = v.blobFileValue
        path = _scalar(D.STRING, quote(blob.fileName), dialect)
        offset = _scalar(D.UINT64, str(blob.offset), dialect)
        return f"{prefix}(BLOBFILE(path = {path}, offset = {offset}))"
    return f"{prefix}({bare_literal(v, vt, dialect, where)})"
