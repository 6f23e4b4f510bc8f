"""Hostile checkpoints and options at POST /v1/models, on a live server: every file a user hands
in (config.json, generation_config.json, the shard index) read through the bounded, strict
reader, every option strictly typed; each case a 4xx naming the file and the key, never a 500,
never a job that fails as `internal`. A 100 MiB config.json is refused without being parsed,
and a verification that would take gigabytes is refused before it is queued."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from faults_support import access_log, log_path
from hostile_support import MiB, hostile_server, peak_rss_bytes
from kit_support import KIT_QWEN3, write_model

from app.client import Client

pytestmark = pytest.mark.slow  # the slow tier: `make test` runs it, `make test-fast` does not

OPTIONS = {"format": "mil", "context": 16, "prefill": 4}
DEEP = 50_000


def deep(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("hostile-models") / "data"
    # device checks run with the labelled stand-in for Core ML (the reference executor)
    with hostile_server(
        data, upload_part_bytes=str(64 * MiB), device_check_runtime="stand-in"
    ) as live:
        yield live
        statuses = [d["status"] for d in access_log(log_path(data, live.url))]
        assert 500 not in statuses
        jobs = live.client.get("/v1/jobs").json()["jobs"]
        kinds = [j["error"]["kind"] for j in jobs if j.get("error")]
        assert "internal" not in kinds, jobs


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("hostile-model") / "qwen3", KIT_QWEN3, seed=3)


def upload(server, data: bytes) -> str:
    """The bytes as a stored file (resumable upload, one part); their digest."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    start = server.client.post("/v1/blobs/uploads", json={"digest": digest, "bytes": len(data)})
    assert start.status_code in (200, 201), start.text
    if not start.json()["stored"]:
        where = f"/v1/blobs/uploads/{start.json()['id']}"
        for offset in range(0, len(data), 64 * MiB):
            part = data[offset : offset + 64 * MiB]
            sent = server.client.put(where, params={"offset": offset}, content=part)
            assert sent.status_code == 200, sent.text
        assert server.client.post(f"{where}/finish").status_code == 200
    return digest


def files_of(server, model: Path, **replaced: bytes | None) -> dict[str, str]:
    """The model folder's files as uploaded, some replaced by other bytes (None: left out)."""
    names = ("config.json", "model.safetensors", "tokenizer.json", "generation_config.json")
    chosen = {n: (model / n).read_bytes() for n in names} | replaced
    return {n: upload(server, data) for n, data in chosen.items() if data is not None}


def config_with(**changes) -> bytes:
    return json.dumps(KIT_QWEN3 | changes).encode()


def refused(answer, status: int, field: str, *words: str) -> dict:
    assert answer.status_code == status, answer.text
    problem = answer.json()
    assert problem["field"] == field, problem
    for word in words:
        assert word in problem["detail"], problem
    return problem


# (what, the config's changes, the field named, words the detail holds): finding 6
BAD_CONFIGS = [
    ("model_type a list", {"model_type": ["qwen3"]}, "config.model_type", "config.json"),
    ("model_type an object", {"model_type": {"a": 1}}, "config.model_type", "config.json"),
    ("architectures 5", {"architectures": 5}, "config.architectures", "config.json"),
    ("hidden_act a list", {"hidden_act": ["silu"]}, "config.hidden_act", "config.json"),
    ("hidden_size a string", {"hidden_size": "32"}, "config.hidden_size", "'32'"),
    (
        "max_position_embeddings abc",
        {"max_position_embeddings": "abc"},
        "config.max_position_embeddings",
        "",
    ),
    (
        "max_position_embeddings 0",
        {"max_position_embeddings": 0},
        "config.max_position_embeddings",
        "",
    ),
    (
        "max_position_embeddings -5",
        {"max_position_embeddings": -5},
        "config.max_position_embeddings",
        "",
    ),
    ("sliding_window abc", {"sliding_window": "abc"}, "config.sliding_window", ""),
    ("rope_theta a list", {"rope_theta": [1]}, "config.rope_theta", ""),
    ("rope_scaling a number", {"rope_scaling": 3}, "config.rope_scaling", ""),
    ("eos a string", {"eos_token_id": "2"}, "config.eos_token_id", ""),
    ("text_config a list", {"text_config": [1]}, "config.text_config", ""),
    ("num_hidden_layers 10^9", {"num_hidden_layers": 10**9}, "config.num_hidden_layers", ""),
]


@pytest.mark.parametrize(
    ("what", "changes", "field", "word"), BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS]
)
def test_a_bad_config_key_is_refused_naming_it(server, model, what, changes, field, word):
    files = files_of(server, model, **{"config.json": config_with(**changes)})
    answer = server.client.post("/v1/models", json={"files": files, **OPTIONS})
    problem = refused(answer, 422, field, "config.json", word)
    assert "context" not in problem["detail"].replace("max_position", "")  # finding 11


