"""Checkpoints over HTTP and in farm manifests: a safetensors file of many tensors uploaded once
to /v1/blobs, its tensors named as `sha256:<digest>#<tensor name>` in kernel requests; manifest
entries with `checkpoint` and `layers`."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from checkpoint_support import LLAMA, layer_weights, op_params, write_checkpoint
from http_support import assert_problem, kernel_json

from app.core.digest import tensor_digest
from app.farm.manifest import ManifestError, load_manifest


@pytest.fixture(scope="module")
def bf16_checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("ck"), LLAMA, dtype="bfloat16", seed=9)


def _upload(client, path) -> dict:
    r = client.post(
        "/v1/blobs",
        content=path.read_bytes(),
        headers={"content-type": "application/x-safetensors"},
    )
    assert r.status_code in (200, 201), r.text
    return r.json()


def _refs(digest: str, layer: int, names) -> dict[str, str]:
    return {n: f"{digest}#model.layers.{layer}.{n}" for n in names}


def test_a_checkpoint_uploads_once_and_its_tensors_are_weights(client, bf16_checkpoint, tmp_path):
    path, _, tensors = bf16_checkpoint
    info = _upload(client, path)
    assert info["dtype"] == "safetensors" and info["tensors"] == len(tensors)
    assert info["bytes"] == path.stat().st_size
    again = client.post(
        "/v1/blobs",
        content=path.read_bytes(),
        headers={"content-type": "application/x-safetensors"},
    )
    assert again.status_code == 200 and again.json()["digest"] == info["digest"]
    assert client.get(f"/v1/blobs/{info['digest']}").json()["tensors"] == len(tensors)

    expected = layer_weights(tensors, 1)
    body = {
        **op_params(LLAMA, seq_len=4),
        "verify": True,
        "format": "mil",
        "weights": _refs(info["digest"], 1, expected),
    }
    body.pop("model_type", None)
    r = client.post("/v1/kernels/decoder_layer", json=body)
    assert r.status_code == 200, r.text
    described = kernel_json(r.content)
    for name, values in expected.items():
        fp16 = values.astype(np.float16)
        assert described["weights"][name]["sha256"] == tensor_digest(
            fp16.reshape((*fp16.shape, 1, 1) if fp16.ndim == 2 else (1, fp16.shape[0], 1, 1))
        )
    with zipfile.ZipFile(io.BytesIO(r.content)) as zf:
        assert json.loads(zf.read("verification.json"))["passed"]
    # the same request again: the converted tensors are blobs now, the artifact a cache hit
    assert client.post("/v1/kernels/decoder_layer", json=body).headers["x-cache"] == "hit"


def test_tensor_references_name_what_is_wrong(client, bf16_checkpoint):
    path, _, tensors = bf16_checkpoint
    digest = _upload(client, path)["digest"]
    names = layer_weights(tensors, 0)
    params = {k: v for k, v in op_params(LLAMA, seq_len=2).items()}
    refs = _refs(digest, 0, names)
    wrong = {**refs, "self_attn.k_proj.weight": f"{digest}#model.layers.0.self_attn.nothing"}
    r = client.post("/v1/kernels/decoder_layer", json={**params, "weights": wrong})
    body = assert_problem(r, 422, "weights.self_attn.k_proj.weight")
    assert "no tensor 'model.layers.0.self_attn.nothing'" in body["detail"]
    swapped = {**refs, "self_attn.q_proj.weight": refs["mlp.up_proj.weight"]}
    r = client.post("/v1/kernels/decoder_layer", json={**params, "weights": swapped})
    assert "expected shape" in assert_problem(r, 422, "weights.self_attn.q_proj.weight")["detail"]
    whole = {**refs, "mlp.up_proj.weight": digest}
    r = client.post("/v1/kernels/decoder_layer", json={**params, "weights": whole})
    assert "#<tensor name>" in assert_problem(r, 422, "weights.mlp.up_proj.weight")["detail"]
    unknown = {**refs, "mlp.up_proj.weight": "0" * 64 + "#x"}
    assert_problem(
        client.post("/v1/kernels/decoder_layer", json={**params, "weights": unknown}),
        422,
        "weights.mlp.up_proj.weight",
    )


def test_manifest_entries_read_checkpoints(tmp_path):
    _, _, tensors = write_checkpoint(tmp_path / "model", LLAMA, dtype="bfloat16", shards=2)
    manifest = tmp_path / "kernels.toml"
    manifest.write_text(
        '[kernels.stack]\nop = "decoder_stack"\ncheckpoint = "model"\nlayers = "0-2"\n'
        'params = { seq_len = 8 }\nformat = "mil"\n\n'
        '[kernels.layer1]\nop = "decoder_layer"\ncheckpoint = "model/model.safetensors.index.json"\n'
        'config = "model/config.json"\nlayers = "1"\nparams = { seq_len = 1, mode = "decode", '
        "cache_len = 16 }\n"
    )
    stack, layer = sorted(load_manifest(manifest), key=lambda k: k.name != "stack")
    assert stack.params["num_layers"] == 3 and stack.params["seq_len"] == 8
    assert len(stack.weights) == 27 and layer.params["mode"] == "decode"
    want = tensors["model.layers.1.mlp.down_proj.weight"].astype(np.float16)
    assert np.array_equal(layer.weights["mlp.down_proj.weight"].reshape(want.shape), want)
    assert stack.inputs["weights"]["layers.2.mlp.up_proj.weight"].startswith("sha256:")
    manifest.write_text(
        '[kernels.bad]\nop = "decoder_layer"\ncheckpoint = "model"\nlayers = "7"\n'
        "params = { seq_len = 8 }\n"
    )
    with pytest.raises(ManifestError, match=r"kernels\.bad\.checkpoint: .*model\.layers\.7\."):
        load_manifest(manifest)
    manifest.write_text('[kernels.bad]\nop = "decoder_layer"\ncheckpoint = "model"\n')
    with pytest.raises(ManifestError, match="checkpoint and layers go together"):
        load_manifest(manifest)


# -- a checkpoint reference: blob digest(s), config, layer(s) ------------------------------------
def test_a_checkpoint_reference_stands_for_the_params_and_tensors(client, bf16_checkpoint):
    """{"checkpoint": {blob, config, layer}} builds what naming the params and the nine tensors
    by hand builds, byte for byte."""
    path, _, tensors = bf16_checkpoint
    digest = _upload(client, path)["digest"]
    by_hand = {
        **op_params(LLAMA, seq_len=4),
        "format": "mil",
        "weights": _refs(digest, 1, layer_weights(tensors, 1)),
    }
    by_ref = {
        "seq_len": 4,
        "format": "mil",
        "checkpoint": {"blob": digest, "config": LLAMA, "layer": 1},
    }
    expected = client.post("/v1/kernels/decoder_layer", json=by_hand)
    got = client.post("/v1/kernels/decoder_layer", json=by_ref)
    assert expected.status_code == got.status_code == 200, got.text
    assert got.content == expected.content
    stack = {
        "op": "decoder_stack",
        "seq_len": 2,
        "format": "mil",
        "checkpoint": {"blob": [digest], "config": LLAMA, "layers": "0-2"},
    }
    r = client.post("/v1/kernels", json=stack)
    assert r.status_code == 200, r.text
    assert kernel_json(r.content)["params"]["num_layers"] == 3


def test_checkpoint_reference_faults_name_the_field(client, bf16_checkpoint):
    path, _, _ = bf16_checkpoint
    digest = _upload(client, path)["digest"]

    def post(**checkpoint):
        body = {"seq_len": 2, "checkpoint": {"blob": digest, "config": LLAMA, **checkpoint}}
        return client.post("/v1/kernels/decoder_layer", json=body)

    out_of_range = assert_problem(post(layer=7), 422, "checkpoint.layers")
    assert "the model has 3 layers (0-2" in out_of_range["detail"]
    assert_problem(post(layer=1, layers="0-1"), 422, "checkpoint")
    assert_problem(post(layer=0, blob="sha256:" + "0" * 64), 422, "checkpoint.blob")
    assert_problem(post(layer=0, surprise=1), 422, "checkpoint.surprise")
    assert_problem(
        post(layer=0, config={**LLAMA, "hidden_act": ["silu"]}), 422, "checkpoint.config"
    )
    assert_problem(
        post(layer=0, config={"hidden_size": 32}), 422, "checkpoint.config.num_attention_heads"
    )


def test_a_swapped_tensor_of_the_same_shape_is_refused_naming_it(client, bf16_checkpoint):
    path, _, tensors = bf16_checkpoint
    digest = _upload(client, path)["digest"]
    refs = _refs(digest, 0, layer_weights(tensors, 0))
    swapped = {
        **refs,
        "self_attn.k_proj.weight": refs["self_attn.v_proj.weight"],
        "self_attn.v_proj.weight": refs["self_attn.k_proj.weight"],
    }
    body = {**op_params(LLAMA, seq_len=2), "weights": swapped}
    problem = assert_problem(
        client.post("/v1/kernels/decoder_layer", json=body), 422, "weights.self_attn.k_proj.weight"
    )
    assert (
        "'model.layers.0.self_attn.v_proj.weight' is not a 'self_attn.k_proj.weight'"
        in (problem["detail"])
    )
    assert (
        client.post("/v1/kernels/decoder_layer", json={**body, "weights": refs}).status_code == 200
    )
    # an op whose weights have no Hugging Face role takes any tensor of the right shape
    gain = {
        "channels": 32,
        "spatial": 2,
        "weights": {"scale": f"{digest}#model.layers.0.input_layernorm.weight"},
    }
    assert client.post("/v1/kernels/scale", json=gain).status_code == 200
