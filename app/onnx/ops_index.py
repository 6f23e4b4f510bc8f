"""Lowerings of ONNX's indexed reads and writes (Gather on computed indices, GatherElements,
GatherND, ScatterElements, ScatterND, OneHot), Trilu, TopK, ArgMax/ArgMin and CumSum.

ONNX counts a negative index from the end; MIL's iOS17 gathers leave one undefined. Indices known
at import are made non-negative then; computed ones through select(i < 0, i + size, i), exact.

An embedding lookup (Gather of a constant table by computed ids) of a table of at most
`ONE_HOT_ROWS` rows becomes a one-hot product, equal(ids, 0..rows-1) cast to fp16 times the
table: the ANE runs it (a comparison, a cast and a matmul), where `gather` runs on the CPU beside
the ANE's partition (app/mil/ops/indexing.py). A larger table (a vocabulary) is a `gather`: its
one-hot product would cost rows × width multiply-adds per id.
"""

from __future__ import annotations

import numpy as np

from app.errors import RequestError
from app.mil import Var
from app.onnx import ops_layout as layout
from app.onnx.lowering import Handler, Lowering, Node, Value
from app.onnx.ops_layout import reshape_to

ONE_HOT_ROWS = 2048
MAX_RUNS = 64  # slices a known-index gather becomes before it is one gather instead


def _non_negative(ctx: Lowering, node: Node, idx: Value, sizes: np.ndarray | int) -> Value:
    """Indices with a negative one counted from the end of its axis (`sizes` broadcasts)."""
    if isinstance(idx, np.ndarray):
        return np.where(idx < 0, idx + sizes, idx).astype(np.int32)
    wrapped = ctx.op("add", x=idx, y=np.asarray(sizes, np.int32))
    negative = ctx.op("less", x=idx, y=np.array(0, np.int32))
    return ctx.op("select", cond=negative, a=wrapped, b=idx)


def _operand(ctx: Lowering, node: Node, i: int) -> Var:
    value = node.input(i)
    if isinstance(value, np.ndarray):
        return ctx.tensor(value, node.proto.input[i])
    return node.var(i)


def _gathered(ctx: Lowering, node: Node, op: str, x: Var, **args) -> Var:
    """A gather-family op; a bool x (a mask) gathered as int32 and cast back (MIL's gathers
    take numbers only)."""
    if x.tensor.dtype.value != "bool":
        return ctx.op(op, node.out[0], x=x, **args)
    moved = ctx.op(op, x=ctx.op("cast", x=x, dtype="int32"), **args)
    return ctx.op("cast", node.out[0], x=moved, dtype="bool")


def gather(ctx: Lowering, node: Node) -> list[Value]:
    """Gather: on indices known at import, slices (app/onnx/ops_layout.py); on computed ones, an
    embedding lookup (a one-hot product or `gather`) or a `gather`."""
    if isinstance(node.input(1), np.ndarray):
        return layout.gather(ctx, node)
    table, ids = node.input(0), node.var(1)
    shape = table.shape if isinstance(table, np.ndarray) else node.var(0).tensor.shape
    axis = node.axis(int(node.attr("axis", 0)), len(shape))
    scalar = ids.tensor.rank == 0
    if scalar:
        ids = reshape_to(ctx, ids, [1], None)
    # ids is a Var here and _non_negative gives a Var for a Var (its signature says Value)
    ids = _non_negative(ctx, node, ids, shape[axis])  # type: ignore[assignment]
    out_shape = [*shape[:axis], *([] if scalar else ids.tensor.shape), *shape[axis + 1 :]]
    final = None if scalar else node.out[0]
    if isinstance(table, np.ndarray) and axis == 0 and len(shape) == 2 and shape[0] <= ONE_HOT_ROWS:
        rows = np.arange(shape[0], dtype=np.int32)
        column = reshape_to(ctx, ids, [*ids.tensor.shape, 1], None)
        hot = ctx.op("cast", x=ctx.op("equal", x=column, y=rows), dtype="fp16")
        result = ctx.op("matmul", final, x=hot, y=_operand(ctx, node, 0))
    else:
        result = ctx.op("gather", final, x=_operand(ctx, node, 0), indices=ids, axis=axis)
    if scalar:
        if not out_shape:
            raise RequestError(
                node.field, f"Gather node {node.label!r}: a program holds no rank-0 tensor"
            )
        result = reshape_to(ctx, result, out_shape, node.out[0])
    return [result]