# Bytes that are not JSON a reader should take; each refused naming the file
BAD_BYTES = [
    ("config nested 50,000 deep", "config.json", ('{"a": ' + deep() + "}").encode(), "config"),
    (
        "config 1e400",
        "config.json",
        config_with()[:-1] + b', "max_position_embeddings": 1e400}',
        "config",
    ),
    ("config NaN", "config.json", config_with()[:-1] + b', "rope_theta": NaN}', "config"),
    ("config not UTF-8", "config.json", b'{"model_type": "\xff"}', "config"),
    ("config a list", "config.json", b"[1, 2]", "config"),
    (
        "generation_config deep",
        "generation_config.json",
        ('{"a": ' + deep() + "}").encode(),
        "generation_config",
    ),
    (
        "generation_config eos a dict",
        "generation_config.json",
        b'{"eos_token_id": {"a": 1}}',
        "generation_config.eos_token_id",
    ),
]


@pytest.mark.parametrize(
    ("what", "name", "data", "field"), BAD_BYTES, ids=[c[0] for c in BAD_BYTES]
)
def test_bad_json_files_are_refused_naming_the_file(server, model, what, name, data, field):
    files = files_of(server, model, **{name: data})
    answer = server.client.post("/v1/models", json={"files": files, **OPTIONS})
    refused(answer, 422, field, name)


def _index(weight_map) -> bytes:
    return json.dumps({"metadata": {}, "weight_map": weight_map}).encode()


# Shard indexes with odd values (finding 6): each names the index file
BAD_INDEXES = [
    ("a number", _index({"model.embed_tokens.weight": 5})),
    ("null", _index({"model.embed_tokens.weight": None})),
    ("a folder", _index({"model.embed_tokens.weight": "../model.safetensors"})),
    ("a NUL", _index({"model.embed_tokens.weight": "model\u0000.safetensors"})),
    ("300 bytes", _index({"model.embed_tokens.weight": "a" * 300})),
    ("weight_map a list", json.dumps({"weight_map": [1, 2]}).encode()),
    ("nested deep", ('{"weight_map": ' + deep() + "}").encode()),
]


@pytest.mark.parametrize(("what", "index"), BAD_INDEXES, ids=[c[0] for c in BAD_INDEXES])
def test_a_bad_shard_index_is_refused(server, model, what, index):
    files = files_of(server, model, **{"model.safetensors.index.json": index})
    answer = server.client.post("/v1/models", json={"files": files, **OPTIONS})
    problem = refused(answer, 422, answer.json().get("field", ""))
    assert problem["field"].startswith("checkpoint")
    assert "model.safetensors.index.json" in problem["detail"]


@pytest.mark.parametrize(
    "name",
    ["config\u0000.json", "a" * 256, "é" * 128, "\u0007bell", ".", ".."],
    ids=["NUL", "256 chars", "256 bytes of UTF-8", "control", "dot", "dot-dot"],
)
def test_odd_file_names_are_refused(server, model, name):
    files = files_of(server, model) | {name: "sha256:" + "0" * 64}
    answer = server.client.post("/v1/models", json={"files": files, **OPTIONS})
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"].startswith("files.")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"verify": "yes"}, "body.verify"),
        ({"context": "16"}, "body.context"),
        ({"context": 16.0}, "body.context"),
        ({"kv": 1}, "body.kv"),
        ({"quantize": {"head": "x"}}, "quantize.head"),
        ({"quantize": {"layers": "x"}}, "quantize.layers"),
        ({"quantize": {"layers": {"mode": "palettize", "nbits": "4"}}}, "quantize.layers.nbits"),
        ({"quantize": {"mode": "linear", "dtype": 8}}, "quantize.dtype"),
    ],
    ids=lambda v: json.dumps(v) if isinstance(v, dict) else v,
)
def test_options_are_strictly_typed(server, model, options, field):
    files = files_of(server, model)
    answer = server.client.post("/v1/models", json={"files": files, **OPTIONS, **options})
    refused(answer, 422, field)


def test_a_100_mib_config_is_refused_unparsed(server, model):
    """Finding 7: the size is checked before the file is read: the server's peak memory does
    not grow by the file's size (parsing it whole cost five times its size)."""
    padding = "x" * (100 * MiB)
    big = json.dumps(KIT_QWEN3 | {"padding": padding}).encode()
    del padding
    files = files_of(server, model, **{"config.json": big})
    before = peak_rss_bytes(server.pid)
    answer = server.client.post("/v1/models", json={"files": files, **OPTIONS})
    problem = refused(answer, 413, "config", "config.json", "ANE_MAX_JSON_BYTES")
    assert problem["limit"] == MiB
    grown = peak_rss_bytes(server.pid) - before
    assert grown < 32 * MiB, f"the server's peak RSS grew by {grown / MiB:.0f} MiB"


