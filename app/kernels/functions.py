"""Several functions of one op in one program: a `functions` option such as
{"prefill": {"seq_len": 64}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 512}}
builds the op once per function (its params with the function's on top) and puts the programs
side by side, the first function the default, as coremltools' multifunction save does.

The functions take the same weights, so weight.bin holds each tensor once: the blob writer
stores identical tensors once, and every function's const names the same array. Other blob
consts (RoPE tables, masks) that share a name across functions but differ are renamed
`<function>_<name>` in the later functions, since weight.bin offsets are planned by const name.
Each function is verified on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Self

import numpy as np

from app.core.names import name_problem
from app.errors import RequestError
from app.kernels.catalog import KernelBuild, ProgramBuild, function_io
from app.mil import TARGETS, Function, Program
from app.passes import Pipeline


def check_functions(functions: Mapping[str, Any], target: str) -> None:
    """Names and shape of the option, before anything is built."""
    if not isinstance(functions, Mapping) or not functions:
        raise RequestError("functions", "an object of function name -> params, at least one")
    if target in TARGETS and not TARGETS[target].multifunction:
        raise RequestError("target", "a package of several functions needs ios18 (spec 9)")
    for name, params in functions.items():
        if (problem := name_problem(name)) is not None:
            raise RequestError(f"functions.{name}", problem)
        if not isinstance(params, Mapping):
            raise RequestError(f"functions.{name}", "the function's params, as an object")


@dataclass(frozen=True)
class FunctionsBuild(KernelBuild):
    """The functions' programs in one Program; `parts` keeps each function's own build."""

    parts: dict[str, KernelBuild] = field(default_factory=dict)

    @property
    def function_builds(self) -> tuple[KernelBuild, ...]:
        return tuple(self.parts.values())

    def tolerance(self, output: str) -> float:
        return next(iter(self.parts.values())).tolerance(output)

    def as_written_through(self, pipeline: Pipeline) -> Self:
        """The package through the pipeline, and each function's own build with it (what the
        preflight and verification read)."""
        passed = super().as_written_through(pipeline)
        if passed is self:
            return self
        parts = {name: part.as_written_through(pipeline) for name, part in self.parts.items()}
        return replace(passed, parts=parts)

    def preflight_key(self) -> Hashable | None:
        """Each function's key: the package's findings are its functions', in order (the names
        too, since a later function's consts may be renamed after it); None, findings of its
        own, when the graph passes changed the package or a function."""
        keys = tuple((name, part.preflight_key()) for name, part in self.parts.items())
        if self.passes is not None or any(key is None for _, key in keys):
            return None
        return keys

    def signature(self) -> dict[str, Any]:
        """Each function's params, inputs, states and outputs."""
        return {
            name: {"params": part.params.model_dump(mode="json"), **function_io(part.program.main)}
            for name, part in self.parts.items()
        }

    def describe(self) -> dict[str, Any]:
        """kernel.json's `functions` (each one's params and signature) and the default."""
        return {"functions": self.signature(), "default_function": self.program.default}

    def verify(self, check: Callable[[ProgramBuild], dict[str, Any]]) -> dict[str, Any]:
        """Each function verified on its own (its inputs drawn from its own signature), passed
        when all pass."""
        reports = {name: part.verify(check) for name, part in self.parts.items()}
        return {
            "op": self.op_name,
            "name": self.name,
            "functions": reports,
            "default_function": self.program.default,
            "passed": all(r["passed"] for r in reports.values()),
        }


def weight_shapes(build: KernelBuild) -> dict[str, tuple[int, ...]]:
    """Each weight's shape (a compressed one's from its compressed form: a weight read on
    demand is not read for it)."""
    quantized = build.quantized
    return {
        k: quantized[k].shape if k in quantized else tuple(build.weights[k].shape)
        for k in build.weights
    }


def merge_functions(parts: Mapping[str, KernelBuild]) -> Program:
    """One Program of the parts' main functions, named after them, the first the default."""
    taken: dict[str, np.ndarray | str] = {}  # blob const name -> the value it holds
    functions = {}
    target = next(iter(parts.values())).target
    # offsets are looked up by name for every const: an inline const named like another
    # function's blob const would be read from the blob too, so it is renamed as well
    blob_names = {
        op.name
        for part in parts.values()
        for op in part.program.main.consts()
        if op.value is not None and op.value.in_blob(target)
    }
    for fn_name, part in parts.items():
        fn = part.program.main
        for op in fn.consts():
            if op.value is None or op.name not in blob_names:
                continue
            held = taken.get(op.name)
            if held is not None and not _same(held, op.value.data):
                op.name = op.outputs[0].name = f"{fn_name}_{op.name}"
            taken.setdefault(op.name, op.value.data)
        functions[fn_name] = Function(fn_name, fn.inputs, fn.operations, fn.outputs)
    return Program(target, functions, default=next(iter(parts)))


def _same(a, b) -> bool:
    """Whether two const values hold the same numbers (views of one array: without a pass)."""
    if a is b:
        return True
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    same_memory = a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
    return (same_memory and a.strides == b.strides) or bool(np.array_equal(a, b))
