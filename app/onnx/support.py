"""Which ONNX ops import, and which wait: one table, read by the importer (to refuse) and by
docs/onnx.md's op table (held to it by the tests).

An op *waits* when lowering it needs a MIL primitive the IR does not have yet (app/mil): it is
refused, naming the primitive, until that primitive is added as a record. An op is *refused*
where no primitive could lower it (an output whose shape depends on the data). Ops whose inputs are all
known at import (shape arithmetic, constant subgraphs) are evaluated then, whatever their type,
and never reach this table.
"""

from __future__ import annotations

# ONNX op -> the MIL primitive its lowering waits on
WAITING: dict[str, str] = {}

# ONNX op -> why it is refused (where it is not evaluated at import): what no primitive can give
# a program whose shapes are all known when it is built
REFUSED: dict[str, str] = {
    "NonZero": "on an input computed from the data (its output's shape depends on the data)",
    "Compress": "on a condition computed from the data (its output's shape depends on the data)",
    "Range": "on bounds computed from the data (its output's shape depends on the data)",
    "Upsample": "always: deprecated since opset 10, so in no opset the importer reads (export "
    "with Resize)",
}

# How each supported op is lowered (docs/onnx.md's table); the importer's handlers implement them.
SUPPORTED: dict[str, str] = {
    "Identity": "removed",
    "Dropout": "removed (inference)",
    "Constant": "a constant",
    "Cast": "cast (floats to fp16, integers to int32); of a constant, evaluated",
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "real_div",
    "Neg": "mul by -1",
    "Reciprocal": "real_div of 1",
    "Abs": "abs",
    "Max": "maximum, pairwise",
    "Min": "minimum, pairwise",
    "Sum": "add, pairwise",
    "Mean": "add, pairwise, then mul by 1/n",
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Exp": "exp",
    "Sqrt": "sqrt",
    "Pow": "pow; a constant exponent 2 → square, 3 → square·x, 0.5 → sqrt, -0.5 → rsqrt, "
    "-1 → real_div, 1 → removed; a constant base (2 ** x) as pow of it",
    "Softmax": "softmax",
    "Gelu": "gelu (EXACT, or TANH_APPROXIMATION for approximate='tanh')",
    "Erf": "erf; in the GELU pattern x·½·(1+erf(x/√2)), one gelu EXACT",
    "Log": "log",
    "LogSoftmax": "d − log(reduce_sum(exp(d))), d = x − reduce_max(x)",
    "Softplus": "softplus",
    "Mish": "x · tanh(softplus(x))",
    "Elu": "elu",
    "Selu": "γ · elu(x, α)",
    "Celu": "α · elu(x/α, 1)",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round (halves to even)",
    "Sign": "sign",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "sin / cos",
    "Atan": "atan",
    "Asin": "asin (not on the ANE: Core ML runs it beside the ANE's partition)",
    "Acos": "acos (not on the ANE: Core ML runs it beside the ANE's partition)",
    "Mod": "fmod=0 (integers): x − floor_div(x, y)·y; fmod=1: sign(x)·(|x| − floor_div(|x|, |y|)·|y|)",
    "Equal": "equal (of bools: not xor)",
    "Less": "less",
    "LessOrEqual": "less_equal",
    "Greater": "greater",
    "GreaterOrEqual": "greater_equal",
    "Not": "logical_not",
    "And": "select(x, y, x)",
    "Or": "select(x, x, y)",
    "Xor": "logical_xor",
    "IsNaN": "not_equal(x, x)",
    "IsInf": "greater(abs(x), 65504) (fp16's largest finite value), or of x, or less than −65504",
    "ThresholdedRelu": "select(x > alpha, x, 0)",
    "Shrink": "two selects between x + bias, x − bias and 0",
    "LeakyRelu": "maximum(x, alpha·x); leaky_relu for alpha outside [0, 1]",
    "PRelu": "relu(x) + slope·minimum(x, 0)",
    "HardSigmoid": "minimum(maximum(alpha·x + beta, 0), 1)",
    "HardSwish": "x · hard sigmoid(alpha 1/6, beta 1/2)",
    "Clip": "maximum, minimum (constant bounds)",
    "Softsign": "x / (1 + abs(x))",
    "MatMul": "matmul (rank-1 operands through expand_dims, squeeze)",
    "Gemm": "matmul (transpose_x, transpose_y), alpha and beta folded into constants, add",
    "Conv": "conv (1D, 2D, 3D; pads, strides, dilations, groups; SAME_UPPER/LOWER as pads)",
    "BatchNormalization": "mul, add (inference: scale and shift folded from the statistics)",
    "LayerNormalization": "reduce_mean, sub, mul, reduce_mean, add, rsqrt, mul, mul, add",
    "InstanceNormalization": "as LayerNormalization over the spatial axes, per channel",
    "GroupNormalization": "reshape to groups, normalized as LayerNormalization, reshape",
    "ReduceMean": "reduce_mean (axes as attribute to opset 17, as input from 18)",
    "ReduceSum": "reduce_sum",
    "ReduceMax": "reduce_max",
    "ReduceMin": "-reduce_max(-x)",
    "ReduceL2": "reduce_l2_norm",
    "ReduceSumSquare": "square, reduce_sum",
    "GlobalAveragePool": "reduce_mean over the spatial axes",
    "ReduceProd": "reduce_prod",
    "ReduceL1": "reduce_sum(abs(x))",
    "ReduceLogSum": "log(reduce_sum(x))",
    "ReduceLogSumExp": "m + log(reduce_sum(exp(x − m))), m = reduce_max(x)",
    "Pad": "pad (constant, reflect, edge; pads known at import; negative pads as a slice)",
    "AveragePool": "avg_pool (pads, SAME_UPPER/LOWER, ceil_mode, count_include_pad)",
    "MaxPool": "max_pool (pads, SAME_UPPER/LOWER, ceil_mode; not its Indices output)",
    "LpPool": "p = 1: avg_pool(abs(x)) · kernel size; p = 2: √(avg_pool(x²) · kernel size)",
    "ConvTranspose": "conv_transpose (pads, output_padding, output_shape, SAME_UPPER/LOWER, "
    "groups, dilations)",
    "DepthToSpace": "depth_to_space (DCR), pixel_shuffle (CRD)",
    "SpaceToDepth": "space_to_depth",
    "Resize": "nearest as upsample_nearest_neighbor where it reads ONNX's rows (the last two "
    "axes; asymmetric + floor, or half-pixel + round at whole scales), else as a gather of "
    "ONNX's rows on each axis that moves (any axes, scales and rounding; not "
    "tf_crop_and_resize or half_pixel_symmetric); linear as upsample_bilinear on the last two "
    "axes (half_pixel, pytorch_half_pixel, align_corners, asymmetric); not cubic",
    "GridSample": "resample (4-D; bilinear/linear, nearest; zeros, border, reflection padding; "
    "align_corners); not cubic",
    "RoiAlign": "resample of each region's sample points (border padding, a mask for points "
    "beyond a pixel outside); mode avg: bilinear, avg_pool of each bin; mode max (onnxruntime's: "
    "the largest weighted corner of a bin's samples): four nearest resamples times their "
    "weights, maximum, max_pool; several images: each region keeps its image's samples (a "
    "one-hot of batch_indices, known at import or computed); a sampling_ratio, or 0 over "
    "regions known at import",
    "Einsum": "one or two operands: transposes, reshapes, reduce_sum and one matmul "
    "(bhid,bhjd->bhij reads k with transpose_y)",
    "GlobalMaxPool": "reduce_max over the spatial axes",
    "LpNormalization": "real_div by reduce_l2_norm (p = 2) or reduce_sum of abs (p = 1), a zero "
    "norm giving zeros as onnxruntime does",
    "MeanVarianceNormalization": "reduce_mean, sub, mul, reduce_mean, sqrt, maximum, real_div "
    "(a constant slice giving zeros, as ONNX's function; onnxruntime gives NaN)",
    "Transpose": "transpose",
    "Reshape": "reshape (the shape known at import; 0 copies a dimension)",
    "Flatten": "reshape",
    "Squeeze": "reshape",
    "Unsqueeze": "reshape",
    "Concat": "concat",
    "Split": "split (sizes as input to opset 17, num_outputs from 18)",
    "Slice": "slice_by_index (starts, ends, axes, steps known at import)",
    "Gather": "indices known at import: slice_by_index, or a concat of slices; computed ones "
    "(an embedding lookup): a table of at most 2048 rows as a one-hot product (equal, cast, "
    "matmul: on the ANE), a larger one (a vocabulary) or a computed x as gather (on the CPU)",
    "GatherElements": "gather_along_axis",
    "GatherND": "indices known at import: slices of x with its indexed axes flattened; computed "
    "ones: gather_nd",
    "ScatterElements": "scatter_along_axis (reduction none, add, mul, max, min)",
    "ScatterND": "indices known at import: scatter_along_axis over the flattened data; computed "
    "ones: scatter_nd",
    "OneHot": "one_hot (depth and values known at import)",
    "Trilu": "band_part; a band off the main diagonal as x − band_part (k known at import)",
    "TopK": "topk (k known at import; sorted)",
    "ArgMax": "reduce_argmax; select_last_index on the axis reversed (slice_by_index)",
    "ArgMin": "reduce_argmin; select_last_index on the axis reversed (slice_by_index)",
    "CumSum": "cumsum (axis known at import)",
    "Expand": "tile (and reshape for a higher rank)",
    "Tile": "tile",
    "Shape": "evaluated at import",
    "Size": "evaluated at import",
    "ConstantOfShape": "evaluated at import",
    "Range": "evaluated at import",
    "NonZero": "evaluated at import",
    "Compress": "evaluated at import",
    "Where": "select",
    "DequantizeLinear": "of an int8/uint8 weight (weight-only QDQ): constexpr_affine_dequantize, "
    "kept compressed; on activations: dequantize (of an int32 input: cast, sub, mul)",
    "QuantizeLinear": "quantize (int8, uint8; scalar or per-axis scale and zero point)",
}

MICROSOFT_ADVICE = (
    "com.microsoft fused ops are what onnxruntime's optimizer writes (optimum-cli export onnx "
    "--optimize O1-O4, or onnxruntime.transformers.optimizer): export without --optimize"
)