def test_a_verification_too_large_for_memory_is_refused_up_front(server, model):
    """Finding 7: a 120 KB checkpoint verified at context 16,384 with prefill 4,096 would need
    gigabytes in the float64 verification: refused when submitted, naming the setting."""
    config = config_with(max_position_embeddings=16_384)
    files = files_of(server, model, **{"config.json": config})
    body = {"files": files, "format": "mil", "context": 16_384, "prefill": 4096, "verify": True}
    problem = refused(server.client.post("/v1/models", json=body), 413, "verify")
    assert problem["setting"] == "ANE_MAX_VERIFY_BYTES"
    assert problem["verify_bytes_estimate"] > problem["limit"]
    smaller = {**body, "context": 64, "prefill": 16}
    accepted = server.client.post("/v1/models", json=smaller)
    assert accepted.status_code == 202, accepted.text
    with Client(server.url, poll_interval=0.2) as client:
        job = client.job(accepted.json()["id"]).wait(timeout=300).data
    assert job["state"] == "succeeded", job


def test_a_context_over_the_models_positions_is_refused_up_front(server, model):
    """It used to be accepted and fail in the worker."""
    files = files_of(server, model)  # max_position_embeddings 64
    answer = server.client.post(
        "/v1/models", json={"files": files, "format": "mil", "context": 128}
    )
    refused(answer, 422, "context", "max_position_embeddings of 64")


def test_a_device_check_of_a_mil_kit_is_refused(server, model):
    """Finding 11: docs/kits.md says a kit of format mil (no Core ML programs) is refused; it
    was accepted (and run by the stand-in)."""
    with Client(server.url, poll_interval=0.2) as client:
        client.compile_model(model, **OPTIONS)
        job = next(j for j in client.jobs()["jobs"] if j["request"].get("options") == OPTIONS)
    answer = server.client.post("/v1/device-checks", json={"kit": job["id"], "device": "m4"})
    refused(answer, 422, "kit", "format mil")


def test_a_plan_of_absurd_sizes_is_refused_before_it_is_computed(server):
    """Finding 7: a 273-byte body (4,096 layers, every size 2^24) cost 48 s of CPU and a 22.7 MB
    answer; it is refused up front naming the key, and the largest model released plans."""
    huge = 1 << 24
    config = {
        "model_type": "llama",
        "hidden_size": huge,
        "intermediate_size": huge,
        "num_attention_heads": huge,
        "num_key_value_heads": huge,
        "num_hidden_layers": 4096,
        "vocab_size": huge,
    }
    body = {"config": config, "device": "m4", "context": 131072, "prefill": 131072}
    problem = refused(server.client.post("/v1/plan", json=body), 413, "config.vocab_size")
    assert problem["limit"] == 4096
    layers = config | {
        "hidden_size": 32768,
        "intermediate_size": 131072,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "vocab_size": 4096,
    }
    body = {"config": layers, "device": "a18-pro", "context": 131072, "prefill": 131072}
    refused(server.client.post("/v1/plan", json=body), 413, "config.num_hidden_layers")
    # Llama-3.1-405B's shape on an iPhone at the longest context, in one chunk: 126 layer
    # programs and 8 head pieces, answered (its MLP is over the ops' 16,384 cap: a problem)
    llama_405b = {
        "model_type": "llama",
        "hidden_size": 16384,
        "intermediate_size": 53248,
        "num_attention_heads": 128,
        "num_key_value_heads": 8,
        "num_hidden_layers": 126,
        "vocab_size": 128256,
    }
    body = {"config": llama_405b, "device": "a18-pro", "context": 131072, "prefill": 131072}
    answer = server.client.post("/v1/plan", json=body)
    assert answer.status_code == 200 and len(answer.json()["programs"]) == 134, answer.text
    messages = [p["message"] for p in answer.json()["problems"]]
    assert any("intermediate_size 53,248 is over the decoder ops'" in m for m in messages)
    # the same in chunks of one token is 16.5 million modelled dispatches: refused up front
    body |= {"prefill": 1, "prompt": 131072}
    refused(server.client.post("/v1/plan", json=body), 413, "prompt")


def test_the_command_line_refuses_a_verification_too_large(model, tmp_path, capsys):
    """The same estimate before `ane-kernels model --verify` starts: exit 2, nothing written."""
    from app.cli import main

    folder = tmp_path / "long"
    folder.mkdir()
    for name in ("model.safetensors", "tokenizer.json"):
        (folder / name).symlink_to(model / name)
    (folder / "config.json").write_bytes(config_with(max_position_embeddings=16_384))
    out = tmp_path / "kit.zip"
    args = ["--format", "mil", "--context", "16384", "--prefill", "4096", "--verify"]
    assert main(["model", str(folder), "-o", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert "verify" in err and "ANE_MAX_VERIFY_BYTES" in err
    assert not out.exists() and list(tmp_path.iterdir()) == [folder]
