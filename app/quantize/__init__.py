"""Quantized weights: palettization, linear quantization and pruning on NumPy arrays, returning
the arguments of the constexpr op(s) that rebuild the weight and the weight they rebuild.

The package exports what describes and places compressed weights (configs, results, the ops that
rebuild them), which loads without coremltools. The compressing itself runs coremltools' own
arithmetic: `from app.quantize.compress import quantize`."""

from app.quantize.config import (
    LINEAR_DTYPES,
    PALETTE_BITS,
    LinearConfig,
    PalettizeConfig,
    PruneConfig,
    QuantizeConfig,
    QuantizeConfigError,
    check_config,
    check_target,
    config_json,
    parse_config,
)
from app.quantize.emit import add_compressed
from app.quantize.result import Compressed, ConstexprOp, Param

__all__ = [
    "LINEAR_DTYPES",
    "PALETTE_BITS",
    "Compressed",
    "ConstexprOp",
    "LinearConfig",
    "PalettizeConfig",
    "Param",
    "PruneConfig",
    "QuantizeConfig",
    "QuantizeConfigError",
    "add_compressed",
    "check_config",
    "check_target",
    "config_json",
    "parse_config",
]
