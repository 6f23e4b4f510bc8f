"""The program's input and output names: the ONNX graph's own where they are valid names for the
service (app/core/names.py), else sanitized as coremltools' `sanitize_input_output_names` pass does
(coremltools 9.0, converters/mil/mil/passes/defs/preprocess.py, NameSanitizer): every character
outside [A-Za-z0-9_] becomes `_`, a name not starting with a letter or `_` gets a `_` in front,
and a name MIL reserves as a word (`fp16`, `tensor`, ...) gets `_workaround` after it. Where
coremltools then numbers a collision (`_0`), the service refuses it naming both names: a caller
binding inputs by name must not guess which got the suffix.
"""

from __future__ import annotations

import re

from app.core.names import name_problem
from app.errors import RequestError

_INVALID = re.compile(r"[^A-Za-z0-9_]")
# MIL's reserved words, as coremltools' NameSanitizer lists them
_RESERVED = frozenset(
    [
        "any",
        "bool",
        "program",
        "func",
        "tensor",
        "list",
        "dict",
        "tuple",
        "true",
        "false",
        "string",
        "bf16",
        "fp16",
        "fp32",
        "fp64",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "state",
    ]
)


def sanitized(name: str) -> str:
    out = _INVALID.sub("_", name)
    if not re.match(r"[A-Za-z_]", out):
        out = "_" + out
    if out in _RESERVED:
        out += "_workaround"
    return out


def io_names(inputs: list[str], outputs: list[str]) -> dict[str, str]:
    """ONNX input/output name -> the program's, each a valid service name, no two alike."""
    mapping: dict[str, str] = {}
    taken: dict[str, str] = {}
    for kind, names in (("inputs", inputs), ("outputs", outputs)):
        for name in names:
            if name in mapping:
                continue  # an output that is also an input keeps one name
            new = sanitized(name)
            if (problem := name_problem(new)) is not None:
                raise RequestError(f"{kind}.{name}", f"{name!r}, sanitized as {new!r}: {problem}")
            if new in taken:
                raise RequestError(
                    f"{kind}.{name}",
                    f"{name!r} and {taken[new]!r} both become {new!r} as program names; rename "
                    "one in the model",
                )
            taken[new], mapping[name] = name, new
    return mapping
