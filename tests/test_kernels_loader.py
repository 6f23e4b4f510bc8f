"""Every catalog op, over a grid of shapes, gives packages coremltools' own loader accepts.

`app.validation.validate` runs coremltools' milproto loader (which re-infers every op's type and
reads every blob), `_check_early_error_out_for_invalid_program`, and checks the model description
against the program and each const's type against its value.
"""

import io
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_cases import SMALL, VARIANTS

from app.artifacts import kernel_zip
from app.kernels import CATALOG
from app.validation import validate

dims = st.integers(1, 48)
PARAM_GRID = {
    "conv": st.fixed_dictionaries(
        {
            "in_channels": dims,
            "out_channels": dims,
            "spatial": dims,
            "io_dtype": st.sampled_from(["fp16", "fp32"]),
            "weight_dtype": st.sampled_from(["fp16", "fp32"]),
            "bias": st.booleans(),
        }
    ),
    "matmul": st.fixed_dictionaries(
        {
            "in_features": dims,
            "out_features": dims,
            "tokens": dims,
            "io_dtype": st.sampled_from(["fp16", "fp32"]),
            "dynamic": st.booleans(),
        }
    ),
    "identity": st.fixed_dictionaries(
        {"channels": dims, "spatial": dims, "io_dtype": st.sampled_from(["fp16", "fp32"])}
    ),
    "scale": st.fixed_dictionaries(
        {"channels": dims, "spatial": dims, "io_dtype": st.sampled_from(["fp16", "fp32"])}
    ),
    "rmsnorm": st.fixed_dictionaries(
        {
            "channels": dims,
            "spatial": dims,
            "eps": st.floats(1e-6, 1e-2),
            "variant": st.sampled_from(["safe", "l2norm"]),
        }
    ),
    "sdpa": st.fixed_dictionaries(
        {
            "n_heads": st.integers(1, 8),
            "head_dim": dims,
            "seq_len": st.integers(1, 24),
            "kv_seq_len": st.integers(24, 40),
            "causal": st.booleans(),
        }
    ),
    "gqa_expand": st.tuples(
        st.integers(1, 4),
        st.integers(1, 4),
        dims,
        st.integers(1, 16),
        st.sampled_from(["repeat_kv", "tile"]),
    ).map(
        lambda t: {
            "kv_heads": t[0],
            "q_heads": t[0] * t[1],
            "head_dim": t[2],
            "seq_len": t[3],
            "order": t[4],
        }
    ),
    "read_state": st.fixed_dictionaries(
        {"shape": st.lists(st.integers(1, 16), min_size=1, max_size=4)}
    ),
    "update_state": st.fixed_dictionaries(
        {"shape": st.lists(st.integers(1, 16), min_size=1, max_size=4)}
    ),
    "ffn": st.fixed_dictionaries(
        {
            "hidden_size": dims,
            "intermediate_size": dims,
            "seq_len": st.integers(1, 16),
            "hidden_act": st.sampled_from(["silu", "gelu_tanh", "relu2"]),
            "norm": st.booleans(),
            "residual": st.booleans(),
        }
    ),
    "attention": st.builds(
        lambda *a: _attention(*a),
        st.integers(1, 3),
        st.integers(1, 3),
        st.sampled_from([2, 4, 8]),
        st.integers(1, 8),
        st.booleans(),
        st.booleans(),
    ),
    "decoder_layer": st.builds(
        lambda *a: {**_attention(*a), "intermediate_size": 24},
        st.integers(1, 3),
        st.integers(1, 3),
        st.sampled_from([2, 4, 8]),
        st.integers(1, 8),
        st.booleans(),
        st.booleans(),
    ),
    "decoder_stack": st.builds(
        lambda *a: {
            **_attention(*a[:6]),
            "intermediate_size": 16,
            "first_layer": a[6],
            "num_layers": a[7],
        },
        st.integers(1, 2),
        st.integers(1, 2),
        st.sampled_from([2, 4]),
        st.integers(1, 4),
        st.booleans(),
        st.booleans(),
        st.integers(0, 30),
        st.integers(1, 3),
    ),
}


def _attention(kv_heads, group, head_dim, seq_len, decode, bias):
    """A valid attention config: heads a multiple of kv_heads, prefill or decode."""
    params = {
        "hidden_size": kv_heads * group * head_dim,
        "num_attention_heads": kv_heads * group,
        "num_key_value_heads": kv_heads,
        "seq_len": seq_len,
        "attention_bias": bias,
    }
    return {**params, "mode": "decode", "cache_len": seq_len + 3} if decode else params


def _check(tmp_path, op, params, fmt="mlpackage", target="ios18"):
    data = kernel_zip(op, params, random_seed=7, format=fmt, target=target)
    path = tmp_path / f"{op}.zip"
    path.write_bytes(data)
    return validate(path)


def test_grid_covers_the_catalog():
    assert set(PARAM_GRID) == set(CATALOG) == set(SMALL)


@pytest.mark.slow
@pytest.mark.parametrize("op", sorted(PARAM_GRID))
def test_each_op_over_a_grid_of_shapes(op, tmp_path_factory):
    @settings(
        max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )
    @given(PARAM_GRID[op])
    def run(params):
        report = _check(tmp_path_factory.mktemp(op), op, params)
        assert report.kind == "mlpackage" and report.ops >= 1

    run()


@pytest.mark.parametrize(
    ("op", "params"), VARIANTS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(VARIANTS)]
)
@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
def test_variants_validate(op, params, fmt, tmp_path):
    assert _check(tmp_path, op, params, fmt).kind == fmt


@pytest.mark.parametrize("op", ["conv", "matmul", "identity", "scale", "rmsnorm", "gqa_expand"])
def test_ios17_packages_validate(op, tmp_path):
    report = _check(tmp_path, op, SMALL[op], target="ios17")
    assert report.kind == "mlpackage"
    data = kernel_zip(op, SMALL[op], random_seed=7, target="ios17")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        model = zf.read(f"{op}.mlpackage/Data/com.apple.CoreML/model.mlmodel")
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model.FromString(model)
    assert spec.specificationVersion == 8 and spec.mlProgram.functions["main"].opset == "CoreML7"


def test_causal_sdpa_also_builds_for_ios17(tmp_path):
    params = {"n_heads": 2, "head_dim": 4, "seq_len": 3, "causal": True}
    assert _check(tmp_path, "sdpa", params, target="ios17").ops > 3
