"""The op catalog: one module per op, each declaring its params, weights, program, float64
meaning and tolerance. `app.catalog_build.build_kernel` turns a request for one into a checked
MIL program:

    from app.catalog_build import build_kernel
    built = build_kernel("conv", {"in_channels": 64, "out_channels": 64, "spatial": 16},
                         {"weight": w}, target="ios18")
"""

from app.kernels.catalog import CATALOG, KernelBuild, ProgramBuild, get_op, parse_params
from app.kernels.op import CatalogOp, WeightDoc, WeightSpec
from app.kernels.params import OpParams

__all__ = [
    "CATALOG",
    "CatalogOp",
    "KernelBuild",
    "OpParams",
    "ProgramBuild",
    "WeightDoc",
    "WeightSpec",
    "get_op",
    "parse_params",
]
