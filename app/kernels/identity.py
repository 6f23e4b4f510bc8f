"""identity: y = x through a 1×1 conv with identity weights (seed GenIdentity / GenIdentityFP16IO)."""

from __future__ import annotations

import numpy as np

from app.kernels.common import FP16, cast_in, cast_out, conv1x1
from app.kernels.spec import Kernel
from app.mil import Builder, DType
from app.schemas import IdentityParams


def build(b: Builder, p: IdentityParams, w: dict[str, np.ndarray]):
    io = DType(p.io_dtype)
    x = b.input("x", io, (1, p.channels, 1, p.spatial))
    eye = np.eye(p.channels, dtype=np.float16).reshape(p.channels, p.channels, 1, 1)
    y = conv1x1(b, "y" if io == FP16 else "conv", cast_in(b, x, FP16), b.const("weight", eye, FP16))
    return [cast_out(b, y, io)]


KERNEL = Kernel(
    name="identity",
    summary="y = x via a 1×1 convolution with identity weights (a round-trip probe)",
    params=IdentityParams,
    build=build,
    inputs={"x": "[1, channels, 1, spatial] io_dtype"},
    outputs={"y": "[1, channels, 1, spatial] io_dtype"},
)
