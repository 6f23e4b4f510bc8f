"""The MIL primitives a graph node may be: a documented allowlist, their arguments (derived from
the op declarations in app/mil/ops.py) and the error bound each adds to a graph's tolerance.

A node's `op` names a catalog op first: `conv` and `matmul` are the catalog's (with weights and
the ANE layout); the primitives of the same name are `mil.conv` and `mil.matmul`. Every other
primitive answers to its own name or to `mil.<name>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.errors import RequestError
from app.kernels import CATALOG, CatalogOp
from app.mil import OPS
from app.mil.types import DType

PREFIX = "mil."
U = 2.0**-11  # fp16 unit roundoff

# name -> (what it does, its bound on the normwise relative error it adds: none for data
# movement, ~2u for one rounding, 4u for a transcendental or an accumulation)
_ALLOWED: dict[str, tuple[str, float]] = {
    "add": ("x + y (broadcast)", 2 * U),
    "sub": ("x - y (broadcast)", 2 * U),
    "mul": ("x * y (broadcast)", 2 * U),
    "real_div": ("x / y (broadcast)", 2 * U),
    "maximum": ("max(x, y) (broadcast)", 0.0),
    "minimum": ("min(x, y) (broadcast)", 0.0),
    "abs": ("|x|", 0.0),
    "square": ("x²", 2 * U),
    "relu": ("max(x, 0)", 0.0),
    "sigmoid": ("1 / (1 + exp(-x))", 4 * U),
    "silu": ("x · sigmoid(x)", 4 * U),
    "tanh": ("tanh(x)", 4 * U),
    "gelu": ("GELU; mode EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION", 4 * U),
    "exp": ("e^x", 4 * U),
    "sqrt": ("√x", 4 * U),
    "rsqrt": ("1 / √(x + epsilon)", 4 * U),
    "softmax": ("softmax along `axis`", 4 * U),
    "reduce_sum": ("sum over `axes`", 4 * U),
    "reduce_mean": ("mean over `axes`", 4 * U),
    "reduce_max": ("max over `axes`", 0.0),
    "reduce_l2_norm": ("√Σx² over `axes`", 4 * U),
    "matmul": ("x · y, batched (transpose_x, transpose_y)", 4 * U),
    "conv": ("convolution (MIL's own arguments)", 4 * U),
    "scaled_dot_product_attention": (
        "softmax(query·keyᵀ/√E)·value (ios18; the ANE ignores attn_mask: see the preflight)",
        10 * U,
    ),
    "reshape": ("reshape to `shape`", 0.0),
    "transpose": ("permute axes by `perm`", 0.0),
    "expand_dims": ("insert axes of size 1", 0.0),
    "squeeze": ("remove axes of size 1", 0.0),
    "tile": ("repeat `reps` times per axis", 0.0),
    "concat": ("join `values` along `axis` (a list of references)", 0.0),
    "split": (
        "cut along `axis` into `num_splits` or `split_sizes` outputs: node.0, node.1, …",
        0.0,
    ),
    "slice_by_size": ("x[begin : begin + size] per axis", 0.0),
    "slice_by_index": ("x[begin:end:stride] per axis, with masks", 0.0),
    "cast": ("to `dtype` (fp16, fp32, int32, bool)", 2 * U),
}


@dataclass(frozen=True)
class Primitive:
    name: str  # the MIL op
    summary: str
    tolerance: float

    @property
    def tensor_args(self) -> list[str]:
        return [a for a, spec in OPS[self.name].args.items() if not spec.const]

    @property
    def param_args(self) -> list[str]:
        return [a for a, spec in OPS[self.name].args.items() if spec.const]


PRIMITIVES: dict[str, Primitive] = {n: Primitive(n, *about) for n, about in _ALLOWED.items()}


def resolve_op(name: str, field: str) -> CatalogOp | Primitive:
    """What a node's `op` names: a catalog op usable as a node, or an allowed primitive."""
    if name in CATALOG:
        op = CATALOG[name]
        if op.bind is None:
            raise RequestError(
                field, f"catalog op {name!r} cannot be a graph node (it needs a state)"
            )
        return op
    primitive = PRIMITIVES.get(name.removeprefix(PREFIX))
    if primitive is None:
        raise RequestError(
            field,
            f"{name!r} is neither a catalog op nor an allowed MIL primitive; the primitives: "
            f"{', '.join(PRIMITIVES)} (GET /v1/ops)",
        )
    return primitive


def _dtypes(opdef, spec) -> list[str]:
    allowed = opdef.domains.get(spec.dtypes) if isinstance(spec.dtypes, str) else spec.dtypes
    allowed = allowed or frozenset({DType.FP16, DType.FP32, DType.INT32, DType.BOOL})
    return sorted(d.value for d in allowed)


def describe() -> list[dict[str, Any]]:
    """The allowlist as data (GET /v1/ops): per primitive its arguments and what they take."""
    out = []
    for name, p in PRIMITIVES.items():
        opdef = OPS[name]
        args = {
            arg: {
                "in": "params" if spec.const else "inputs",
                "required": not spec.optional,
                "dtypes": _dtypes(opdef, spec),
                **({"list": True} if spec.variadic else {}),
            }
            for arg, spec in opdef.args.items()
        }
        spelled = f"{PREFIX}{name}" if name in CATALOG else name
        out.append(
            {
                "name": spelled,
                "summary": p.summary,
                "arguments": args,
                "since": opdef.since,
                "tolerance": p.tolerance,
            }
        )
    return out
