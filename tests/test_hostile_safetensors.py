"""Hostile safetensors headers against a live server (uploads to /v1/blobs, multipart weight
parts of a kernel request) and the one header reader in process: every case is a 4xx
problem+json naming the tensor, the server lives on, its RSS stays flat and nothing is left
in its data directory. A 1B-class checkpoint's header is accepted."""

from __future__ import annotations

import json
import struct
import subprocess
import sys

import numpy as np
import pytest
from checkpoint_support import write_checkpoint
from hostile_support import data_files, hostile_server
from http_support import assert_problem, safetensors_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.checkpoints.files import read_header
from app.errors import RequestError
from app.tensors import safetensors_header
from app.tensors.headers import parse_header, sniff
from app.tensors.safetensors_header import MAX_HEADER_BYTES, MAX_TENSORS, HeaderFault

SAFETENSORS = {"content-type": "application/x-safetensors"}


def raw(header: dict | bytes, data: bytes = b"") -> bytes:
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def one(dtype="F32", shape=(2,), offsets=(0, 8)) -> dict:
    return {"w": {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


# (what, file bytes, words the detail must hold): each names the tensor at fault
BAD_FILES = [
    ("deep nesting", raw(b'{"w":' + b"[" * 50_000 + b"]" * 50_000 + b"}"), "nests deeper"),
    ("negative begin", raw(one(offsets=(-8, 0)), b"\0" * 8), "'w'"),
    ("reversed offsets", raw(one(offsets=(8, 0)), b"\0" * 8), "'w'"),
    ("negative dims", raw(one(shape=(-1, 4), offsets=(0, 8)), b"\0" * 8), "'w'"),
    ("two negative dims", raw(one(shape=(-2, -2), offsets=(0, 16)), b"\0" * 16), "'w'"),
    ("dtype as a list", raw(one(dtype=["F32"]), b"\0" * 8), "'w'"),
    ("dtype unknown", raw(one(dtype="F7"), b"\0" * 8), "'w'"),
    ("offsets past the file", raw(one(offsets=(0, 8)), b"\0" * 4), "'w'"),
    ("a float dim", raw(one(shape=(2.0,)), b"\0" * 8), "'w'"),
    ("a bool offset", raw(one(offsets=(False, 8)), b"\0" * 8), "'w'"),
    ("a missing key", raw({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8), "'w'"),
    (
        "overlapping tensors",
        raw(
            {
                "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]},
            },
            b"\0" * 12,
        ),
        "overlaps",
    ),
    ("entry not an object", raw(b'{"w": 1}'), "'w'"),
    ("metadata not strings", raw({"__metadata__": {"a": 1}, **one()}, b"\0" * 8), "__metadata__"),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = tmp_path_factory.mktemp("hostile-st") / "data"
    limits = {"max_weight_bytes": str(80 << 20), "max_body_bytes": str(96 << 20)}
    with hostile_server(data, **limits) as live:
        yield live


@pytest.mark.parametrize(("what", "body", "words"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_bad_headers_are_refused_on_upload(server, what, body, words):
    with server.leaves_nothing():
        answer = server.client.post("/v1/blobs", content=body, headers=SAFETENSORS)
        problem = assert_problem(answer, 422, "file")
    assert words in problem["detail"], problem
    server.alive()


@pytest.mark.parametrize(
    ("what", "body", "words"), BAD_FILES[:6], ids=[c[0] for c in BAD_FILES[:6]]
)
def test_bad_headers_are_refused_as_weight_parts(server, what, body, words):
    spec = json.dumps({"channels": 2, "spatial": 1, "format": "mil"})
    with server.leaves_nothing():
        answer = server.client.post(
            "/v1/kernels/rmsnorm", files={"spec": (None, spec), "weight": ("w.safetensors", body)}
        )
        problem = assert_problem(answer, 422, "weights.weight")
    assert words in problem["detail"], problem


def test_a_70_mb_header_is_refused_before_it_is_read(server):
    entry = '"t{}":{{"dtype":"F16","shape":[1],"data_offsets":[{},{}]}}'
    text = "{" + ",".join(entry.format(i, 2 * i, 2 * i + 2) for i in range(1_000_000)) + "}"
    body = raw(text.encode())
    assert len(body) > 60 << 20
    with server.leaves_nothing():
        problem = assert_problem(
            server.client.post("/v1/blobs", content=body, headers=SAFETENSORS), 422, "file"
        )
    assert f"over the limit of {MAX_HEADER_BYTES} bytes" in problem["detail"]


def test_more_tensors_than_the_limit_are_refused_unparsed(server):
    entry = '"{}":{{"dtype":"U8","shape":[1],"data_offsets":[{},{}]}}'
    n = MAX_TENSORS + 1
    text = "{" + ",".join(entry.format(i, i, i + 1) for i in range(n)) + "}"
    body = raw(text.encode(), b"\0" * n)
    with server.leaves_nothing():
        problem = assert_problem(
            server.client.post("/v1/blobs", content=body, headers=SAFETENSORS), 422, "file"
        )
    assert f"{MAX_TENSORS} tensors" in problem["detail"]


def test_a_one_tensor_bf16_upload_is_kept_as_the_checkpoint_it_would_be_in(server):
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    bf16 = (values.view(np.uint32) >> 16).astype(np.uint16)  # exact: small integers
    header = {"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 12]}}
    answer = server.client.post(
        "/v1/blobs", content=raw(header, bf16.tobytes()), headers=SAFETENSORS
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["dtype"] == "safetensors" and answer.json()["tensors"] == 1


# -- in process: the one reader -------------------------------------------------------------


def one_b_class_header() -> dict:
    """The header of a 1B-class checkpoint: 16 layers x 9 tensors, a 128,256 x 2,048 bf16
    embedding, its offsets laid end to end."""
    hidden, inter, kv, vocab = 2048, 8192, 512, 128_256
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for i in range(16):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": [hidden],
            p + "post_attention_layernorm.weight": [hidden],
            p + "self_attn.q_proj.weight": [hidden, hidden],
            p + "self_attn.k_proj.weight": [kv, hidden],
            p + "self_attn.v_proj.weight": [kv, hidden],
            p + "self_attn.o_proj.weight": [hidden, hidden],
            p + "mlp.gate_proj.weight": [inter, hidden],
            p + "mlp.up_proj.weight": [inter, hidden],
            p + "mlp.down_proj.weight": [hidden, inter],
        }
    header, at = {}, 0
    for name, shape in shapes.items():
        end = at + 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [at, end]}
        at = end
    return header


def test_a_1b_class_checkpoint_header_is_accepted(tmp_path):
    header = one_b_class_header()
    total = max(e["data_offsets"][1] for e in header.values())
    assert total > 2 << 30  # a 2+ GB checkpoint
    text = json.dumps(header).encode()
    parsed = safetensors_header.parse(text, total)
    assert len(parsed.entries) == 16 * 9 + 2
    assert parsed.entries["model.embed_tokens.weight"].shape == (128_256, 2048)
    # On disk, sparse: the reader checks every range against the file's size.
    path = tmp_path / "model.safetensors"
    with open(path, "wb") as f:
        f.write(raw(text))
        f.truncate(8 + len(text) + total)
    tensors = read_header(path)
    assert tensors["model.layers.15.mlp.down_proj.weight"].nbytes == 2 * 2048 * 8192


@pytest.mark.parametrize(("what", "body", "words"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_the_two_readers_refuse_the_same_files(tmp_path, what, body, words):
    path = tmp_path / "x.safetensors"
    path.write_bytes(body)
    with pytest.raises(RequestError, match="safetensors") as as_checkpoint:
        read_header(path)
    with pytest.raises(RequestError, match="safetensors") as as_tensor:
        sniff(path, "file")
    assert words in as_checkpoint.value.message and words in as_tensor.value.message


# -- property-based: random headers never escape as anything but a refusal ------------------

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
entry = st.fixed_dictionaries(
    {
        "dtype": st.one_of(st.sampled_from(sorted(safetensors_header.ITEMSIZE)), json_value),
        "shape": st.one_of(st.lists(st.integers(-3, 2**40), max_size=9), json_value),
        "data_offsets": st.one_of(
            st.lists(st.integers(-10, 2**40), min_size=2, max_size=2), json_value
        ),
    }
)
headers = st.dictionaries(st.text(min_size=1, max_size=8), st.one_of(entry, json_value), max_size=5)


@pytest.mark.slow
@settings(max_examples=300, deadline=2000)
@given(headers, st.integers(0, 64))
def test_random_headers_are_read_or_refused(header, data_size):
    body = raw(header, b"\0" * data_size)
    try:
        parsed = safetensors_header.parse(body[8:], data_size)
    except HeaderFault:
        parsed = None
    if parsed is not None:
        for e in parsed.entries.values():
            assert 0 <= e.begin <= e.end <= data_size
    try:
        parse_header(body, "file", whole=True, file_size=len(body))
    except RequestError as exc:
        assert exc.field == "file"


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(headers)
def test_random_headers_against_the_live_server(server, header):
    before = data_files(server.data_dir)
    answer = server.client.post("/v1/blobs", content=raw(header, b"\0" * 16), headers=SAFETENSORS)
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.json()["field"] == "file"
        assert data_files(server.data_dir) <= before


def test_good_files_still_read_alike(tmp_path):
    path = tmp_path / "ok.safetensors"
    path.write_bytes(safetensors_bytes({"w": np.ones((2, 3), np.float32)}))
    tensor = sniff(path, "file")
    assert tensor.shape == (2, 3) and read_header(path)["w"].offset == tensor.offset


@pytest.mark.parametrize(
    ("what", "body", "words"), BAD_FILES[:6], ids=[c[0] for c in BAD_FILES[:6]]
)
@pytest.mark.slow
def test_the_cli_refuses_a_hostile_checkpoint(tmp_path, what, body, words):
    path, _, _ = write_checkpoint(tmp_path / "ckpt")
    path.write_bytes(body)
    out = tmp_path / "layer.zip"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "app.cli",
            "compile",
            "decoder_layer",
            "--checkpoint",
            str(path),
            "--layers",
            "0",
            "--params",
            '{"seq_len": 2}',
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and words in result.stderr, result.stderr
    assert "model.safetensors" in result.stderr and not out.exists()
