"""`model.mil` types and values -> MIL protobuf (the reverse of `valuetext`), either dialect.

Literals are read against their type: a tensor's nested brackets must match its shape, a
tuple's items its element types, a dictionary's keys and values its key and value types. Values
nested in a tuple, list or dictionary get their type set, as coremltools writes them.
"""

from __future__ import annotations

from typing import Any

from app.language.cursor import Cursor
from app.language.dtypes import DType
from app.language.elements import BY_TEXT, FLOATS, encode_elements, storage_field
from app.language.hexfloat import parse_float
from app.language.lexer import unquote
from app.language.messages import MIL_pb2

D = MIL_pb2
COMPOUND = ("tensor", "list", "tuple", "dict", "state")
_INT64_MAX = (1 << 63) - 1


def starts_value(c: Cursor) -> bool:
    """Whether the cursor is at a typed value (`tensor<...>(`, `int32(`), not a variable name."""
    token = c.token
    if token.kind != "ident":
        return False
    nxt = c.peek()
    if token.text in COMPOUND:
        return nxt.text == "<"
    return token.text in BY_TEXT and nxt.text == "("


def _dtype(c: Cursor) -> int:
    token = c.token
    if token.kind == "ident" and token.text in BY_TEXT:
        c.advance()
        return BY_TEXT[token.text]
    raise c.error("expected a data type")


def _dimension(c: Cursor, dim: MIL_pb2.Dimension) -> None:
    token = c.token
    if c.accept("?"):
        dim.unknown.variadic = False
    elif c.accept("..."):
        dim.unknown.variadic = True
    elif token.kind == "number" and token.text.isdigit():
        size = int(token.text)
        if size > _INT64_MAX:  # the message's field: past it protobuf would raise
            raise c.error(f"dimension {size} is past {_INT64_MAX}")
        c.advance()
        dim.constant.size = size
    else:
        raise c.error("expected a dimension (a size, '?' or '...')")


def parse_type(c: Cursor, vt: MIL_pb2.ValueType | None = None) -> MIL_pb2.ValueType:
    vt = vt if vt is not None else MIL_pb2.ValueType()
    token = c.token
    if token.kind == "ident" and token.text in BY_TEXT:
        c.advance()
        vt.tensorType.dataType = BY_TEXT[token.text]
        vt.tensorType.rank = 0
        return vt
    if c.accept("tensor"):
        c.expect("<")
        t = vt.tensorType
        t.dataType = _dtype(c)
        c.expect(",")
        if c.accept("?"):
            t.rank = -1
        else:
            c.expect("[")
            c.separated("]", lambda: _dimension(c, t.dimensions.add()))
            t.rank = len(t.dimensions)
        c.expect(">")
    elif c.accept("list"):
        c.expect("<")
        parse_type(c, vt.listType.type)
        c.expect(",")
        _dimension(c, vt.listType.length)
        c.expect(">")
    elif c.accept("tuple"):
        c.expect("<")
        vt.tupleType.SetInParent()
        c.separated(">", lambda: parse_type(c, vt.tupleType.types.add()))
    elif c.accept("dict"):
        c.expect("<")
        parse_type(c, vt.dictionaryType.keyType)
        c.expect(",")
        parse_type(c, vt.dictionaryType.valueType)
        c.expect(">")
    elif c.accept("state"):
        c.expect("<")
        parse_type(c, vt.stateType.wrappedType)
        c.expect(">")
    else:
        raise c.error("expected a type")
    return vt


def _element(c: Cursor, code: int) -> Any:
    token = c.token
    if code == D.BOOL:
        if token.text in ("true", "false") and token.kind == "ident":
            c.advance()
            return token.text == "true"
        raise c.error("expected true or false")
    if code == D.STRING:
        if token.kind == "string":
            c.advance()
            return unquote(token.text)
        raise c.error("expected a string")
    if token.kind != "number":
        raise c.error("expected a number")
    c.advance()
    if code in FLOATS:
        return parse_float(token.text)
    try:
        value = int(token.text, 10)
    except ValueError:
        raise c.source.error(f"expected an integer, found {token.text!r}", token.offset) from None
    dtype = DType.from_proto(code)
    if dtype is not None and dtype.is_int:
        lo, hi = dtype.int_range
        if not lo <= value <= hi:  # checked against its type, never wrapped around
            raise c.source.error(f"{value} is outside {dtype.value} [{lo}, {hi}]", token.offset)
    return value


