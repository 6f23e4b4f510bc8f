"""State: reading and writing a function's mutable buffers (iOS18 `state<tensor<...>>`,
coremltools iOS18 `states.py`), and coremltools' `coreml_update_state` (its Core ML dialect,
`ops/defs/coreml_dialect/ops.py`): a write that returns the value written. Never graph nodes: a
graph has no states."""

from __future__ import annotations

import numpy as np

from app.mil.args import Args
from app.mil.call import Call
from app.mil.ir import Operation, Var
from app.mil.ops.record import Arg, Family, Form, OpRecord
from app.mil.types import FLOATS, TensorType

F = Family.STATE


def _read_state_type(call: Call) -> list[TensorType]:
    return [call.type("input")]


def _write_state_type(call: Call) -> list[TensorType]:
    if call.type("data") != call.type("input"):
        raise call.fail(
            "data", f"{call.type('data')} does not match the state {call.type('input')}"
        )
    return []


def _update_state_type(call: Call) -> list[TensorType]:
    if call.type("value") != call.type("state"):
        raise call.fail(
            "value", f"{call.type('value')} does not match the state {call.type('state')}"
        )
    return [call.type("value")]


def _update_state(a: Args) -> np.ndarray:
    a.states[a.state_name("state")] = np.array(a["value"])
    return np.array(a["value"])


def lower_update_state(op: Operation, used: bool, taken: set[str]) -> list[Operation]:
    """coreml_update_state as a program holds it: write_state (named `<name>_write_state`, or
    with a number after it where the function has an op of that name already), then, when its
    value is read (`used`), a read_state of the state named as the op and its output: what
    coremltools' backend writes for it (`backend/mil/load.py`, translate_coreml_update_state_op),
    so the text and the protobuf hold iOS18 ops only."""
    state, value = op.var("state"), op.var("value")
    name, n = f"{op.name}_write_state", 0
    while name in taken:
        n += 1
        name = f"{op.name}_write_state_{n}"
    taken.add(name)
    write = Operation("write_state", name, {"input": state, "data": value}, [])
    if not used:
        return [write]
    read = Operation("read_state", op.name, {"input": state}, [])
    read.outputs = [Var(out.name, out.type, read) for out in op.outputs]
    return [write, read]


def _read_state(a: Args) -> np.ndarray:
    return a.states[a.state_name("input")].copy()


def _write_state(a: Args) -> None:
    a.states[a.state_name("input")] = np.array(a["data"])


RECORDS: tuple[OpRecord, ...] = (
    OpRecord(
        "read_state",
        F,
        Form({"input": Arg(FLOATS, state=True)}, _read_state_type),
        since="ios18",
        meaning=_read_state,
    ),
    OpRecord(
        "write_state",
        F,
        Form({"input": Arg(FLOATS, state=True), "data": Arg(FLOATS)}, _write_state_type),
        since="ios18",
        meaning=_write_state,
    ),
    # A coremltools dialect op: the IR holds it so that prefer_state_in_downstream can hand its
    # value to the readers downstream; `lowered` writes it as write_state + read_state, so no
    # program text or protobuf holds it. Apple's histogram: not seen (no golden under
    # ../shared/goldens holds a state op, and coremltools never writes this one). ANE: no
    # report of the op itself; the preflight's state rules (`state.*`) speak of states.
    OpRecord(
        "coreml_update_state",
        F,
        Form({"state": Arg(FLOATS, state=True), "value": Arg(FLOATS)}, _update_state_type),
        since="ios18",
        meaning=_update_state,
        lowered=lower_update_state,
    ),
)
