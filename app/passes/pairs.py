"""Two ops of one type in a row that are one op of that type (reshapes, transposes): what the
passes that merge them share."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor


def merged_pair(
    edit: Editor, outer: Operation, inner: Operation, param: str, value: list[int], identity: bool
) -> bool:
    """Replace `inner` then `outer` by one op of their type reading inner's input with `param`
    set to `value`, or by nothing when the pair is the `identity`; False when the pair must
    stay (an identity that would make a function input or a const the function's output)."""
    source: Var = inner.var("x")
    if identity:
        if not edit.merge_into(outer, [source]):
            return False
    else:
        const = edit.const(f"{outer.name}_{param}", np.array(value), DType.INT32, outer)
        edit.swap(outer, outer.type, {"x": source, param: const})
    edit.drop(inner)
    return True
