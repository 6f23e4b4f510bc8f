"""The `functions` option: several calls of one op (prefill at S=8, decode at S=1) in one
package sharing one weight.bin, described as coremltools' multifunction save describes them,
loadable by coremltools per function, verified per function, each function computing exactly
what the same call built alone computes."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from http_support import assert_problem, kernel_json

from app.artifacts import kernel_zip
from app.catalog_build import build_functions, build_kernel
from app.errors import RequestError
from app.reference import Executor
from app.reference.executor import random_inputs
from app.reference.validation import validate

BASE = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "seq_len": 8,
}
FUNCTIONS = {"prefill": {}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 16}}
PKG = "decoder_layer.mlpackage/Data/com.apple.CoreML"


def _weights(seed=0):
    return build_kernel("decoder_layer", BASE, random_seed=seed).weights


def test_one_package_two_functions_one_weight_bin(tmp_path):
    weights = _weights()
    both = kernel_zip("decoder_layer", BASE, weights, functions=FUNCTIONS, verify=True)
    alone = kernel_zip("decoder_layer", BASE, weights)
    path = tmp_path / "both.zip"
    path.write_bytes(both)
    assert validate(path).kind == "mlpackage"
    with zipfile.ZipFile(io.BytesIO(both)) as zf, zipfile.ZipFile(io.BytesIO(alone)) as single:
        shared = zf.getinfo(f"{PKG}/weights/weight.bin").file_size
        one = single.getinfo(f"{PKG}/weights/weight.bin").file_size
        report = json.loads(zf.read("verification.json"))
        zf.extractall(tmp_path / "x")
    # each weight stored once: the decode function adds only its small tables, not the weights
    weight_bytes = sum(2 * a.size for a in weights.values())
    assert one < shared < one + weight_bytes / 10
    assert report["passed"] and set(report["functions"]) == {"prefill", "decode"}
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model.FromString((tmp_path / "x" / PKG / "model.mlmodel").read_bytes())
    assert [f.name for f in spec.description.functions] == ["prefill", "decode"]
    assert spec.description.defaultFunctionName == "prefill" and not spec.description.input
    assert [i.name for i in spec.description.functions[1].input] == [
        "x",
        "k_cache",
        "v_cache",
        "length",
        "cos",
        "sin",
    ]
    import coremltools as ct

    for name in FUNCTIONS:
        model = ct.models.MLModel(
            str(tmp_path / "x" / "decoder_layer.mlpackage"),
            skip_model_load=True,
            function_name=name,
        )
        assert model.function_name == name


@pytest.mark.parametrize("fmt", ["mlpackage", "mil"])
def test_each_function_computes_what_it_computes_alone(fmt, tmp_path):
    """Two prefill lengths (their RoPE tables and masks share names and differ), a decode of a
    chunk (its causal mask in weight.bin) and one of a token (the mask of the same name inline):
    run from the written package's weight.bin, each function equals its standalone kernel."""
    chunk = {"seq_len": 4, "mode": "decode", "cache_len": 16}
    functions = {"prefill": {}, "chunk": chunk, **FUNCTIONS, "long": {"seq_len": 12}}
    weights = _weights(1)
    package = build_functions("decoder_layer", BASE, functions, weights)
    path = tmp_path / f"p.{fmt}.zip"
    path.write_bytes(kernel_zip("decoder_layer", BASE, weights, functions=functions, format=fmt))
    assert validate(path).kind == fmt
    from app.reference.load import open_artifact

    loaded = open_artifact(path).program
    assert set(loaded.functions) == set(functions) and loaded.default == "prefill"
    for name, overrides in functions.items():
        alone = build_kernel("decoder_layer", {**BASE, **overrides}, weights)
        inputs = random_inputs(alone.program.main, seed=3)
        if "length" in inputs:
            inputs["length"] = np.array([5], np.int32)
        want = Executor.from_written_weights(alone.program).run(inputs).outputs
        assert [v.name for v in package.parts[name].program.main.inputs] == list(inputs)
        got = Executor(loaded, function=name).run(inputs).outputs  # consts read from weight.bin
        for output, values in want.items():
            assert np.array_equal(got[output], values), (name, output)


@pytest.mark.parametrize(
    ("functions", "target", "field"),
    [
        (FUNCTIONS, "ios17", "target"),
        ({"prefill": {}, "wide": {"intermediate_size": 64}}, "ios18", "functions.wide"),
        ({"prefill": {}, "decode": {"mode": "decode"}}, "ios18", "functions.decode.params"),
        ({"1st": {}}, "ios18", "functions.1st"),
        ({}, "ios18", "functions"),
    ],
)
def test_bad_functions_name_the_function(functions, target, field):
    with pytest.raises(RequestError) as err:
        kernel_zip("decoder_layer", BASE, functions=functions, target=target, random_seed=0)
    assert err.value.field.startswith(field), err.value


def test_functions_over_http(client, tmp_path):
    weights = {
        k: v.reshape(v.shape[0], -1).tolist()
        if v.ndim == 4 and v.shape[0] > 1
        else v.reshape(-1).tolist()
        for k, v in _weights(2).items()
    }
    body = {**BASE, "weights": weights, "functions": FUNCTIONS, "verify": True, "format": "mil"}
    r = client.post("/v1/kernels/decoder_layer", json=body)
    assert r.status_code == 200, r.text
    described = kernel_json(r.content)
    assert described["default_function"] == "prefill"
    assert described["functions"]["decode"]["params"]["cache_len"] == 16
    plain = client.post("/v1/kernels/decoder_layer", json={**body, "functions": None})
    assert plain.status_code == 200 and plain.headers["etag"] != r.headers["etag"]
    bad = client.post("/v1/kernels/decoder_layer", json={**body, "target": "ios17"})
    assert_problem(bad, 422, "target")
