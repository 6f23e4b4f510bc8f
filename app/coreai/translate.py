"""The project's IR program as a Core AI program: one `coreai.graph` per function.

    untranslatable(program)  -> the first op Core AI cannot express, before anything is built
    translate(program)       -> coreai.authoring.AIProgram

Function inputs and outputs keep their names. A state parameter becomes a handle: each
read_state/write_state is a read_handle/write_handle on a chain of tokens that starts at
`create_token` (a coreml_update_state both: the write, then a read of what it wrote, as
coremltools' backend writes it), and every graph returns the last token of each handle (the runtime then shows the
handles as the function's states and drops the tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.coreai import compressed, rules_math, rules_nn, rules_tensor
from app.coreai.dtype_map import coreai_dtype, dtype_name, has_dtype
from app.coreai.rules import RULES as _OP_RULES
from app.coreai.step import NoCoreAIForm, Step
from app.coreai.weights import Constants
from app.mil import Function, Operation, Program, StateType, Var

RULES = {
    **_OP_RULES,
    **rules_math.RULES,
    **rules_nn.RULES,
    **rules_tensor.RULES,
    **compressed.RULES,
}
STATE_OPS = ("read_state", "write_state", "coreml_update_state")
_CONST_ONLY_DTYPES = ("string",)  # op arguments read while translating, never values


@dataclass(frozen=True)
class Untranslatable:
    """An op (or a value's dtype) Core AI cannot express: which function, op and why."""

    function: str
    op: Operation
    reason: str


class TranslationError(ValueError):
    """An op a rule found it cannot write (a case of a known op Core AI has no form for)."""

    def __init__(self, found: Untranslatable):
        self.found = found
        super().__init__(found.reason)


def untranslatable(program: Program) -> Untranslatable | None:
    """The first op of `program` this translation has no rule for, None when all have one."""
    for fn in program.functions.values():
        for op in fn.operations:
            if op.type == "const":
                continue
            if op.type not in RULES and op.type not in STATE_OPS:
                return Untranslatable(fn.name, op, f"op {op.type!r} has no Core AI translation")
            if op.type.startswith("constexpr_") and "shape" in op.inputs:
                # the iOS16 form (flat, byte-packed data and a shape) of an ios17 program
                return Untranslatable(
                    fn.name,
                    op,
                    f"the iOS16 form of {op.type!r} (target ios17) has no Core AI "
                    "translation; the ios18 form has",
                )
            for var in (*op.outputs, *_inputs(op)):
                dtype = var.tensor.dtype
                if dtype.value not in _CONST_ONLY_DTYPES and not has_dtype(dtype):
                    return Untranslatable(
                        fn.name, op, f"dtype {dtype.value} of {var.name!r} has no Core AI dtype"
                    )
    return None


def _inputs(op: Operation) -> list[Var]:
    out: list[Var] = []
    for value in op.inputs.values():
        out += list(value) if isinstance(value, tuple) else [value]
    return out


def translate(program: Program):
    """The Core AI program (an `AIProgram`) computing what `program` computes."""
    from coreai.authoring import AIProgram, Module

    module = Module.create()
    constants = Constants()
    with module:
        for fn in program.functions.values():
            _graph(fn, constants)
    return AIProgram(module)


def _mlir_tensor(var: Var):
    from coreai.authoring import TensorType

    t = var.tensor
    return TensorType(t.shape, coreai_dtype(dtype_name(t.dtype)))._to_mlir()


def _graph(fn: Function, constants: Constants) -> None:
    from coreai._compiler.dialects import coreai as raw
    from coreai.authoring.graph_builder import GraphOp
    from coreai.authoring.operation import Value

    states = [v for v in fn.inputs if isinstance(v.type, StateType)]
    input_types = [
        raw.HandleType.get(_mlir_tensor(v)) if isinstance(v.type, StateType) else _mlir_tensor(v)
        for v in fn.inputs
    ]
    result_types = [_mlir_tensor(v) for v in fn.outputs] + [raw.TokenType.get() for _ in states]
    graph = GraphOp(
        fn.name,
        input_types=input_types,
        result_types=result_types,
        input_names=[v.name for v in fn.inputs],
        result_names=[v.name for v in fn.outputs] + [f"{v.name}_token" for v in states],
    )
    with graph.block:
        env: dict[str, object] = {}
        handles = {}
        for var, arg in zip(fn.inputs, graph.arguments, strict=True):
            if isinstance(var.type, StateType):
                handles[var.name] = arg
            else:
                env[var.name] = Value._from_mlir(arg)
        tokens: dict[str, object] = {}

        def token(state: str):
            if state not in tokens:
                tokens[state] = raw.create_token()
            return tokens[state]

        def value_of(var: Var):
            if var.name not in env:
                assert var.op is not None and var.op.type == "const" and var.op.value is not None
                stored = var.op.value.stored_array()
                env[var.name] = constants.make(stored, dtype_name(var.tensor.dtype))
            return env[var.name]

        for op in fn.operations:
            if op.type == "const":
                continue
            if op.type == "coreml_update_state":
                state = op.var("state").name
                data = value_of(op.var("value"))._to_mlir()
                tokens[state] = raw.write_handle(handles[state], data, token(state))
            if op.type in ("read_state", "coreml_update_state"):
                state = op.var("input" if op.type == "read_state" else "state").name
                # (value, token); coreai's stub gives OpResultList no __iter__, it is a sequence
                pair: Any = raw.read_handle(handles[state], token(state))
                read, tokens[state] = pair
                env[op.output.name] = Value._from_mlir(read)
                continue
            if op.type == "write_state":
                state = op.var("input").name
                data = value_of(op.var("data"))._to_mlir()
                tokens[state] = raw.write_handle(handles[state], data, token(state))
                continue
            try:
                results = RULES[op.type](Step(op, value_of, constants))
            except NoCoreAIForm as exc:
                found = Untranslatable(fn.name, op, f"op {op.type!r}: {exc} has no Core AI form")
                raise TranslationError(found) from None
            for var, result in zip(op.outputs, results, strict=True):
                env[var.name] = result
        outputs = [value_of(v)._to_mlir() for v in fn.outputs]
        raw.output(outputs + [token(v.name) for v in states])
