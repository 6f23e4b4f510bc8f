"""fuse_pad_conv: a constant pad of zeros along a convolution's spatial axes, read by the conv
alone, is the conv's own padding (pad_type custom, the amounts added); through a transpose
between them (the seed's pad → transpose → conv: the pad moves after the transpose, then
melds), the amounts follow the permutation. A pad of another value or mode, one that pads the
batch or channel axes, or a conv with pad_type same, is left."""

from __future__ import annotations

import numpy as np

from app.mil.ir import Operation, Var
from app.mil.types import DType
from app.passes.edit import Editor
from app.passes.graph_pass import GraphPass, Options
from app.passes.pad_parts import pad_of
from app.passes.patterns import stored


def _conv_pad(conv: Operation, spatial: int) -> list[int] | None:
    pad_type = str(stored(conv.var("pad_type"))) if "pad_type" in conv.inputs else "valid"
    if pad_type == "valid":
        return [0] * (2 * spatial)
    if pad_type == "custom":
        given = stored(conv.var("pad")) if "pad" in conv.inputs else [0] * (2 * spatial)
        return [int(v) for v in np.asarray(given).reshape(-1)]
    return None


def run(edit: Editor, options: Options) -> None:
    for pad in edit.ops("pad"):
        parts = pad_of(pad)
        if parts is None or parts.mode != "constant" or parts.value != 0.0:
            continue
        out: Var = pad.outputs[0]
        reader = edit.sole_reader(out)
        pairs, between = list(parts.pairs), None
        if reader is not None and reader.type == "transpose":
            perm = stored(reader.var("perm"))
            between, out = reader, reader.outputs[0]
            pairs = [pairs[int(p) % len(pairs)] for p in np.asarray(perm).reshape(-1)]
            reader = edit.sole_reader(out)
        if reader is None or reader.type != "conv" or reader.var("x") is not out:
            continue
        conv, spatial = reader, len(pairs) - 2
        if any(pairs[0]) or any(pairs[1]):
            continue
        own = _conv_pad(conv, spatial)
        if own is None:
            continue
        total = [own[i] + pairs[2 + i // 2][i % 2] for i in range(2 * spatial)]
        source: Var = pad.var("x")
        if between is not None:
            moved = edit.op(
                "transpose",
                between.name,
                {"x": source, "perm": between.var("perm")},
                between,
                out=[between.outputs[0].name],
            )
            source = moved.outputs[0]
        args = dict(conv.inputs)
        args["x"] = source
        args["pad_type"] = edit.const(f"{conv.name}_pad_type", "custom", DType.FP16, conv)
        args["pad"] = edit.const(f"{conv.name}_pad", np.array(total, np.int32), DType.INT32, conv)
        y = conv.outputs[0]
        new = edit.op("conv", conv.name, args, conv, out=[y.name])
        edit.replace(y, new.outputs[0])
        edit.drop(conv, *([between] if between is not None else []), pad)


PASS = GraphPass(
    "fuse_pad_conv",
    "optimize_conv",
    "a zero pad of a conv's spatial axes becomes the conv's own padding",
    run,
    needs=frozenset({"pad"}),
)