def gather_elements(ctx: Lowering, node: Node) -> list[Value]:
    x = _operand(ctx, node, 0)
    axis = node.axis(int(node.attr("axis", 0)), x.tensor.rank)
    idx = _non_negative(ctx, node, node.given(1), x.tensor.shape[axis])
    return [_gathered(ctx, node, "gather_along_axis", x, indices=idx, axis=axis)]


def gather_nd(ctx: Lowering, node: Node) -> list[Value]:
    """On indices known at import, the rows they name of x with its indexed axes flattened, as
    slices (app/onnx/ops_layout.py's take: the ANE runs them) when they make at most
    `MAX_RUNS` runs; otherwise `gather_nd`."""
    x = _operand(ctx, node, 0)
    batch = int(node.attr("batch_dims", 0))
    idx = node.input(1)
    depth = idx.shape[-1] if isinstance(idx, np.ndarray) else node.var(1).tensor.shape[-1]
    sizes = np.array(x.tensor.shape[batch : batch + depth], np.int64)
    # GatherND always has its indices (the reader checks every node's inputs), so idx is not None
    idx = _non_negative(ctx, node, idx, sizes)  # type: ignore[arg-type]
    if isinstance(idx, np.ndarray):
        shape = list(x.tensor.shape)
        if (idx < 0).any() or (idx >= sizes).any():
            raise RequestError(
                node.field, f"GatherND node {node.label!r}: an index outside {shape}"
            )
        lead = list(idx.shape[:batch])
        coords = [*np.indices([*lead, *idx.shape[batch:-1]])[:batch], *np.moveaxis(idx, -1, 0)]
        rows = np.ravel_multi_index(tuple(coords), shape[: batch + depth]).reshape(-1)
        if len(layout.runs_of(rows.tolist())) <= MAX_RUNS:
            flat = reshape_to(
                ctx, x, [int(np.prod(shape[: batch + depth])), *shape[batch + depth :]], None
            )
            return [layout.take(ctx, node, flat, rows.tolist(), 0, list(idx.shape[:-1]))]
    return [_gathered(ctx, node, "gather_nd", x, indices=idx, batch_dims=batch)]


