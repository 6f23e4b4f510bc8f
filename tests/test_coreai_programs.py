"""The project's programs as Core AI programs, run by Apple's own CPU runtime (coreai-core, in a
child process) and held to each op's fp16 tolerance against its float64 definition: every catalog
example, the graph examples, a decoder layer's two functions, quantized convolutions and matmuls.
What cannot be translated is named before anything is built."""

import numpy as np
import pytest

pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")

from kernel_cases import SMALL, VARIANTS
from test_graphs import FFN_WEIGHTS, MIXED, MIXED_WEIGHTS

from app.coreai import (
    AppleRuntimeError,
    Call,
    aimodel_files,
    run_aimodel,
    run_aimodels,
    translate,
    untranslatable,
)
from app.graphs.examples import swiglu_ffn
from app.language.packing import pack_bits
from app.mil import Builder, DType
from app.reference.apple import apple_report, apple_reports, fp16_accumulations
from app.reference.executor import Executor
from app.reference.verify import draw_inputs, max_errors
from app.request import KernelRequest

CASES = [(op, params) for op, params in SMALL.items()] + VARIANTS


def _build(op, params, weights=None, **options):
    return KernelRequest.create(op, params, weights, **options).build(random_seed=0)


def _assert_passes(report):
    for name, fn in report["functions"].items():
        for kind in ("outputs", "states"):
            for out, check in fn[kind].items():
                assert check["passed"], (name, kind, out, check)
    assert report["passed"]


@pytest.fixture(scope="module")
def catalog_reports() -> list[dict]:
    """Apple's report of every catalog example, all run by one runtime child (the runtime loads
    once, not once an example)."""
    return apple_reports([_build(op, params) for op, params in CASES])


@pytest.mark.parametrize(
    "case", range(len(CASES)), ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)]
)
def test_each_catalog_example_runs_on_apples_runtime_within_its_tolerance(case, catalog_reports):
    _assert_passes(catalog_reports[case])


def test_a_sweep_in_one_child_reports_what_each_run_alone_reports():
    """apple_reports (one child for all) and apple_report (a child each) agree, and an asset the
    runtime refuses after another in a sweep raises the message a run of it alone gives."""
    builds = [_build(op, params) for op, params in CASES[:2]]
    together = apple_reports(builds)
    assert together == [apple_report(b) for b in builds]
    files = aimodel_files(translate(builds[0].program))
    bad = [Call("main", {"nope": np.ones((1, 4, 1, 2), np.float16)})]
    good = [Call("main", {k: v for k, v in draw_inputs(builds[1], 0)[0].items()})]
    with pytest.raises(AppleRuntimeError) as alone:
        run_aimodel(files, bad)
    with pytest.raises(AppleRuntimeError) as swept:
        run_aimodels([(aimodel_files(translate(builds[1].program)), good), (files, bad)])
    assert swept.value.message == alone.value.message


@pytest.mark.parametrize(
    ("graph", "weights"),
    [(swiglu_ffn(16, 24, 8), FFN_WEIGHTS), (MIXED, MIXED_WEIGHTS)],
    ids=["swiglu_ffn", "mixed"],
)
def test_the_graph_examples_run_within_their_tolerance(graph, weights):
    request = KernelRequest.create(graph=graph, weights=weights)
    _assert_passes(apple_report(request.build(random_seed=0)))


def test_a_decoder_layer_with_prefill_and_decode_functions_is_two_graphs_sharing_weights():
    base = {
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "seq_len": 8,
    }
    functions = {"prefill": {}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 16}}
    build = _build("decoder_layer", base, functions=functions)
    text = str(translate(build.program))
    assert "coreai.graph @prefill" in text and "coreai.graph @decode" in text
    alone = _build("decoder_layer", base).program  # the prefill function on its own
    both_bytes = len(aimodel_files(translate(build.program))["main.mlirb"])
    assert both_bytes < 1.2 * len(aimodel_files(translate(alone))["main.mlirb"])  # weights once
    report = apple_report(build)
    assert set(report["functions"]) == {"prefill", "decode"}
    _assert_passes(report)


QUANTIZE = [
    {"mode": "palettize", "nbits": 4},
    {"mode": "palettize", "nbits": 2, "granularity": "per_grouped_channel", "group_size": 2},
    {"mode": "palettize", "nbits": 8},
    {"mode": "linear", "dtype": "int8"},
    {"mode": "linear", "dtype": "int4", "granularity": "per_block", "block_size": 8},
    {
        "mode": "linear",
        "dtype": "uint4",
        "granularity": "per_block",
        "block_size": 8,
        "symmetric": False,
    },
]
SHAPES = {
    "conv": {"in_channels": 16, "out_channels": 8, "spatial": 3},
    "matmul": {"in_features": 16, "out_features": 8, "tokens": 5},
}


