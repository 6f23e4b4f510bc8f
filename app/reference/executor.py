"""Runs a MIL program on NumPy inputs with fp16 storage semantics.

Every op's result is rounded to its declared output dtype before the next op sees it (fp16 ops
store fp16, as the ANE does), so a program that overflows fp16 halfway through overflows here too;
each op that turns finite values into ±inf or NaN is recorded as an `Anomaly`. Blob-backed consts
can be read back from a written weight.bin, so a wrong offset or dtype in the artifact changes the
answer instead of passing silently. States persist across `run` calls like Core ML state buffers.

    ex = Executor.from_written_weights(build.program)
    result = ex.run({"x": x})
    result.outputs["y"], result.overflowed
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from app.blob import BlobFormatError, BlobReader, blob_dtype
from app.errors import RequestError
from app.mil import Function, Program, StateType, TensorType, Var, ops
from app.mil.args import Args
from app.mil.assemble import WeightSource


@dataclass(frozen=True)
class Anomaly:
    """An op whose output holds ±inf ("overflow") or NaN ("nan") that its inputs did not."""

    op: str
    output: str
    kind: str
    count: int
    dtype: str

    def to_json(self) -> dict:
        return {
            "op": self.op,
            "output": self.output,
            "kind": self.kind,
            "count": self.count,
            "dtype": self.dtype,
        }


@dataclass
class RunResult:
    outputs: dict[str, np.ndarray]
    anomalies: list[Anomaly] = field(default_factory=list)
    # every var of the run, when asked to keep them (a string const's value is its string)
    values: dict[str, np.ndarray | str] | None = None

    @property
    def overflowed(self) -> bool:
        return any(a.kind == "overflow" for a in self.anomalies)

    @property
    def produced_nan(self) -> bool:
        return any(a.kind == "nan" for a in self.anomalies)


class Executor:
    """Executes one function of a program. `weights` + `offsets` make blob-backed consts come from
    the weight file (offsets by const name, as plan_weights or the text gives them); without them
    consts use their in-memory values. `states` may be shared between executors, like one Core ML
    state object passed to several functions."""

    def __init__(
        self,
        program: Program,
        *,
        function: str = "main",
        weights: WeightSource = None,
        offsets: Mapping[str, int] | None = None,
        states: dict[str, np.ndarray] | None = None,
    ):
        if function not in program.functions:
            raise RequestError("function", f"no function {function!r} in the program")
        self.program = program
        self.function: Function = program.functions[function]
        self.states: dict[str, np.ndarray] = {} if states is None else states
        self._consts = self._load_consts(program, weights, offsets)
        self._last_use = _last_uses(self.function)

    @classmethod
    def from_written_weights(cls, program: Program, **kwargs) -> Executor:
        """An executor whose blob consts are written to a weight.bin (as packaging writes it)
        and read back from those bytes at the planned offsets."""
        from app.packaging import plan_weights

        writer, offsets = plan_weights(program)
        buf = io.BytesIO()
        writer.write(buf)
        return cls(
            program, weights=buf.getvalue() if len(writer) else None, offsets=offsets, **kwargs
        )

    def _load_consts(
        self, program: Program, weights: WeightSource, offsets: Mapping[str, int] | None
    ) -> dict[str, np.ndarray | str]:
        blob = {op.name for op in program.blob_consts()} if offsets is not None else set()
        reader = None
        if blob:
            if weights is None:
                raise RequestError("weights", "cannot read weight.bin: none was given")
            try:
                reader = weights if isinstance(weights, BlobReader) else BlobReader(weights)
            except (OSError, TypeError, BlobFormatError) as exc:
                raise RequestError("weights", f"cannot read weight.bin: {exc}") from None
        consts: dict[str, np.ndarray | str] = {}
        for op in self.function.consts():
            assert op.value is not None
            if op.name not in blob:
                consts[op.name] = op.value.stored()
                continue
            assert reader is not None and offsets is not None
            if op.name not in offsets:
                raise RequestError(f"weights.{op.name}", "no offset in weight.bin for this const")
            t = op.value.type
            try:
                data = reader.read_values(offsets[op.name], blob_dtype(t.dtype), t.shape)
            except BlobFormatError as exc:
                raise RequestError(f"weights.{op.name}", str(exc)) from None
            consts[op.name] = np.array(data)
        return consts

    # -- running ------------------------------------------------------------------------------
    def run(self, inputs: Mapping[str, np.ndarray], *, keep: bool = False) -> RunResult:
        """Run once. `inputs` maps each input name to an array (cast to the declared dtype, the
        shape must match); a state's name sets that state's contents first (zeros otherwise)."""
        values: dict[str, np.ndarray | str] = {}  # a string const's value is its string
        flags: dict[str, tuple[bool, bool]] = {}  # var -> (has inf, has nan)
        self._bind_inputs(inputs, values)
        for name, arr in values.items():
            flags[name] = _nonfinite(arr)
        anomalies: list[Anomaly] = []
        for index, op in enumerate(self.function.operations):
            if op.type == "const":
                values[op.name] = self._consts[op.name]
                flags[op.name] = (False, False)
                continue
            with np.errstate(all="ignore"):
                result = ops.meaning(op.type)(Args(op, values, self.states))
                parts = result if len(op.outputs) > 1 else [result] * len(op.outputs)
                assert isinstance(parts, list | tuple)  # a meaning gives a list for several
                stored = [
                    _store(op.type, out, part) for out, part in zip(op.outputs, parts, strict=True)
                ]
            inherited = _input_flags(op, flags)
            for out, array in zip(op.outputs, stored, strict=True):
                values[out.name] = array
                flags[out.name] = _nonfinite(array)
                if any(flags[out.name]):
                    anomalies += _anomalies(op.name, out, array, inherited)
            if not keep:
                for name in self._last_use.get(index, ()):
                    values.pop(name, None)
        outputs = {v.name: np.asarray(values[v.name]) for v in self.function.outputs}
        return RunResult(outputs, anomalies, values if keep else None)

    def _bind_inputs(
        self, inputs: Mapping[str, np.ndarray], values: dict[str, np.ndarray | str]
    ) -> None:
        params = {v.name: v for v in self.function.inputs}
        for name in inputs:
            if name not in params:
                raise RequestError(
                    f"inputs.{name}", f"unknown input; this program takes {', '.join(params)}"
                )
        for name, var in params.items():
            t = var.tensor
            if name in inputs:
                array = _convert(name, inputs[name], t)
            elif isinstance(var.type, StateType):
                held = self.states.get(name)
                array = np.zeros(t.shape, t.dtype.numpy) if held is None else held
            else:
                raise RequestError(
                    f"inputs.{name}", f"missing input of shape {list(t.shape)} ({t.dtype.value})"
                )
            if isinstance(var.type, StateType):
                self.states[name] = array
            else:
                values[name] = array


def _convert(name: str, value, t: TensorType) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise RequestError(f"inputs.{name}", f"dtype {array.dtype} is not a number type")
    if array.shape != t.shape:
        raise RequestError(
            f"inputs.{name}", f"expected shape {list(t.shape)}, received {list(array.shape)}"
        )
    if t.dtype.is_int and array.dtype.kind == "f":
        raise RequestError(f"inputs.{name}", f"expects {t.dtype.value}, received floats")
    if t.dtype.is_int and array.dtype.kind in "iu" and array.size:
        # int64 ids (what ONNX models take) into an int32 input: held to int32, never wrapped
        low, high = np.iinfo(t.dtype.numpy).min, np.iinfo(t.dtype.numpy).max
        smallest, largest = int(array.min()), int(array.max())
        if smallest < low or largest > high:
            bad = smallest if smallest < low else largest
            raise RequestError(
                f"inputs.{name}",
                f"holds {bad}, beyond {t.dtype.value}'s range [{low}, {high}] (received "
                f"{array.dtype})",
            )
    if t.dtype.is_float and array.dtype.kind == "f" and np.isfinite(array).all():
        limit = float(np.finfo(t.dtype.numpy).max)
        if array.size and float(np.abs(array).max()) > limit:
            raise RequestError(
                f"inputs.{name}", f"has values beyond ±{limit:g}, the {t.dtype.value} range"
            )
    return np.ascontiguousarray(array.astype(t.dtype.numpy))


def _store(op_type: str, out: Var, result) -> np.ndarray:
    """The op's result rounded to its declared dtype: the fp16 storage step."""
    t = out.tensor
    stored = np.asarray(result).astype(t.dtype.numpy)
    if stored.shape != t.shape:
        raise RequestError(
            f"ops.{out.name}",
            f"{op_type} computed shape {list(stored.shape)}, its declared type is {t}",
        )
    return stored


