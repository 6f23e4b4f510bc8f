"""Quantized weights in real programs: a 1×1 conv whose weight is a constexpr output, for each mode,
target and several sizes. The .mlpackage loads under coremltools' milproto loader, the model.mil
bundle parses back, and the weight the reference executor decompresses equals the quantizer's
and coremltools' own decompression of the package it loaded."""

import numpy as np
import pytest
from quantize_support import (
    DATA_DIR,
    conv_program,
    coremltools_decompress_compressed,
    coremltools_weight,
    write_mil_bundle,
    write_mlpackage,
    write_weights,
)

from app.mil import Builder, DType
from app.mil.to_proto import emit_proto
from app.packaging import build_info
from app.quantize import parse_config
from app.quantize.compress import quantize
from app.reference import Executor
from app.reference.load import open_artifact
from app.reference.validation import validate

SIZES = [(4, 8, 1, 1), (6, 20, 1, 1), (32, 64, 1, 1)]
CONFIGS = [
    *(("ios18", {"mode": "palettize", "nbits": n}) for n in (1, 2, 3, 4, 6, 8)),
    (
        "ios18",
        {"mode": "palettize", "nbits": 3, "granularity": "per_grouped_channel", "group_size": 2},
    ),
    *(("ios17", {"mode": "palettize", "nbits": n}) for n in (1, 2, 4, 6, 8)),
    *(
        ("ios18", {"mode": "linear", "dtype": d, "symmetric": s})
        for d in ("int8", "uint8", "int4", "uint4")
        for s in (True, False)
    ),
    ("ios18", {"mode": "linear", "dtype": "int4", "granularity": "per_block", "block_size": 4}),
    (
        "ios18",
        {
            "mode": "linear",
            "dtype": "uint8",
            "granularity": "per_block",
            "block_size": 4,
            "symmetric": False,
        },
    ),
    ("ios18", {"mode": "linear", "granularity": "per_tensor"}),
    *(
        ("ios17", {"mode": "linear", "dtype": d, "symmetric": s})
        for d in ("int8", "uint8")
        for s in (True, False)
    ),
    ("ios17", {"mode": "linear", "granularity": "per_tensor", "symmetric": False}),
    ("ios18", {"mode": "prune", "target_sparsity": 0.5}),
    ("ios18", {"mode": "prune", "target_sparsity": 0.7, "dtype": "int8"}),
    ("ios17", {"mode": "prune", "target_sparsity": 0.3}),
]
CASES = [
    pytest.param(
        target,
        config,
        shape,
        id=f"{target}-{'-'.join(map(str, config.values()))}-{shape[0]}x{shape[1]}",
    )
    for target, config in CONFIGS
    for shape in SIZES
]


def weight(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(("target", "config", "shape"), CASES)
def test_quantized_conv_loads_and_decompresses_alike(tmp_path, target, config, shape):
    compressed = quantize(weight(shape), parse_config(config), target)
    program = conv_program(compressed, target)

    pkg = write_mlpackage(program, tmp_path)
    assert validate(pkg).kind == "mlpackage"  # coremltools' milproto loader, every blob read
    bundle = write_mil_bundle(program, tmp_path / "mil")
    assert validate(bundle).kind == "mil"  # model.mil parsed back through the builder

    expected = coremltools_decompress_compressed(compressed)
    np.testing.assert_array_equal(compressed.decompressed, expected)
    np.testing.assert_array_equal(coremltools_weight(pkg), expected)
    for artifact in (pkg, bundle):  # the executor decompresses what the artifact stores
        loaded = open_artifact(artifact).program
        blob = (pkg / DATA_DIR if artifact == pkg else bundle) / "weights" / "weight.bin"
        offsets = write_weights(loaded)[1]
        run = Executor(loaded, weights=blob.read_bytes(), offsets=offsets).run(
            {"x": np.ones((1, shape[1], 1, 3), np.float16)}, keep=True
        )
        assert run.values is not None
        np.testing.assert_array_equal(run.values["w"], compressed.decompressed)
        assert run.values["w"].dtype == np.float16


@pytest.mark.parametrize(("target", "config"), CONFIGS[::3])
def test_conv_output_is_the_conv_of_the_decompressed_weight(target, config):
    compressed = quantize(weight((8, 16, 1, 1), 3), parse_config(config), target)
    b = Builder(target)
    x = b.input("x", DType.FP16, (1, 16, 1, 5))
    dense = b.build([b.op("conv", "y", x=x, weight=b.const("w", compressed.decompressed))])
    inputs = {"x": np.random.default_rng(1).standard_normal((1, 16, 1, 5)).astype(np.float16)}
    got = Executor.from_written_weights(conv_program(compressed, target, 5)).run(inputs)
    want = Executor.from_written_weights(dense).run(inputs)
    np.testing.assert_array_equal(got.outputs["y"], want.outputs["y"])


@pytest.mark.parametrize(("target", "config"), CONFIGS[::2])
def test_same_request_same_bytes(target, config):
    def package():
        program = conv_program(
            quantize(weight((6, 20, 1, 1), 7), parse_config(config), target), target
        )
        blob, offsets = write_weights(program)
        return blob, emit_proto(program, offsets, build_info()).SerializeToString(
            deterministic=True
        )

    assert package() == package()


def test_compressed_sizes_are_what_the_format_stores():
    w = weight((64, 64, 1, 1))
    fp16 = w.size * 2
    palette = quantize(w, parse_config({"mode": "palettize", "nbits": 4}))
    assert palette.nbytes == w.size // 2 + 16 * 2  # packed 4-bit indices + a 16-entry fp16 LUT
    int4 = quantize(w, parse_config({"mode": "linear", "dtype": "int4"}))
    assert int4.nbytes == w.size // 2 + 64 * 2  # + one fp16 scale per channel, no offset
    assert palette.nbytes < fp16 / 3 and int4.nbytes < fp16 / 3
