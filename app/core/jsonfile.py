"""The one reading of a JSON file a user hands in (a checkpoint's config.json, its
generation_config.json and shard index, a kit's kit.json, a device-check report, a calibration
rows file): bounded before it is parsed, parsed strictly, then validated into a pydantic model
in strict mode, as a request body is.

    config = read_model(path, ConfigFile, "config.json", field="config")

Limits, each checked before the JSON parser sees a byte, so a hostile file costs neither time
nor memory:
- size: `JsonLimits.max_bytes` (ANE_MAX_JSON_BYTES where settings apply): a file is measured
  before it is read, and never read past the limit;
- containers: at most `max_containers` objects and lists (the `{` and `[` are counted first, a
  C-speed pass; more than that many is refused unparsed, as a safetensors header is);
- nesting: at most `max_depth` levels, found by a scan with the strings taken out, so JSON
  nested 50,000 deep is refused without the parser recursing into it.
Then strict JSON: UTF-8, no NaN or Infinity, no number that overflows to infinity (1e400), no
integer of more digits than Python parses. Then the model, in strict mode: `"32"` is not an
integer and `"yes"` is not a boolean. Every refusal is a `JsonFileError` (a RequestError) whose
field is the caller's `field` plus the key at fault (`config.hidden_size`) and whose message
starts with the file's name.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.core.sizes import DEFAULT_JSON_BYTES
from app.errors import ErrorKind, RequestError

MAX_DEPTH = 32  # a config.json nests 3 levels, a kit.json 5
MAX_CONTAINERS = 1 << 16  # a kit.json of a 126-layer model has about 2,000
SIZE_SETTING = "ANE_MAX_JSON_BYTES"

M = TypeVar("M", bound=BaseModel)

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


@dataclass(frozen=True)
class JsonLimits:
    max_bytes: int = DEFAULT_JSON_BYTES
    max_depth: int = MAX_DEPTH
    max_containers: int = MAX_CONTAINERS


class JsonFileError(RequestError):
    """A JSON file that is refused: its field is the caller's plus the key at fault."""


def _refuse(file: str, field: str, key: str, message: str, **options: Any) -> JsonFileError:
    where = f"{file}: {key}: " if key else f"{file}: "
    return JsonFileError(f"{field}.{key}" if key else field, where + message, **options)


def read_bytes(
    source: str | os.PathLike | bytes, file: str, limits: JsonLimits, field: str
) -> bytes:
    """The file's bytes, measured before they are read: never more than the limit."""
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        if len(data) > limits.max_bytes:
            raise _too_large(file, field, len(data), limits)
        return data
    try:
        with open(source, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > limits.max_bytes:
                raise _too_large(file, field, size, limits)
            data = f.read(limits.max_bytes + 1)
    except OSError as exc:
        raise _refuse(file, field, "", f"cannot be read: {exc.strerror or exc}") from None
    if len(data) > limits.max_bytes:  # it grew while being read
        raise _too_large(file, field, len(data), limits)
    return data


def _too_large(file: str, field: str, size: int, limits: JsonLimits) -> JsonFileError:
    return _refuse(
        file,
        field,
        "",
        f"{size} bytes, over the limit of {limits.max_bytes} for a JSON file ({SIZE_SETTING})",
        kind=ErrorKind.TOO_LARGE,
        title="JSON file too large",
        limit=limits.max_bytes,
        setting=SIZE_SETTING,
    )


def depth_of(data: bytes) -> int:
    """How deep the JSON text nests, its strings left out (they may hold brackets)."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is beyond the range of a float")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(data: bytes, file: str, limits: JsonLimits = JsonLimits(), field: str = "file") -> Any:
    """The JSON value of `data`, the limits checked first."""
    containers = data.count(b"{") + data.count(b"[")
    if containers > limits.max_containers:
        raise _refuse(
            file,
            field,
            "",
            f"{containers} JSON objects and lists, over the limit of {limits.max_containers}",
            kind=ErrorKind.TOO_LARGE,
            title="JSON file too large",
            limit=limits.max_containers,
        )
    depth = depth_of(data)
    if depth > limits.max_depth:
        raise _refuse(
            file,
            field,
            "",
            f"nests {depth} levels deep, over the limit of {limits.max_depth}",
            title="JSON nested too deep",
            limit=limits.max_depth,
        )
    try:
        return json.loads(data.decode("utf-8"), parse_float=_finite, parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise _refuse(file, field, "", f"not UTF-8 text: {exc.reason}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise _refuse(file, field, "", f"not valid JSON: {exc}", title="Malformed JSON") from None


def read_json(
    source: str | os.PathLike | bytes,
    file: str,
    limits: JsonLimits = JsonLimits(),
    field: str = "file",
) -> Any:
    """A JSON file (a path, or its bytes), bounded and parsed strictly."""
    return parse(read_bytes(source, file, limits, field), file, limits, field)


def key_path(loc: tuple[Any, ...]) -> str:
    """A pydantic error location as a key path: ("programs", 0, "layers") -> programs[0].layers;
    the tags pydantic adds for union members and function validators are left out."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and not _is_tag(part):
            out += ("." if out else "") + part
    return out


def _is_tag(part: str) -> bool:
    return part in ("int", "str", "float", "bool", "dict", "list") or part.startswith(
        ("function-", "list[", "dict[", "literal[", "constrained-")
    )


def validate(value: Any, model: type[M], file: str, field: str = "file") -> M:
    """`value` as `model`, in strict mode; the first fault named by its key."""
    try:
        return model.model_validate(value, strict=True)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        key = key_path(first["loc"])
        message = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "missing":
            message = "missing"
        elif first["type"] not in ("value_error", "assertion_error") and " not " not in message:
            message += f", not {_shown(first.get('input'))}"
        raise _refuse(file, field, key, message) from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_model(
    source: str | os.PathLike | bytes,
    model: type[M],
    file: str,
    *,
    field: str = "file",
    limits: JsonLimits = JsonLimits(),
) -> M:
    """A JSON file (a path, or its bytes) read through the limits into `model`."""
    return validate(read_json(source, file, limits, field), model, file, field)
