"""Catalog kernels with a `quantize` option: conv and matmul at several sizes, every mode, both
targets. The zipped .mlpackage loads under coremltools' milproto loader, the weight coremltools
decompresses from it equals the one the reference executor computes with, and verification
passes with its two errors (fp16 storage against the quantized weights, quantization against the
original ones). Bad configs are refused naming the field."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from quantize_support import coremltools_weight

from app.artifacts import kernel_zip, prepare
from app.catalog_build import build_kernel
from app.errors import RequestError
from app.reference import Executor
from app.reference.load import open_artifact
from app.reference.validation import validate
from app.request import KernelRequest

CONFIGS = [
    ("ios18", {"mode": "palettize", "nbits": 4}),
    (
        "ios18",
        {"mode": "palettize", "nbits": 3, "granularity": "per_grouped_channel", "group_size": 16},
    ),
    ("ios18", {"mode": "linear", "dtype": "int8"}),
    (
        "ios18",
        {
            "mode": "linear",
            "dtype": "uint4",
            "granularity": "per_block",
            "block_size": 32,
            "symmetric": False,
        },
    ),
    ("ios18", {"mode": "prune", "target_sparsity": 0.5}),
    ("ios18", {"mode": "prune", "target_sparsity": 0.75, "dtype": "int8"}),
    ("ios17", {"mode": "palettize", "nbits": 6}),
    ("ios17", {"mode": "linear", "dtype": "uint8", "symmetric": False}),
    ("ios17", {"mode": "prune", "target_sparsity": 0.3}),
]
KERNELS = [
    ("conv", {"in_channels": 64, "out_channels": 32, "spatial": 4}),
    (
        "conv",
        {"in_channels": 128, "out_channels": 48, "spatial": 2, "io_dtype": "fp32", "bias": True},
    ),
    ("matmul", {"in_features": 96, "out_features": 64, "tokens": 8}),
]
SEED = 5


def _unzip(data: bytes, root) -> dict:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        zf.extractall(root)
        return {n: zf.read(n) for n in ("kernel.json", "verification.json") if n in zf.namelist()}


@pytest.mark.parametrize(("op", "params"), KERNELS)
@pytest.mark.parametrize(("target", "config"), CONFIGS)
def test_quantized_kernels_load_decompress_alike_and_verify(tmp_path, op, params, target, config):
    data = kernel_zip(
        op,
        params,
        format="mlpackage",
        target=target,
        verify=True,
        random_seed=SEED,
        quantize=config,
    )
    files = _unzip(data, tmp_path)
    pkg = tmp_path / f"{op}.mlpackage"
    assert validate(pkg).kind == "mlpackage"  # coremltools' loader, every blob read

    build = build_kernel(op, params, target=target, random_seed=SEED, quantize=config)
    dense = build.quantized["weight"].decompressed
    np.testing.assert_array_equal(coremltools_weight(pkg), dense)
    x_shape = build.program.main.inputs[0].tensor.shape
    run = Executor(open_artifact(pkg).program).run({"x": np.ones(x_shape, np.float32)}, keep=True)
    assert run.values is not None
    np.testing.assert_array_equal(run.values["weight"], dense)  # what the executor computes with

    kernel = json.loads(files["kernel.json"])
    quantized = kernel["weights"]["weight"]["quantized"]
    assert quantized["mode"] == config["mode"]
    assert quantized["stored_bytes"] < quantized["fp16_bytes"]
    report = json.loads(files["verification.json"])
    assert report["passed"], report["outputs"]
    assert report["outputs"]["y"]["max_rel_error"] <= report["outputs"]["y"]["tolerance"]
    section = report["quantization"]
    assert section["limit"] is None and section["passed"]
    # Quantizing costs more than fp16 storage does; the report says how much.
    assert section["max_rel_error"] > report["outputs"]["y"]["max_rel_error"]
    assert section["weights"]["weight"] == quantized


def test_same_request_same_bytes_and_the_key_reads_configs_with_their_defaults():
    params = {"in_channels": 64, "out_channels": 32, "spatial": 4}
    config = {"mode": "palettize", "nbits": 4}
    first = kernel_zip("conv", params, random_seed=1, quantize=config)
    assert kernel_zip("conv", params, random_seed=1, quantize=config) == first
    assert kernel_zip("conv", params, random_seed=1) != first

    w = {"weight": np.ones((32, 64), np.float32)}
    plain = KernelRequest.create("conv", params, w)
    short = KernelRequest.create("conv", params, w, quantize=config)
    spelled = KernelRequest.create(
        "conv", params, w, quantize={**config, "granularity": "per_tensor"}
    )
    assert short.key == spelled.key != plain.key
    other = KernelRequest.create("conv", params, w, quantize={**config, "nbits": 6})
    assert other.key != short.key
    again = KernelRequest.from_json(json.loads(json.dumps(short.to_json())))
    assert again.key == short.key and again.quantize == short.quantize


def test_max_quantization_error_fails_the_request_and_passes_within_it():
    params = {"in_channels": 64, "out_channels": 32, "spatial": 4}
    config = {"mode": "palettize", "nbits": 2}
    request = KernelRequest.create("conv", params, quantize=config, max_quantization_error=1e-4)
    assert request.verifies and not request.verify
    with pytest.raises(RequestError) as info:
        prepare(request, random_seed=SEED)
    assert info.value.field == "max_quantization_error"
    assert info.value.title == "Quantization error too large"
    assert info.value.extra["quantization"]["max_rel_error"] > 1e-4

    loose = KernelRequest.create("conv", params, quantize=config, max_quantization_error=0.9)
    report = prepare(loose, random_seed=SEED).verification
    assert report is not None and report["passed"] and report["quantization"]["limit"] == 0.9


@pytest.mark.parametrize(
    ("op", "params", "config", "target", "field"),
    [
        ("conv", {}, {"mode": "palettize", "nbits": 5}, "ios18", "quantize.nbits"),
        (
            "conv",
            {},
            {
                "mode": "palettize",
                "nbits": 4,
                "granularity": "per_grouped_channel",
                "group_size": 5,
            },
            "ios18",
            "quantize.group_size",
        ),
        (
            "conv",
            {},
            {"mode": "linear", "granularity": "per_block", "block_size": 24},
            "ios18",
            "quantize.block_size",
        ),
        (
            "conv",
            {},
            {"mode": "prune", "target_sparsity": 1.5},
            "ios18",
            "quantize.target_sparsity",
        ),
        ("conv", {}, {"mode": "linear", "dtype": "int4"}, "ios17", "quantize.dtype"),
        ("conv", {}, {"mode": "kmeans"}, "ios18", "quantize.mode"),
        ("rmsnorm", {"channels": 64, "spatial": 4}, {"mode": "linear"}, "ios18", "quantize"),
        (
            "matmul",
            {"in_features": 64, "out_features": 32, "tokens": 4, "dynamic": True},
            {"mode": "linear"},
            "ios18",
            "quantize",
        ),
    ],
)
def test_bad_quantize_options_name_the_field(op, params, config, target, field):
    params = params or {"in_channels": 64, "out_channels": 32, "spatial": 4}
    with pytest.raises(RequestError) as info:
        request = KernelRequest.create(op, params, target=target, quantize=config)
        prepare(request, random_seed=SEED)
    assert info.value.field == field, info.value


def test_an_error_limit_needs_something_quantized():
    params = {"in_channels": 8, "out_channels": 8, "spatial": 2}
    for limit, message in ((0.1, "nothing is quantized"), (0, "positive"), (-1, "positive")):
        quantize = None if limit == 0.1 else {"mode": "linear"}
        with pytest.raises(RequestError, match=message) as info:
            KernelRequest.create("conv", params, quantize=quantize, max_quantization_error=limit)
        assert info.value.field == "max_quantization_error"
