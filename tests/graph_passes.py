"""What the graph-pass tests share: graph requests written compactly, built through the one
builder with a chosen pipeline, and the check that a rewritten program computes what the program
as built computes (the reference executor on both, the same seeded inputs)."""

from __future__ import annotations

from typing import Any

import numpy as np

from app.graphs.built import GraphBuild
from app.mil import Program
from app.reference.executor import Executor, random_inputs
from app.request import KernelRequest

RNG = np.random.default_rng(31)


def node(id: str, op: str, inputs: dict | None = None, **params: Any) -> dict[str, Any]:
    return {"id": id, "op": op, "inputs": inputs or {}, "params": params}


def graph(
    nodes: list[dict], outputs: dict[str, str], **inputs: tuple[list[int], str]
) -> dict[str, Any]:
    """A graph request body; inputs as name=(shape, dtype), by default x [1, 4, 2, 3] fp16."""
    given = inputs or {"x": ([1, 4, 2, 3], "fp16")}
    return {
        "inputs": {n: {"shape": s, "dtype": d} for n, (s, d) in given.items()},
        "nodes": nodes,
        "outputs": outputs,
    }


def values(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, shape).astype(np.float32)


def build(
    body: dict, weights: dict | None = None, passes: Any = "default", fmt: str = "mlpackage"
) -> GraphBuild:
    request = KernelRequest.create(graph=body, weights=weights or {}, passes=passes, format=fmt)
    return request.build()  # type: ignore[return-value]


def kinds(program: Program, consts: bool = False) -> list[str]:
    """The op types of the main function, in order (consts left out unless asked for)."""
    return [op.type for op in program.main.operations if consts or op.type != "const"]


def changed_by(built: GraphBuild) -> list[str]:
    """The passes that changed something, in the order they ran."""
    return [c.graph_pass for c in built.passes.changes] if built.passes else []


def max_rel(got: np.ndarray, want: np.ndarray) -> float:
    got64, want64 = np.asarray(got, np.float64), np.asarray(want, np.float64)
    same = (got64 == want64) | (np.isnan(got64) & np.isnan(want64))  # inf and nan alike
    scale = float(np.abs(want64[np.isfinite(want64)]).max(initial=0.0))
    with np.errstate(invalid="ignore"):
        err = float(np.where(same, 0.0, np.abs(got64 - want64)).max(initial=0.0))
    return err / scale if scale else err


def assert_agrees(built: GraphBuild, seed: int = 0) -> None:
    """The program after the passes against the program as built, on the same seeded inputs:
    within the graph's own fp16 tolerance for each output."""
    before = built.built_program
    inputs = random_inputs(before.main, seed)
    want = Executor(before).run(inputs).outputs
    got = Executor.from_written_weights(built.program).run(inputs).outputs
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
        error = max_rel(got[name], want[name])
        assert error <= built.tolerance(name), (name, error, built.tolerance(name))
