"""Which consts are written inside the constexpr ops that use them, for both emitters.

coremltools writes a constexpr op's const arguments as values in the op itself (in its attribute
block for the iOS16 declarations, bound to its inputs for the iOS18 ones) and drops a const op
whose every use is such an argument (`backend/mil/load.py`, `feeds_to_only_constexprs`). Apple's
compiler output spells them the same way (the silero-vad goldens, `apple-mil-text/`). In the IR
those values stay ordinary const ops, so the builder, the executor and the weight planner treat
them like any other const; only the spelling differs.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.language.targets import Target
from app.mil.ir import Function, Operation, Var
from app.mil.ops import lookup


def form(op: Operation, target: Target) -> str:
    """ "refs", "inline" or "attributes" (see `Form.spelling`)."""
    declared = lookup(op.type, target)
    return declared.spelling if declared is not None else "refs"


def is_inline_value(var: Var) -> bool:
    """An argument of a constexpr op that is written as a value (produced by a const op)."""
    return var.op is not None and var.op.type == "const"


@dataclass(frozen=True)
class InlinePlan:
    """Per function: the const ops that get no statement of their own."""

    folded: frozenset[str]

    @classmethod
    def of(cls, fn: Function, target: Target) -> InlinePlan:
        inline_uses: dict[str, int] = {}
        other_uses: set[str] = {v.name for v in fn.outputs}
        for op in fn.operations:
            inlines = form(op, target) != "refs"
            for value in op.inputs.values():
                for var in value if isinstance(value, tuple) else (value,):
                    if inlines and is_inline_value(var):
                        inline_uses[var.name] = inline_uses.get(var.name, 0) + 1
                    else:
                        other_uses.add(var.name)
        return cls(frozenset(name for name in inline_uses if name not in other_uses))