@pytest.mark.parametrize("op", SHAPES)
@pytest.mark.parametrize("config", QUANTIZE, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_quantized_weights_stay_compressed_and_decompress_as_the_definition_says(op, config):
    build = _build(op, SHAPES[op], quantize=config)
    text = str(translate(build.program))
    assert ("lut_to_dense" if config["mode"] == "palettize" else "blockwise_shift_scale") in text
    _assert_passes(apple_report(build))


def test_sub_byte_values_are_packed_low_bits_first():
    # the one bit packer serves Core AI constants too: the order coreai-core's runtime reads
    assert list(pack_bits(np.array([1, 2, 3]), DType.UINT4)) == [0x21, 0x03]
    assert list(pack_bits(np.array([-1, 7]), DType.INT4)) == [0x7F]
    assert list(pack_bits(np.array([1, 2, 3, 0, 3]), DType.UINT2)) == [0b00111001, 0b11]


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "weight_first", "transpose_y"),
    [
        ((2, 3, 16), (16, 8), False, False),
        ((5, 16), (8, 16), False, True),
        ((1, 16, 5), (8, 16), True, False),
    ],
)
def test_a_matmul_with_a_weight_is_a_1x1_convolution(x_shape, w_shape, weight_first, transpose_y):
    """Apple's CPU runtime sums an fp16 batch_matmul in fp16; a convolution sums in fp32."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal(w_shape).astype(np.float16)
    b = Builder("ios18")
    x = b.input("x", DType.FP16, x_shape)
    weight = b.const("W", w, DType.FP16)
    operands = {"x": weight, "y": x} if weight_first else {"x": x, "y": weight}
    y = b.op("matmul", "y", **operands, transpose_y=transpose_y)
    program = b.build([y])
    text = str(translate(program))
    assert "coreai.conv2d" in text and "batch_matmul" not in text
    assert fp16_accumulations(program) == []
    given = rng.standard_normal(x_shape).astype(np.float16)
    wt = w.astype(np.float64).T if transpose_y else w.astype(np.float64)
    exact = wt @ given.astype(np.float64) if weight_first else given.astype(np.float64) @ wt
    (result,) = run_aimodel(aimodel_files(translate(program)), [Call("main", {"x": given})]).results
    assert max_errors(result.outputs["y"], exact)[1] < 2e-3


def test_a_matmul_of_two_fp16_activations_names_its_inner_dimension():
    build = _build("matmul", {"in_features": 4, "out_features": 8, "tokens": 3, "dynamic": True})
    assert "batch_matmul" in str(translate(build.program))
    assert fp16_accumulations(build.program) == [4]


def test_attention_keeps_fp16_batch_matmuls_and_its_tolerance_says_so():
    build = _build("sdpa", SMALL["sdpa"])
    report = apple_report(build)
    dims = report["fp16_accumulation"]["batch_matmul_inner_dims"]
    assert dims and report["fp16_accumulation"]["tolerance_added"] == pytest.approx(
        sum(dims) * 2.0**-11, rel=1e-3
    )


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ({"mode": "palettize", "nbits": 3}, "uint3"),
        ({"mode": "prune", "target_sparsity": 0.5}, "constexpr_sparse_to_dense"),
    ],
)
def test_what_core_ai_cannot_express_is_named(config, names):
    found = untranslatable(_build("conv", SHAPES["conv"], quantize=config).program)
    assert found is not None and names in found.reason
    assert found.op.name


def test_the_ios16_form_of_compressed_weights_is_named():
    config = {"mode": "palettize", "nbits": 4}
    found = untranslatable(_build("conv", SHAPES["conv"], quantize=config, target="ios17").program)
    assert found is not None and "iOS16 form of 'constexpr_lut_to_dense'" in found.reason
    assert found.op.name


def _primitives_program():
    """One program through the rules no catalog example reaches, each output its own check."""
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (1, 4, 3, 6))
    q = b.input("q", DType.FP16, (2, 5, 8))
    outs = [
        b.op(
            "slice_by_index",
            "sliced",
            x=x,
            begin=[0, 1, 0, 1],
            end=[1, 4, 3, 6],
            stride=[1, 2, 1, 2],
            begin_mask=[False, False, True, False],
            squeeze_mask=[True, False, False, False],
        ),
        b.op("slice_by_size", "window", x=x, begin=[0, 1, 1, 2], size=[1, 2, -1, 3]),
        b.op("squeeze", "squeezed", x=b.op("expand_dims", "expanded", x=x, axes=[0]), axes=[0]),
        b.op("reduce_l2_norm", "norm", x=x, axes=[1], keep_dims=False),
        b.op("gelu", "gelu_tanh", x=x, mode="TANH_APPROXIMATION"),
        b.op("gelu", "gelu_sigmoid", x=x, mode="SIGMOID_APPROXIMATION"),
        b.op("rsqrt", "inv", x=b.op("abs", "mag", x=x), epsilon=1e-2),
        b.op("concat", "woven", values=(x, x), axis=1, interleave=True),
        b.op("softmax", "probs", x=x, axis=-1),
        b.op("tile", "tiled", x=x, reps=[1, 1, 2, 1]),
        b.op(
            "conv",
            "padded",
            x=x,
            weight=b.const("w3", np.full((2, 4, 3, 3), 0.1), DType.FP16),
            pad_type="custom",
            pad=[1, 1, 0, 2],
        ),
        b.op(
            "conv",
            "same",
            x=x,
            weight=b.const("w2", np.full((2, 4, 2, 3), 0.1), DType.FP16),
            pad_type="same",
            strides=[2, 1],
        ),
        b.op(
            "scaled_dot_product_attention",
            "attended",
            query=q,
            key=q,
            value=q,
            attn_mask=b.const("keep", np.tril(np.ones((5, 5), bool)), DType.BOOL),
        ),
    ]
    return b.build(outs)


def test_shape_and_elementwise_rules_match_the_reference_executor():
    program = _primitives_program()
    rng = np.random.default_rng(0)
    inputs = {
        v.name: rng.standard_normal(v.tensor.shape).astype(np.float16) for v in program.main.inputs
    }
    expected = Executor(program).run(inputs).outputs
    (got,) = run_aimodel(aimodel_files(translate(program)), [Call("main", inputs)]).results
    for name, want in expected.items():
        assert got.outputs[name].shape == want.shape, name
        assert max_errors(got.outputs[name], want)[1] < 5e-3, name
