"""Our constexpr arguments against what `coremltools.optimize.coreml` writes when it compresses the
same fp16 weight in a package of ours: identical for linear quantization and pruning, identical
for palettization where coremltools clusters with its bundled kmeans1d (fp16 groups of 10,000
elements or more). Below that coremltools calls scikit-learn, which is not installed here; there
the optimality of kmeans1d is checked instead (no other LUT of that size does better)."""

import contextlib
import io

import numpy as np
import pytest
from quantize_support import write_mlpackage

from app.mil import Builder, DType
from app.quantize import parse_config
from app.quantize.compress import quantize

with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    import coremltools as ct
    from coremltools.optimize import coreml as cto


def coremltools_compressed(tmp_path, w16, target, *passes):
    """Each constexpr op coremltools' passes leave in the program: (type, {argument: value})."""
    b = Builder(target)
    x = b.input("x", DType.FP16, (1, w16.shape[1], 1, 2))
    program = b.build([b.op("conv", "y", x=x, weight=b.const("w", w16))])
    model = ct.models.MLModel(str(write_mlpackage(program, tmp_path)), skip_model_load=True)
    with contextlib.redirect_stderr(io.StringIO()):
        for apply, config, kwargs in passes:
            model = apply(model, cto.OptimizationConfig(global_config=config), **kwargs)
    ops = model._mil_program.functions["main"].operations
    return [
        (
            op.op_type,
            {k: np.asarray(v.val) for k, v in op.inputs.items() if v.op.op_type == "const"},
        )
        for op in ops
        if op.op_type.startswith("constexpr_")
    ]


def ours(w16, config, target):
    compressed = quantize(w16, parse_config(config), target)
    return [(op.op_type, {k: p.array for k, p in op.params.items()}) for op in compressed.ops]


def assert_same(got, want):
    assert [t for t, _ in got] == [t for t, _ in want]
    for (_, a), (_, b) in zip(got, want, strict=True):
        assert set(a) == set(b)
        for name in a:
            np.testing.assert_array_equal(a[name], b[name].reshape(a[name].shape), err_msg=name)
            assert b[name].reshape(a[name].shape).shape == a[name].shape


def weight16(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float16)


LINEAR = [
    ("ios18", {"dtype": "int8"}, dict(dtype="int8")),
    ("ios18", {"dtype": "uint8", "symmetric": False}, dict(dtype="uint8", mode="linear")),
    (
        "ios18",
        {"dtype": "int4", "granularity": "per_block", "block_size": 8},
        dict(dtype="int4", granularity="per_block", block_size=8),
    ),
    (
        "ios18",
        {"dtype": "uint4", "granularity": "per_block", "block_size": 16, "symmetric": False},
        dict(dtype="uint4", granularity="per_block", block_size=16, mode="linear"),
    ),
    (
        "ios18",
        {"granularity": "per_tensor", "symmetric": False},
        dict(granularity="per_tensor", mode="linear"),
    ),
    ("ios17", {"dtype": "int8"}, dict(dtype="int8")),
    ("ios17", {"dtype": "uint8", "symmetric": False}, dict(dtype="uint8", mode="linear")),
]


@pytest.mark.parametrize(("target", "config", "ct_config"), LINEAR)
@pytest.mark.parametrize("shape", [(16, 32, 1, 1), (48, 64, 1, 1)])
def test_linear_matches_coremltools_optimize(tmp_path, target, config, ct_config, shape):
    w16 = weight16(shape)
    ct_config = cto.OpLinearQuantizerConfig(weight_threshold=0, **ct_config)
    want = coremltools_compressed(
        tmp_path, w16, target, (cto.linear_quantize_weights, ct_config, {})
    )
    assert_same(ours(w16, {"mode": "linear", **config}, target), want)


@pytest.mark.parametrize("target", ["ios18", "ios17"])
@pytest.mark.parametrize("sparsity", [0.3, 0.75])
def test_prune_matches_coremltools_optimize(tmp_path, target, sparsity):
    w16 = weight16((24, 40, 1, 1), 2)
    ct_config = cto.OpMagnitudePrunerConfig(target_sparsity=sparsity, weight_threshold=0)
    want = coremltools_compressed(tmp_path, w16, target, (cto.prune_weights, ct_config, {}))
    assert_same(ours(w16, {"mode": "prune", "target_sparsity": sparsity}, target), want)


def test_pruned_int8_matches_coremltools_joint_compression(tmp_path):
    w16 = weight16((24, 40, 1, 1), 3)
    want = coremltools_compressed(
        tmp_path,
        w16,
        "ios18",
        (
            cto.prune_weights,
            cto.OpMagnitudePrunerConfig(target_sparsity=0.6, weight_threshold=0),
            {},
        ),
        (
            cto.linear_quantize_weights,
            cto.OpLinearQuantizerConfig(weight_threshold=0),
            {"joint_compression": True},
        ),
    )
    got = ours(w16, {"mode": "prune", "target_sparsity": 0.6, "dtype": "int8"}, "ios18")
    assert_same(got[:1], want[:1])
    # coremltools feeds sparse_to_dense the const mask again, we chain the first op's mask
    # output; for scalar quantization the two are the same mask.
    assert [t for t, _ in got] == [t for t, _ in want]
    np.testing.assert_array_equal(want[1][1]["mask"], got[0][1]["data_mask"])


PALETTES = [
    ("ios18", {"nbits": 4}, dict(nbits=4), (64, 256, 1, 1)),
    ("ios18", {"nbits": 2}, dict(nbits=2), (40, 300, 1, 1)),
    (
        "ios18",
        {"nbits": 3, "granularity": "per_grouped_channel", "group_size": 16},
        dict(nbits=3, granularity="per_grouped_channel", group_size=16),
        (64, 640, 1, 1),
    ),
    ("ios17", {"nbits": 6}, dict(nbits=6), (32, 512, 1, 1)),
]


@pytest.mark.parametrize(("target", "config", "ct_config", "shape"), PALETTES)
def test_palettes_match_coremltools_where_it_uses_kmeans1d(
    tmp_path, target, config, ct_config, shape
):
    w16 = weight16(shape, 4)
    ct_config = cto.OpPalettizerConfig(mode="kmeans", weight_threshold=0, **ct_config)
    want = coremltools_compressed(tmp_path, w16, target, (cto.palettize_weights, ct_config, {}))
    assert_same(ours(w16, {"mode": "palettize", **config}, target), want)


@pytest.mark.parametrize("nbits", [1, 2, 3, 4])
def test_small_palettes_are_optimal(nbits):
    """On few values the best LUT can be found by brute force: ours is no worse."""
    from itertools import combinations

    w16 = weight16((3, 4), nbits)
    compressed = quantize(w16, parse_config({"mode": "palettize", "nbits": nbits}))
    error = float(np.sum((compressed.decompressed.astype(np.float64) - w16) ** 2))
    values = np.sort(w16.astype(np.float64).reshape(-1))
    best = np.inf
    k = min(1 << nbits, values.size)
    for cuts in combinations(range(1, values.size), k - 1):  # optimal 1-D clusters are intervals
        parts = np.split(values, cuts)
        best = min(best, sum(float(np.sum((p - p.mean()) ** 2)) for p in parts))
    # the centroids are stored in fp16: allow their rounding, nothing more
    assert error <= best + values.size * float(np.abs(values).max()) * 2.0**-10
