"""fuse_layernorm_or_instancenorm: a normalization spelt out op by op becomes layer_norm or
instance_norm. The spellings taken (coremltools 9.0's five patterns, and the mixtures of them):

    mean    reduce_mean(x, axes, keep_dims=True), or reduce_sum(...) · 1/N (N the elements
            reduced; pattern 4)
    var     mean((x - mean)²), (x - mean)² as square, d·d or pow(d, 2) (patterns 1, 2, 3, 5);
            or mean(x²) - mean² (pattern 4)
    root    [var + epsilon] then rsqrt (its own epsilon adds), pow(·, -0.5), or sqrt / pow(·, 0.5)
            to divide by
    y       d · rsqrt(...) or d / sqrt(...), d = x - mean (one sub, or one for the variance and
            another here: pattern 2);
            or x·s - mean·s with s = rsqrt(...) [· gamma], the difference as a sub, an add of
            (-1)·mean·s (pattern 3) or an add of (beta - mean·s) (pattern 4)
    affine  up to two muls by gamma and adds of beta, in either order (pattern 5 adds beta
            first: (n + beta)·gamma = n·gamma + beta·gamma)

Over the spatial axes (2, 3) of a rank-4 x, gamma and beta one number per channel (or none), it
is instance_norm (as coremltools decides: a rank-3 x normalized over its last axis is a
transformer's LayerNorm, and stays one); otherwise layer_norm over the same axes, when gamma and
beta vary along those axes only (layer_norm's gamma has the normalized shape). Not fused: the
two means over different axes, keep_dims false, a 1/N that is not the count reduced, an
intermediate read outside the pattern, a non-constant or negative epsilon, a gamma or beta that
varies along an axis not normalized."""

from __future__ import annotations

import math

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import close, fits, operands, per_channel, scalar, stored, wide

_RSQRT_EPSILON = 1e-12  # rsqrt's default (app/mil/ops/elementwise.py)


def _axes(op: Operation) -> tuple[int, ...] | None:
    """The axes of a reduction with keep_dims, sorted and non-negative."""
    x: Var = op.var("x")
    if "keep_dims" not in op.inputs or not bool(stored(op.var("keep_dims"))):
        return None
    axes = stored(op.var("axes")) if "axes" in op.inputs else list(range(x.tensor.rank))
    listed = np.asarray(axes).reshape(-1)
    return tuple(sorted({int(a) % x.tensor.rank for a in listed}))


def _square_of(op: Operation) -> Var | None:
    """What `op` squares: square(v), v·v or pow(v, 2)."""
    x = op.var("x") if "x" in op.inputs else None
    if op.type == "square" or (op.type == "mul" and op.inputs.get("y") is x):
        return x
    if op.type == "pow" and close(scalar(op.var("y")), 2.0):
        return x
    return None


def _mean_from(edit: Editor, op: Operation) -> tuple[Var, tuple[int, ...], Var, list] | None:
    """For a reduce_mean with keep_dims, or a reduce_sum with keep_dims times 1/N: (x, axes, the
    mean, the ops)."""
    axes = _axes(op) if op.type in ("reduce_mean", "reduce_sum") else None
    if axes is None:
        return None
    x: Var = op.var("x")
    if op.type == "reduce_mean":
        return x, axes, op.outputs[0], [op]
    scale = edit.sole_reader(op.outputs[0])
    count = math.prod(x.tensor.shape[a] for a in axes)
    if scale is None or scale.type != "mul":
        return None
    other = operands(scale, op.outputs[0])
    if other is None or not close(scalar(other), 1.0 / count):
        return None
    return x, axes, scale.outputs[0], [op, scale]


def _reductions(edit: Editor, var: Var, axes: tuple[int, ...]) -> list[tuple[Var, list]]:
    """The means over `axes` of `var` read from it: (the mean, its ops)."""
    found = []
    for op in edit.readers(var):
        m = _mean_from(edit, op)
        if m is not None and m[0] is var and m[1] == axes:
            found.append((m[2], m[3]))
    return found


