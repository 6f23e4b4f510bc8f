"""Every kind of bad request is a RequestError naming the field, and the CLI exits 2 cleanly."""

import numpy as np
import pytest

from app.artifacts import kernel_zip
from app.cli import main
from app.errors import RequestError

CONV = {"in_channels": 4, "out_channels": 8, "spatial": 2}
W = np.zeros((8, 4), np.float32)


def _w(value):
    w = W.copy()
    w[1, 2] = value
    return {"weight": w}


CASES = [
    ("unknown op", "transformer", {}, None, {}, "op", "unknown op"),
    (
        "unknown param",
        "conv",
        {**CONV, "kernel_size": 3},
        {"weight": W},
        {},
        "params.kernel_size",
        "Extra inputs",
    ),
    (
        "missing param",
        "conv",
        {"in_channels": 4, "spatial": 2},
        {"weight": W},
        {},
        "params.out_channels",
        "required",
    ),
    (
        "zero dim",
        "conv",
        {**CONV, "spatial": 0},
        {"weight": W},
        {},
        "params.spatial",
        "greater than or equal to 1",
    ),
    (
        "negative dim",
        "rmsnorm",
        {"channels": -3, "spatial": 1},
        None,
        {},
        "params.channels",
        "greater than",
    ),
    (
        "oversized dim",
        "identity",
        {"channels": 16385, "spatial": 1},
        None,
        {},
        "params.channels",
        "less than or equal",
    ),
    ("wrong type", "conv", {**CONV, "bias": "maybe"}, {"weight": W}, {}, "params.bias", "boolean"),
    (
        "bad enum",
        "conv",
        {**CONV, "io_dtype": "int8"},
        {"weight": W},
        {},
        "params.io_dtype",
        "fp16",
    ),
    (
        "wrong weight shape",
        "conv",
        CONV,
        {"weight": np.zeros((4, 8), np.float32)},
        {},
        "weights.weight",
        "received [4, 8]",
    ),
    ("missing weight", "conv", CONV, {}, {}, "weights.weight", "missing weight"),
    (
        "unknown weight",
        "conv",
        CONV,
        {"weight": W, "gamma": W},
        {},
        "weights.gamma",
        "unknown weight",
    ),
    ("NaN weight", "conv", CONV, _w(np.nan), {}, "weights.weight", "NaN or Inf"),
    ("Inf weight", "conv", CONV, _w(np.inf), {}, "weights.weight", "NaN or Inf"),
    ("beyond fp16", "conv", CONV, _w(70000.0), {}, "weights.weight", "fp16 range"),
    (
        "string weight",
        "conv",
        CONV,
        {"weight": np.array([["a"] * 4] * 8)},
        {},
        "weights.weight",
        "not a number type",
    ),
    (
        "bad state name",
        "read_state",
        {"state_name": "1kv", "shape": [4]},
        None,
        {},
        "params.state_name",
        "pattern",
    ),
    (
        "reserved state name",
        "update_state",
        {"state_name": "value", "shape": [4]},
        None,
        {},
        "params",
        "reserved",
    ),
    (
        "state rank 5",
        "read_state",
        {"shape": [1, 1, 1, 1, 1]},
        None,
        {},
        "params.shape",
        "at most 4",
    ),
    (
        "state on ios17",
        "read_state",
        {"shape": [4]},
        None,
        {"target": "ios17"},
        "target",
        "not available for ios17",
    ),
    (
        "sdpa op on ios17",
        "sdpa",
        {"n_heads": 1, "head_dim": 4, "seq_len": 2},
        None,
        {"target": "ios17"},
        "target",
        "ios17",
    ),
    (
        "unknown target",
        "identity",
        {"channels": 2, "spatial": 1},
        None,
        {"target": "ios9"},
        "target",
        "unknown target",
    ),
    (
        "unknown format",
        "identity",
        {"channels": 2, "spatial": 1},
        None,
        {"format": "onnx"},
        "format",
        "unknown format",
    ),
    (
        "bad name",
        "identity",
        {"channels": 2, "spatial": 1},
        None,
        {"name": "../evil"},
        "name",
        "identifier",
    ),
    (
        "gqa not divisible",
        "gqa_expand",
        {"kv_heads": 3, "q_heads": 4, "head_dim": 2, "seq_len": 1},
        None,
        {},
        "params",
        "multiple",
    ),
    (
        "causal short kv",
        "sdpa",
        {"n_heads": 1, "head_dim": 4, "seq_len": 4, "kv_seq_len": 2, "causal": True},
        None,
        {},
        "params",
        "kv_seq_len",
    ),
    (
        "zero eps",
        "rmsnorm",
        {"channels": 2, "spatial": 1, "eps": 0},
        None,
        {},
        "params.eps",
        "greater than 0",
    ),
]


@pytest.mark.parametrize(
    ("op", "params", "weights", "kw", "field", "fragment"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_bad_request(op, params, weights, kw, field, fragment):
    with pytest.raises(RequestError) as info:
        kernel_zip(op, params, weights, **kw)
    assert info.value.field == field
    assert fragment in info.value.message


def test_fp32_weights_may_exceed_the_fp16_range():
    params = {**CONV, "weight_dtype": "fp32"}
    assert kernel_zip("conv", params, _w(70000.0))


def test_cli_bad_request_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out.zip"
    code = main(
        [
            "compile",
            "conv",
            "--params",
            '{"in_channels": 0, "out_channels": 2, "spatial": 1}',
            "--random-weights",
            "1",
            "-o",
            str(out),
        ]
    )
    assert code == 2
    assert "params.in_channels" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["compile", "conv", "--params", "{nope", "-o", "x.zip"], "not valid JSON"),
        (["compile", "conv", "--params", "[1]", "-o", "x.zip"], "JSON object"),
        (
            [
                "compile",
                "conv",
                "--params",
                '{"in_channels": 2, "out_channels": 2, "spatial": 1}',
                "-o",
                "x.zip",
            ],
            "missing weight",
        ),
        (["compile", "conv", "--weights", "weight", "-o", "x.zip"], "NAME=FILE.npy"),
        (
            ["compile", "conv", "--weights", "weight=/does/not/exist.npy", "-o", "x.zip"],
            "cannot read",
        ),
    ],
)
def test_cli_usage_errors(argv, fragment, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert fragment in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