def _nested(c: Cursor, code: int, shape: list[int | None], out: list) -> None:
    if not shape:
        out.append(_element(c, code))
        return
    start = c.token
    c.expect("[")
    items = c.separated("]", lambda: _nested(c, code, shape[1:], out))
    if shape[0] is not None and len(items) != shape[0]:
        raise c.source.error(
            f"expected {shape[0]} items in this dimension, found {len(items)}", start.offset
        )


def _tensor_literal(c: Cursor, t: MIL_pb2.TensorType, target: MIL_pb2.TensorValue) -> None:
    values: list = []
    if t.rank == 0 and not t.dimensions:
        values.append(_element(c, t.dataType))
    elif t.rank < 0:
        _nested(c, t.dataType, [None], values)
    else:
        dims = [
            d.constant.size if d.WhichOneof("dimension") == "constant" else None
            for d in t.dimensions
        ]
        if None in dims:
            _nested(c, t.dataType, [None], values)
        else:
            _nested(c, t.dataType, dims, values)
    if values:
        encode_elements(target, t.dataType, values)
    else:
        _empty_field(target, t.dataType)


def _empty_field(target: MIL_pb2.TensorValue, code: int) -> None:
    """An empty tensor still names its field, as coremltools writes one."""
    getattr(target, storage_field(code)).SetInParent()


def parse_literal(c: Cursor, vt: MIL_pb2.ValueType, value: MIL_pb2.Value) -> None:
    """The bare literal of a value of type `vt` (inside a typed value or a compound)."""
    kind = vt.WhichOneof("type")
    if kind == "tensorType":
        _tensor_literal(c, vt.tensorType, value.immediateValue.tensor)
    elif kind == "tupleType":
        types = vt.tupleType.types
        c.expect("(")
        tup = value.immediateValue.tuple
        tup.SetInParent()

        def item() -> None:
            index = len(tup.values)
            if index >= len(types):
                raise c.error(f"tuple has only {len(types)} items")
            v = tup.values.add()
            v.type.CopyFrom(types[index])
            parse_literal(c, types[index], v)

        c.separated(")", item)
        if len(tup.values) != len(types):
            raise c.error(f"tuple needs {len(types)} items, got {len(tup.values)}")
    elif kind == "listType":
        element_type = vt.listType.type
        c.expect("[")
        lst = value.immediateValue.list
        lst.SetInParent()

        def list_item() -> None:
            v = lst.values.add()
            v.type.CopyFrom(element_type)
            parse_literal(c, element_type, v)

        c.separated("]", list_item)
    elif kind == "dictionaryType":
        d = vt.dictionaryType
        c.expect("{")
        entries = value.immediateValue.dictionary
        entries.SetInParent()

        def pair() -> None:
            c.expect("{")
            kv = entries.values.add()
            kv.key.type.CopyFrom(d.keyType)
            parse_literal(c, d.keyType, kv.key)
            c.expect(",")
            kv.value.type.CopyFrom(d.valueType)
            parse_literal(c, d.valueType, kv.value)
            c.expect("}")

        c.separated("}", pair)
    else:
        raise c.error("a state has no literal value")


def _scalar_of(c: Cursor, code: int) -> Any:
    """`string("x")` or `tensor<string, []>("x")`: a rank-0 value of type `code`."""
    value = parse_value(c)
    t = value.type.tensorType
    if t.dataType != code or t.rank != 0 or not value.HasField("immediateValue"):
        raise c.error("expected a scalar of the right type")
    tensor = value.immediateValue.tensor
    field = tensor.WhichOneof("value")
    return getattr(tensor, field).values[0]


def parse_value(c: Cursor, value: MIL_pb2.Value | None = None) -> MIL_pb2.Value:
    """A typed value: `T(literal)` or `T(BLOBFILE(path = ..., offset = ...))`."""
    value = value if value is not None else MIL_pb2.Value()
    parse_type(c, value.type)
    c.expect("(")
    if c.accept("BLOBFILE"):
        c.expect("(")
        c.expect("path")
        c.expect("=")
        value.blobFileValue.fileName = _scalar_of(c, D.STRING)
        c.expect(",")
        c.expect("offset")
        c.expect("=")
        value.blobFileValue.offset = int(_scalar_of(c, D.UINT64))
        c.expect(")")
    else:
        parse_literal(c, value.type, value)
    c.expect(")")
    return value