class _Match:
    """A normalization being read from its first mean: the ops taken, the centred values."""

    def __init__(self, edit: Editor, x: Var, axes: tuple[int, ...], mean: Var, ops: list):
        self.edit, self.x, self.axes, self.mean, self.ops = edit, x, axes, mean, list(ops)
        self.centred: list[Var] = []  # the subs x - mean

    def variance(self) -> Var | None:
        edit, x, mean = self.edit, self.x, self.mean
        for op in edit.readers(mean):
            if op.type == "sub" and op.inputs["x"] is x and op.inputs["y"] is mean:
                self.ops.append(op)
                self.centred.append(op.outputs[0])
        for d in self.centred:  # mean((x - mean)²)
            for sq in edit.readers(d):
                if _square_of(sq) is d:
                    for var, ops in _reductions(edit, sq.outputs[0], self.axes):
                        self.ops += [sq, *ops]
                        return var
        for sq in edit.readers(mean):  # mean(x²) - mean²
            if _square_of(sq) is not mean:
                continue
            diff = edit.sole_reader(sq.outputs[0])
            if diff is None or diff.type != "sub" or diff.inputs["y"] is not sq.outputs[0]:
                continue
            for sq_x in edit.readers(x):
                if _square_of(sq_x) is not x:
                    continue
                for var, ops in _reductions(edit, sq_x.outputs[0], self.axes):
                    if diff.inputs["x"] is var:
                        self.ops += [sq, diff, sq_x, *ops]
                        return diff.outputs[0]
        return None

    def root(self, var: Var) -> tuple[float, Var, bool] | None:
        """(epsilon, the root, whether it is the inverse root) of var + epsilon."""
        epsilon = 0.0
        step = self.edit.sole_reader(var)
        if step is not None and step.type == "add":
            other = operands(step, var)
            value = None if other is None else scalar(other)
            if value is None or value < 0:
                return None
            self.ops.append(step)
            epsilon, var = value, step.outputs[0]
            step = self.edit.sole_reader(var)
        if step is None or step.inputs.get("x") is not var:
            return None
        if step.type == "rsqrt":
            given = scalar(step.var("epsilon")) if "epsilon" in step.inputs else _RSQRT_EPSILON
            if given is None:
                return None
            epsilon, inverse = epsilon + given, True
        elif step.type == "pow" and close(scalar(step.var("y")), -0.5):
            inverse = True
        elif step.type == "sqrt" or (step.type == "pow" and close(scalar(step.var("y")), 0.5)):
            inverse = False
        else:
            return None
        self.ops.append(step)
        return epsilon, step.outputs[0], inverse

    def centred_tail(self, root: Var, inverse: bool) -> Var | None:
        """d · root (inverse) or d / root."""
        op = self.edit.sole_reader(root)
        if op is None:
            return None
        if inverse and op.type == "mul" and any(operands(op, root) is d for d in self.centred):
            self.ops.append(op)
            return op.outputs[0]
        divides = not inverse and op.type == "real_div" and op.inputs["y"] is root
        if divides and any(op.inputs["x"] is d for d in self.centred):
            self.ops.append(op)
            return op.outputs[0]
        return None

    def shift_tail(self, root: Var) -> tuple[np.ndarray | None, np.ndarray | None, Var] | None:
        """x·s - mean·s, s = root [· gamma]: (gamma, beta, y)."""
        edit, gamma, s = self.edit, None, root
        readers = edit.readers(s)
        if len(readers) == 1 and readers[0].type == "mul":
            scale = operands(readers[0], s)
            gamma = None if scale is None else wide(scale)
            if gamma is None:
                return None
            self.ops.append(readers[0])
            s = readers[0].outputs[0]
            readers = edit.readers(s)
        if len(readers) != 2 or any(op.type != "mul" for op in readers):
            return None
        xs = next((op for op in readers if operands(op, s) is self.x), None)
        ms = next((op for op in readers if operands(op, s) is self.mean), None)
        if xs is None or ms is None or xs is ms:
            return None
        self.ops += [xs, ms]
        xs_out, ms_out = xs.outputs[0], ms.outputs[0]
        last = edit.sole_reader(xs_out)
        if last is None or last.type not in ("add", "sub"):
            return None
        other = operands(last, xs_out)
        if last.type == "sub":
            if last.inputs["x"] is not xs_out or other is not ms_out:
                return None
            self.ops.append(last)
            return gamma, None, last.outputs[0]
        if other is None or other.op is None or edit.sole_reader(other) is not last:
            return None
        inner = other.op
        beta: np.ndarray | None = None
        negated = operands(inner, ms_out) if inner.type == "mul" else None
        if negated is not None and close(scalar(negated), -1.0):
            pass
        elif inner.type == "sub" and inner.inputs["y"] is ms_out:
            beta = wide(inner.var("x"))
            if beta is None:
                return None
        else:
            return None
        self.ops += [inner, last]
        return gamma, beta, last.outputs[0]

    def affine(self, y: Var, gamma, beta):
        """Up to two muls by a constant (gamma) and adds of one (beta) reading y alone, in
        either order: (gamma, beta, y)."""
        for _ in range(2):
            op = self.edit.sole_reader(y)
            if op is None or op.type not in ("mul", "add"):
                break
            other = operands(op, y)
            value = None if other is None else wide(other)
            if value is None or op.outputs[0].type != y.type:
                break
            if op.type == "mul":
                gamma = value if gamma is None else gamma * value
                beta = None if beta is None else beta * value
            else:
                beta = value if beta is None else beta + value
            self.ops.append(op)
            y = op.outputs[0]
        return gamma, beta, y

    def closed(self, y: Var) -> bool:
        """Every value the pattern makes but y is read by the pattern alone."""
        taken = set(map(id, self.ops))
        for op in self.ops:
            for v in op.outputs:
                if v is y:
                    continue
                if self.edit.is_output(v) or any(id(r) not in taken for r in self.edit.readers(v)):
                    return False
        return True


def _match(edit: Editor, first: Operation):
    found = _mean_from(edit, first)
    if found is None:
        return None
    m = _Match(edit, *found)
    var = m.variance()
    root = None if var is None else m.root(var)
    if root is None:
        return None
    epsilon, r, inverse = root
    y = m.centred_tail(r, inverse)
    gamma = beta = None
    if y is None and inverse:
        shifted = m.shift_tail(r)
        if shifted is None:
            return None
        gamma, beta, y = shifted
    if y is None:
        return None
    gamma, beta, y = m.affine(y, gamma, beta)
    if not m.closed(y):
        return None
    return m.x, m.axes, epsilon, gamma, beta, y, list(dict.fromkeys(m.ops))


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
    for first in edit.ops("reduce_mean", "reduce_sum"):
        if edit.removed(first):
            continue
        found = _match(edit, first)
        if found is None:
            continue
        x, axes, epsilon, gamma, beta, y, ops = found
        shape, dtype = x.tensor.shape, x.tensor.dtype
        if y.type != x.type or any(edit.removed(op) for op in ops):
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
    "a normalization spelt out (mean, sub, square, mean, add, rsqrt, mul[, mul, add], and "
    "coremltools' other spellings) becomes layer_norm or instance_norm",
    run,
    creates=frozenset({"layer_norm", "instance_norm"}),
    needs=frozenset({"reduce_mean", "reduce_sum"}),
)
