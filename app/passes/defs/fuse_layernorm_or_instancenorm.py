"""fuse_layernorm_or_instancenorm: a normalization spelt out op by op becomes layer_norm or
instance_norm. The form (coremltools 9.0's pattern 1, the one people write):

    mean = reduce_mean(x, axes, keep_dims=True)     d = x - mean
    var  = reduce_mean(d², axes, keep_dims=True)    d² as square(d), d·d or pow(d, 2)
    y    = d · rsqrt(var + epsilon)                 or d / sqrt(var + epsilon), or pow(·, -0.5);
                                                    rsqrt's own epsilon adds to it
    [y · gamma] [+ beta]                            constants

Over the spatial axes (2, 3) of a rank-4 x, gamma and beta one number per channel (or none), it
is instance_norm (as coremltools decides: a rank-3 x normalized over its last axis is a
transformer's LayerNorm, and stays one); otherwise layer_norm over the same axes, when gamma and beta vary along
those axes only (layer_norm's gamma has the normalized shape). Not fused: the two means over
different axes, keep_dims false, an intermediate read outside the pattern, a non-constant or
negative epsilon, a gamma or beta that varies along an axis not normalized."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import close, fits, operands, per_channel, scalar, stored, wide

_RSQRT_EPSILON = 1e-12  # rsqrt's default (app/mil/ops/elementwise.py)


def _axes(op: Operation) -> tuple[int, ...] | None:
    """The axes of a reduce_mean with keep_dims, sorted and non-negative."""
    x: Var = op.var("x")
    if "keep_dims" not in op.inputs or not bool(stored(op.var("keep_dims"))):
        return None
    axes = stored(op.var("axes")) if "axes" in op.inputs else list(range(x.tensor.rank))
    listed = np.asarray(axes).reshape(-1)
    return tuple(sorted({int(a) % x.tensor.rank for a in listed}))


def _squared(op: Operation, d: Var) -> bool:
    if op.type == "square":
        return op.var("x") is d
    if op.type == "mul":
        return op.var("x") is d and op.var("y") is d
    return op.type == "pow" and op.var("x") is d and close(scalar(op.var("y")), 2.0)


class _Match:
    def __init__(self, edit: Editor):
        self.edit = edit
        self.ops: list[Operation] = []

    def sole(self, var: Var, *types: str) -> Operation | None:
        op = self.edit.sole_reader(var)
        if op is None or op.type not in types:
            return None
        self.ops.append(op)
        return op

    def inverse_root(self, var: Var, d: Var) -> tuple[float, Var] | None:
        """For var = var(x) and its one reader chain to d · (var + epsilon)^-½: (epsilon, the
        normalized value)."""
        epsilon = 0.0
        step = self.sole(var, "add", "rsqrt", "sqrt", "pow")
        if step is not None and step.type == "add":
            other = operands(step, var)
            value = None if other is None else scalar(other)
            if value is None or value < 0:
                return None
            epsilon, var = value, step.outputs[0]
            step = self.sole(var, "rsqrt", "sqrt", "pow")
        if step is None or step.var("x") is not var:
            return None
        root = step.outputs[0]
        if step.type == "rsqrt":
            given = scalar(step.var("epsilon")) if "epsilon" in step.inputs else _RSQRT_EPSILON
            if given is None:
                return None
            epsilon += given
        if step.type == "pow" and not close(scalar(step.var("y")), -0.5):
            return None
        last = self.sole(root, "real_div" if step.type == "sqrt" else "mul")
        if last is None:
            return None
        if last.type == "real_div" and not (last.var("x") is d and last.var("y") is root):
            return None
        if last.type == "mul" and operands(last, root) is not d:
            return None
        return epsilon, last.outputs[0]

    def affine(self, var: Var, op_type: str) -> tuple[np.ndarray | None, Var]:
        """A mul (gamma) or add (beta) by a constant reading `var` alone: (its value, its
        output); else (None, var)."""
        op = self.edit.sole_reader(var)
        other = None if op is None or op.type != op_type else operands(op, var)
        value = None if other is None else wide(other)
        if op is None or value is None or op.outputs[0].type != var.type:
            return None, var
        self.ops.append(op)
        return value, op.outputs[0]


def _match(edit: Editor, mean: Operation):
    x: Var = mean.var("x")
    axes = _axes(mean)
    m = _Match(edit)
    sub = m.sole(mean.outputs[0], "sub")
    if axes is None or sub is None or sub.var("x") is not x:
        return None
    d = sub.outputs[0]
    readers = edit.readers(d)
    if len(readers) != 2 or edit.is_output(d):
        return None
    squares = [op for op in readers if _squared(op, d)]
    if len(squares) != 1:
        return None
    m.ops.append(squares[0])
    var = m.sole(squares[0].outputs[0], "reduce_mean")
    if var is None or var.var("x") is not squares[0].outputs[0] or _axes(var) != axes:
        return None
    root = m.inverse_root(var.outputs[0], d)
    if root is None:
        return None
    epsilon, y = root
    gamma, y = m.affine(y, "mul")
    beta, y = m.affine(y, "add")
    return x, axes, epsilon, gamma, beta, y, [mean, sub, var, *m.ops]


def _over(value: np.ndarray | None, shape: tuple[int, ...], axes: tuple[int, ...]):
    """A constant broadcast against x's shape, as layer_norm's gamma (the normalized shape),
    when it varies along `axes` only; None when it does not; "absent" when there is none."""
    if value is None:
        return "absent"
    if value.ndim > len(shape):
        return None
    padded = value.reshape((1,) * (len(shape) - value.ndim) + value.shape)
    for i, (d, full) in enumerate(zip(padded.shape, shape, strict=True)):
        if d != 1 and (i not in axes or d != full):
            return None
    kept = tuple(shape[i] if i in axes else 1 for i in range(len(shape)))
    return np.broadcast_to(padded, kept).reshape([shape[i] for i in axes]).astype(np.float64)


def _channels(value: np.ndarray | None, shape: tuple[int, ...]):
    if value is None:
        return "absent"
    return per_channel(value, shape, 1)


def run(edit: Editor, options: Options) -> None:
    for mean in edit.ops("reduce_mean"):
        if edit.removed(mean):
            continue
        found = _match(edit, mean)
        if found is None:
            continue
        x, axes, epsilon, gamma, beta, y, ops = found
        shape, dtype = x.tensor.shape, x.tensor.dtype
        if y.type != x.type:
            continue
        spatial = tuple(range(2, len(shape)))
        op_type, args = "instance_norm", {}
        params = (_channels(gamma, shape), _channels(beta, shape))
        if not (axes == spatial and len(shape) == 4) or any(p is None for p in params):
            op_type, args = "layer_norm", {"axes": np.array(axes, np.int32)}
            params = (_over(gamma, shape, axes), _over(beta, shape, axes))
        if any(p is None for p in params) or not all(
            isinstance(p, str) or fits(p, x) for p in params
        ):
            continue
        last = y.op
        assert last is not None
        inputs: dict = {"x": x}
        if "axes" in args:
            inputs["axes"] = edit.const(f"{last.name}_axes", args["axes"], DType.INT32, last)
        for name, value in zip(("gamma", "beta"), params, strict=True):
            if not isinstance(value, str):
                inputs[name] = edit.const(f"{last.name}_{name}", value, dtype, last)
        inputs["epsilon"] = edit.const(f"{last.name}_epsilon", np.array(epsilon), dtype, last)
        new = edit.op(op_type, last.name, inputs, last, out=[y.name])
        edit.replace(y, new.outputs[0])
        edit.drop(*ops)


PASS = GraphPass(
    "fuse_layernorm_or_instancenorm",
    "optimize_normalization",
    "a normalization spelt out (mean, sub, square, mean, add, rsqrt, mul[, mul, add]) becomes "
    "layer_norm or instance_norm",
    run,
    creates=frozenset({"layer_norm", "instance_norm"}),
    needs=frozenset({"reduce_mean"}),
)
