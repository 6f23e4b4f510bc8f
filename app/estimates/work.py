"""What a built program does, read off the IR: FLOPs per op, weight bytes (as stored, and as
fp16), activation bytes in and out, and its largest axis. Device-independent, so it can be kept
beside a cached artifact (not in it) and priced against any chip, by any calibration, later.

An op's FLOPs are its record's cost (app/mil/ops): multiply-adds twice for conv, matmul and
linear, one per output element for a constexpr op (it decompresses one element each), one per
element of the largest operand for every other op (elementwise, reductions, softmax alike: small
beside the matmuls). Weights are every const the function holds; a compressed weight's fp16 size is what a
chip that cannot stream the format reads.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from app.mil import Function, Operation, Program, StateType, Var, ops
from app.mil.ops.record import elementwise_flops

FP16_BYTES = 2


@dataclass(frozen=True)
class ProgramWork:
    name: str
    flops: int
    weight_bytes: int  # consts as stored (compressed where they are)
    dense_weight_bytes: int  # the same weights in fp16
    activation_bytes: int  # function inputs and outputs (states read and written)
    largest_axis: int
    compression: str | None = None  # "palettize" | "int8" | "other" | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProgramWork:
        return cls(**data)


def _vars(value) -> tuple[Var, ...]:
    return value if isinstance(value, tuple) else (value,)


def _size(var: Var) -> int:
    return math.prod(var.tensor.shape)


def _bytes(var: Var) -> int:
    return -(-_size(var) * var.tensor.dtype.bits // 8)


def op_flops(op: Operation) -> int:
    if op.type == "const":
        return 0
    record = ops.get(op.type)
    return (record.flops if record is not None else elementwise_flops)(op)


def _compression(op: Operation) -> str | None:
    """The compression a constexpr op stands for (its record's), linear ones by the dtype of
    their stored values: "palettize", "int8" or "other"."""
    record = ops.get(op.type)
    kind = record.decompresses.kind if record is not None and record.decompresses else None
    if kind == "palette":
        return "palettize"
    if kind == "linear":
        stored = [
            v
            for value in op.inputs.values()
            for v in _vars(value)
            if v.op is not None and v.op.type == "const"
        ]
        data = max(stored, key=_size, default=None)  # the values; scales and offsets are small
        return "int8" if data is not None and data.tensor.dtype.bits == 8 else "other"
    if op.type.startswith("constexpr_"):
        return "other"
    return None


def function_work(name: str, function: Function) -> ProgramWork:
    flops = sum(op_flops(op) for op in function.operations)
    stored = sum(op.value.nbytes for op in function.consts() if op.value is not None)
    dense, kinds = stored, set()
    for op in function.operations:
        kind = _compression(op)
        if kind is None:
            continue
        kinds.add(kind)
        consts = {
            id(v): v
            for value in op.inputs.values()
            for v in _vars(value)
            if v.op is not None and v.op.type == "const"
        }
        dense += sum(_size(v) * FP16_BYTES for v in op.outputs)
        dense -= sum(_bytes(v) for v in consts.values())
    states = sum(2 * _bytes(v) for v in function.inputs if isinstance(v.type, StateType))
    tensors = sum(_bytes(v) for v in function.inputs if not isinstance(v.type, StateType))
    activations = states + tensors + sum(_bytes(v) for v in function.outputs)
    axes = [max(v.tensor.shape, default=1) for op in function.operations for v in op.outputs]
    axes += [max(v.tensor.shape, default=1) for v in function.inputs]
    kind = next(iter(kinds)) if len(kinds) == 1 else ("other" if kinds else None)
    return ProgramWork(
        name, flops, stored, max(dense, stored), activations, max(axes, default=1), kind
    )


def program_works(name: str, program: Program) -> list[ProgramWork]:
    """One entry per function: a multifunction package's functions are dispatched one at a
    time, each a program of its own to the ANE."""
    if len(program.functions) == 1:
        return [function_work(name, program.main)]
    return [function_work(f"{name}.{fn}", function) for fn, function in program.functions.items()]


def build_works(build, chain=None) -> tuple[list[ProgramWork], str]:
    """A built kernel or graph (and its chain, when split) as (works, kind)."""
    if chain is not None:
        return [w for part in chain.parts for w in program_works(part.name, part.program)], "chain"
    works = program_works(build.name, build.program)
    return works, ("functions" if len(works) > 1 else "program")