_REDUCTION = {"none": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


def _mode(node: Node) -> str:
    given = node.attr("reduction", b"none")
    given = given.decode() if isinstance(given, bytes) else given
    if given not in _REDUCTION:
        raise RequestError(node.field, f"{node.op_type} node {node.label!r}: reduction {given!r}")
    return _REDUCTION[given]


def scatter_elements(ctx: Lowering, node: Node) -> list[Value]:
    data = _operand(ctx, node, 0)
    axis = node.axis(int(node.attr("axis", 0)), data.tensor.rank)
    idx = _non_negative(ctx, node, node.given(1), data.tensor.shape[axis])
    updates = _operand(ctx, node, 2)
    return [
        ctx.op(
            "scatter_along_axis",
            node.out[0],
            data=data,
            indices=idx,
            updates=updates,
            axis=axis,
            mode=_mode(node),
        )
    ]


def scatter_nd(ctx: Lowering, node: Node) -> list[Value]:
    """Indices known at import: the positions they name in the flattened data, computed then,
    and one scatter_along_axis over the flattened data; computed ones: scatter_nd."""
    data = _operand(ctx, node, 0)
    idx = node.input(1)
    if not isinstance(idx, np.ndarray):
        depth = node.var(1).tensor.shape[-1]
        sizes = np.array(data.tensor.shape[:depth], np.int64)
        return [
            ctx.op(
                "scatter_nd",
                node.out[0],
                data=data,
                indices=_non_negative(ctx, node, node.var(1), sizes),
                updates=_operand(ctx, node, 2),
                mode=_mode(node),
            )
        ]
    shape = list(data.tensor.shape)
    depth = idx.shape[-1]
    sizes = np.array(shape[:depth], np.int64)
    idx = np.where(idx < 0, idx + sizes, idx).reshape(-1, depth)
    if idx.size and ((idx < 0).any() or (idx >= sizes).any()):
        raise RequestError(node.field, f"ScatterND node {node.label!r}: an index outside {shape}")
    block = int(np.prod(shape[depth:], dtype=np.int64))
    starts = (
        np.asarray(np.ravel_multi_index(tuple(idx.T), shape[:depth])) * block
        if depth
        else np.zeros(1)
    )
    flat_idx = (starts[:, None] + np.arange(block)).reshape(-1).astype(np.int32)
    total = int(np.prod(shape, dtype=np.int64))
    flat = reshape_to(ctx, data, [total], None)
    updates = reshape_to(ctx, _operand(ctx, node, 2), [flat_idx.size], None)
    scattered = ctx.op(
        "scatter_along_axis", data=flat, indices=flat_idx, updates=updates, axis=0, mode=_mode(node)
    )
    return [reshape_to(ctx, scattered, shape, node.out[0])]


def one_hot(ctx: Lowering, node: Node) -> list[Value]:
    ids = node.var(0)
    depth = node.known(1, "depth")
    values = node.known(2, "values")
    assert depth is not None and values is not None
    size = int(np.asarray(depth).reshape(-1)[0])
    idx = _non_negative(ctx, node, ids, size)
    kind = np.float32 if values.dtype.kind == "f" else np.int32
    off, on = (np.array(v, kind) for v in values.reshape(-1)[:2])
    return [
        ctx.op(
            "one_hot",
            node.out[0],
            indices=idx,
            one_hot_vector_size=size,
            axis=int(node.attr("axis", -1)),
            on_value=on,
            off_value=off,
        )
    ]


def trilu(ctx: Lowering, node: Node) -> list[Value]:
    """band_part keeps `lower` diagonals below and `upper` above the main one; a band that
    starts off the main diagonal is x − the band_part of its complement (exact)."""
    x = node.var(0)
    k_given = node.known(1, "k", waits="band_part (k computed from the data)")
    k = int(np.asarray(k_given).reshape(-1)[0]) if k_given is not None else 0
    out = node.out[0]
    if node.attr("upper", 1):  # keep column − row >= k
        if k <= 0:
            return [ctx.op("band_part", out, x=x, lower=-k, upper=-1)]
        rest = ctx.op("band_part", x=x, lower=-1, upper=k - 1)
    else:  # keep column − row <= k
        if k >= 0:
            return [ctx.op("band_part", out, x=x, lower=-1, upper=k)]
        rest = ctx.op("band_part", x=x, lower=-k - 1, upper=-1)
    return [ctx.op("sub", out, x=x, y=rest)]


def topk(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    k = node.known(1, "k", waits="topk (k computed from the data)")
    assert k is not None
    axis = node.axis(int(node.attr("axis", -1)), x.tensor.rank)
    names = node.out if len(node.out) == 2 else [*node.out, ctx.fresh(f"{node.out[0]}_indices")]
    return list(
        ctx.ops(
            "topk",
            names,
            x=x,
            k=int(np.asarray(k).reshape(-1)[0]),
            axis=axis,
            ascending=not node.attr("largest", 1),
            sort=True,  # a sorted answer is one of the orders sorted=0 allows
        )
    )


def arg_reduce(ctx: Lowering, node: Node) -> list[Value]:
    """ArgMax/ArgMin; select_last_index as the first index in the reversed axis."""
    x = node.var(0)
    rank = x.tensor.rank
    axis = node.axis(int(node.attr("axis", 0)), rank)
    keep = bool(node.attr("keepdims", 1))
    if not keep and rank == 1:
        raise RequestError(
            node.field, f"{node.op_type} node {node.label!r}: a program holds no rank-0 tensor"
        )
    op = "reduce_argmax" if node.op_type == "ArgMax" else "reduce_argmin"
    last = bool(node.attr("select_last_index", 0))
    if not last:
        return [ctx.op(op, node.out[0], x=x, axis=axis, keep_dims=keep)]
    stride = [1] * rank
    stride[axis] = -1
    reversed_ = ctx.op(
        "slice_by_index",
        x=x,
        begin=np.zeros(rank, np.int32),
        end=np.array(x.tensor.shape, np.int32),
        stride=np.array(stride, np.int32),
        begin_mask=np.ones(rank, bool),
        end_mask=np.ones(rank, bool),
    )
    found = ctx.op(op, x=reversed_, axis=axis, keep_dims=keep)
    size = np.array(x.tensor.shape[axis] - 1, np.int32)
    return [ctx.op("sub", node.out[0], x=size, y=found)]


def cumsum(ctx: Lowering, node: Node) -> list[Value]:
    x = node.var(0)
    given = node.known(1, "axis")
    assert given is not None
    axis = node.axis(int(np.asarray(given).reshape(-1)[0]), x.tensor.rank)
    return [
        ctx.op(
            "cumsum",
            node.out[0],
            x=x,
            axis=axis,
            exclusive=bool(node.attr("exclusive", 0)),
            reverse=bool(node.attr("reverse", 0)),
        )
    ]


HANDLERS: dict[str, Handler] = {
    "Gather": gather,
    "GatherElements": gather_elements,
    "GatherND": gather_nd,
    "ScatterElements": scatter_elements,
    "ScatterND": scatter_nd,
    "OneHot": one_hot,
    "Trilu": trilu,
    "TopK": topk,
    "ArgMax": arg_reduce,
    "ArgMin": arg_reduce,
    "CumSum": cumsum,
}
