"""fuse_conv_batchnorm: a batch_norm reading a convolution (conv or conv_transpose) alone is the
same convolution with its weight and bias changed: with s = gamma / √(variance + epsilon), output
channel o's weights times s[o] and b'[o] = s[o]·(b[o] - mean[o]) + beta[o], when the weight and
every parameter are plain consts."""

from __future__ import annotations

import numpy as np

from app.passes.conv_parts import bias_of, fold_into, scale_out_channels, weight_of
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.patterns import fits, wide

_EPSILON = 1e-5  # batch_norm's default (app/mil/ops/normalization.py)


def _param(op, arg: str, default: float, channels: int) -> np.ndarray | None:
    if arg not in op.inputs:
        return np.full(channels, default)
    value = wide(op.inputs[arg])
    return None if value is None else value.reshape(-1).astype(np.float64)


def run(edit: Editor, options: Options) -> None:
    for conv in edit.ops("conv", "conv_transpose"):
        y = conv.outputs[0]
        norm = edit.sole_reader(y)
        if norm is None or norm.type != "batch_norm" or norm.outputs[0].type != y.type:
            continue
        channels = y.tensor.shape[1]
        mean, variance, gamma, beta, epsilon = (
            _param(norm, "mean", 0.0, channels),
            _param(norm, "variance", 1.0, channels),
            _param(norm, "gamma", 1.0, channels),
            _param(norm, "beta", 0.0, channels),
            _param(norm, "epsilon", _EPSILON, 1),
        )
        weight, bias = weight_of(conv), bias_of(conv)
        if (
            mean is None
            or variance is None
            or gamma is None
            or beta is None
            or epsilon is None
            or weight is None
            or bias is None
        ):
            continue
        scale = gamma / np.sqrt(variance + epsilon[0])
        weight = scale_out_channels(conv, weight, scale)
        bias = (bias - mean) * scale + beta
        w = conv.var("weight")
        if not np.all(np.isfinite(scale)) or not fits(weight, w) or not fits(bias, w):
            continue
        fold_into(edit, conv, norm, weight, bias)


PASS = GraphPass(
    "fuse_conv_batchnorm",
    "optimize_conv",
    "a batch_norm after a conv is folded into the conv's weight and bias",
    run,
    needs=frozenset({"batch_norm"}),
)
