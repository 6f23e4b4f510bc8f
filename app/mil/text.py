"""The `model.mil` text emitter, spelled as Apple's compiler writes it for each target.

iOS18 (`program(1.3)`) writes bare scalars (`int32(1)`, `string("x")`); iOS17 (`program(1.0)`)
writes them as rank-0 tensors (`tensor<int32, []>(1)`). Floats are exact hex literals, arguments
are sorted by name, and every op carries its name.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.mil.inline import InlinePlan, form, is_inline_value
from app.mil.ir import ConstValue, Function, Operation, Program, Var
from app.mil.targets import Target
from app.mil.types import DType, StateType, TensorType, ValueType

WEIGHT_PATH = "@model_path/weights/weight.bin"


def hex_float(value: float) -> str:
    """Exact shortest hex spelling: 0.125 -> 0x1p-3, -10000.0 -> -0x1.388p+13."""
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{value} has no MIL literal")
    mantissa, exponent = value.hex().split("p")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}p{exponent}"


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class _Spelling:
    def __init__(self, target: Target):
        self.bare = target.bare_scalars

    def type(self, t: ValueType) -> str:
        if isinstance(t, StateType):
            return f"state<{self.type(t.tensor)}>"
        if not t.shape and self.bare:
            return t.dtype.value
        return str(t)

    def element(self, dtype: DType, x) -> str:
        if dtype is DType.STRING:
            return _quote(str(x))
        if dtype is DType.BOOL:
            return "true" if x else "false"
        if dtype.is_float:
            return hex_float(x)
        return str(int(x))

    def literal(self, t: TensorType, value) -> str:
        if not t.shape:
            item = value if isinstance(value, str) else np.asarray(value).reshape(()).item()
            return f"{self.type(t)}({self.element(t.dtype, item)})"
        flat = np.asarray(value).reshape(-1).tolist()
        return f"{t}([{', '.join(self.element(t.dtype, v) for v in flat)}])"

    def string(self, text: str) -> str:
        return self.literal(TensorType(DType.STRING, ()), text)

    def blob(self, t: TensorType, offset: int) -> str:
        path = self.string(WEIGHT_PATH)
        off = self.literal(TensorType(DType.UINT64, ()), offset)
        return f"{t}(BLOBFILE(path = {path}, offset = {off}))"


def _const_val(sp: _Spelling, value: ConstValue, offset: int | None) -> str:
    if offset is not None:
        return sp.blob(value.type, offset)
    return sp.literal(value.type, value.stored())


def _statement(sp: _Spelling, op: Operation, offsets: Mapping[str, int], spelled: str) -> str:
    outs = ", ".join(f"{sp.type(v.type)} {v.name}" for v in op.outputs)
    lhs = f"{outs} = " if outs else ""
    if op.type == "const":
        assert op.value is not None
        val = _const_val(sp, op.value, offsets.get(op.name))
        return f"{lhs}const()[name = {sp.string(op.name)}, val = {val}];"
    if spelled == "attributes":  # iOS16 constexpr: `op()[arg = value, ..., name = ...]`, sorted
        attrs = {k: _arg(sp, op.inputs[k], offsets) for k in op.inputs}
        attrs["name"] = sp.string(op.name)
        return f"{lhs}{op.type}()[{', '.join(f'{k} = {attrs[k]}' for k in sorted(attrs))}];"
    if spelled == "inline":
        args = ", ".join(f"{k} = {_arg(sp, op.inputs[k], offsets)}" for k in sorted(op.inputs))
    else:
        args = ", ".join(f"{k} = {_ref(op.inputs[k])}" for k in sorted(op.inputs))
    return f"{lhs}{op.type}({args})[name = {sp.string(op.name)}];"


def _arg(sp: _Spelling, value: Var | tuple[Var, ...], offsets: Mapping[str, int]) -> str:
    """A constexpr argument: a const's value written in place, another constexpr's output by name."""
    if isinstance(value, Var) and is_inline_value(value):
        assert value.op is not None and value.op.value is not None
        return _const_val(sp, value.op.value, offsets.get(value.op.name))
    return _ref(value)


def _ref(value: Var | tuple[Var, ...]) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(v.name for v in value) + ")"
    return value.name


def build_info_text(sp: _Spelling, build_info: Mapping[str, str]) -> str:
    key = "string" if sp.bare else "tensor<string, []>"
    pairs = ", ".join(f"{{{_quote(k)}, {_quote(v)}}}" for k, v in sorted(build_info.items()))
    return f"[buildInfo = dict<{key}, {key}>({{{pairs}}})]"


def _function(sp: _Spelling, fn: Function, target: Target, offsets: Mapping[str, int]) -> list[str]:
    params = ", ".join(f"{sp.type(v.type)} {v.name}" for v in fn.inputs)
    lines = [f"    func {fn.name}<{target.name}>({params}) {{"]
    folded = InlinePlan.of(fn, target).folded
    lines += [
        f"        {_statement(sp, op, offsets, form(op, target))}"
        for op in fn.operations
        if op.name not in folded
    ]
    lines.append(f"    }} -> ({', '.join(v.name for v in fn.outputs)});")
    return lines


def emit_text(program: Program, offsets: Mapping[str, int], build_info: Mapping[str, str]) -> str:
    """model.mil for `program`; `offsets` maps each blob-backed const's name to its metadata offset."""
    sp = _Spelling(program.target)
    lines = [f"program({program.target.program_version})", build_info_text(sp, build_info), "{"]
    for fn in program.functions.values():
        lines += _function(sp, fn, program.target, offsets)
    lines.append("}")
    return "\n".join(lines) + "\n"
