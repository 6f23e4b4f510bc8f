"""Small building blocks shared by several kernels."""

from __future__ import annotations

from app.mil import Builder, DType, Var

FP16 = DType.FP16
CONV_1X1 = {"strides": [1, 1], "pad_type": "valid", "pad": [0, 0, 0, 0], "dilations": [1, 1]}


def cast_in(b: Builder, x: Var, compute: DType) -> Var:
    """Cast an input to the compute dtype when the I/O dtype differs (fp32 I/O, fp16 compute)."""
    if x.tensor.dtype == compute:
        return x
    return b.op("cast", f"{x.name}_{compute.value}", x=x, dtype=compute.value)


def cast_out(b: Builder, y: Var, io: DType, name: str = "y") -> Var:
    """Return `y` in the I/O dtype, named `name` (the program output)."""
    if y.tensor.dtype == io:
        return y
    return b.op("cast", name, x=y, dtype=io.value)


def conv1x1(
    b: Builder, name: str, x: Var, weight: Var, bias: Var | None = None, groups: int = 1
) -> Var:
    return b.op("conv", name, x=x, weight=weight, bias=bias, groups=groups, **CONV_1X1)
