"""The two `model.mil` dialects Apple's compilers write, and the opset names they print.

`program(1.0)`: rank-0 values are spelled as tensors, `tensor<string, []>("x")`, and the
buildInfo dictionary is `dict<tensor<string, []>, tensor<string, []>>`. `program(1.3)`: bare
scalars, `string("x")`, `int32(3)`, `dict<string, string>`. Which one a compiler writes depends
on the model's specification version (see `profiles.dialect_for`).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.language.targets import ALL_TARGETS

# Proto opset name <-> the name printed in `func main<ios16>`, from the target table.
OPSET_TEXT = {t.opset: t.name for t in ALL_TARGETS.values()}
OPSET_PROTO = {text: proto for proto, text in OPSET_TEXT.items()}


@dataclass(frozen=True)
class Dialect:
    version: str  # the N.M in `program(N.M)`
    bare_scalars: bool  # `string("x")` rather than `tensor<string, []>("x")`


PROGRAM_1_0 = Dialect("1.0", bare_scalars=False)
PROGRAM_1_3 = Dialect("1.3", bare_scalars=True)
DIALECTS = {d.version: d for d in (PROGRAM_1_0, PROGRAM_1_3)}