def _nonfinite(array) -> tuple[bool, bool]:
    if not isinstance(array, np.ndarray) or array.dtype.kind != "f":
        return False, False
    return bool(np.isinf(array).any()), bool(np.isnan(array).any())


def _input_flags(op, flags: dict[str, tuple[bool, bool]]) -> tuple[bool, bool]:
    names = [
        v.name
        for value in op.inputs.values()
        for v in (value if isinstance(value, tuple) else (value,))
    ]
    got = [flags.get(n, (False, False)) for n in names]
    return any(f[0] for f in got), any(f[1] for f in got)


def _anomalies(
    op_name: str, out: Var, array: np.ndarray, inherited: tuple[bool, bool]
) -> list[Anomaly]:
    """±inf or NaN in an op's output that none of its inputs carried: this op made them."""
    found = []
    for kind, test, had in (("overflow", np.isinf, inherited[0]), ("nan", np.isnan, inherited[1])):
        count = int(test(array).sum()) if array.dtype.kind == "f" and not had else 0
        if count:
            found.append(Anomaly(op_name, out.name, kind, count, out.tensor.dtype.value))
    return found


def _last_uses(fn: Function) -> dict[int, list[str]]:
    """op index -> names of vars not needed after that op (outputs are always kept)."""
    last: dict[str, int] = {}
    for index, op in enumerate(fn.operations):
        for value in op.inputs.values():
            for v in value if isinstance(value, tuple) else (value,):
                last[v.name] = index
    keep = {v.name for v in fn.outputs}
    by_index: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in keep:
            by_index.setdefault(index, []).append(name)
    return by_index


def random_inputs(function: Function, seed: int) -> dict[str, np.ndarray]:
    """Seeded standard-normal values for every input and state, drawn in parameter order and
    stored in each one's dtype: the same seed gives the same arrays on every machine."""
    rng = np.random.default_rng(seed)
    out = {}
    for var in function.inputs:
        t = var.tensor
        if t.dtype.is_float:
            out[var.name] = rng.standard_normal(t.shape).astype(t.dtype.numpy)
        else:
            out[var.name] = rng.integers(-8, 8, t.shape, endpoint=True).astype(t.dtype.numpy)
    return out
