"""The bytes and keys of a few requests, pinned: a refactoring that leaves the generator version
alone must leave these alone too (a change here is either a bug or a reason to bump the version).

Each case is built from fixed inputs (seeded weights, a seeded random checkpoint); the pinned
values are the request key and the sha256 of the zip (a kit: of every file but kit.json, which
describes the build). They were computed before the op records replaced the per-module tables.
`PIN_PRINT=1 pytest tests/test_pinned_bytes.py -s` prints what a build gives now.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from checkpoint_support import LLAMA, write_checkpoint
from kit_support import KIT_QWEN3, write_model

from app.artifacts import Limits, prepare, zip_bytes
from app.compile import save_compiled
from app.compile.linux import LinuxCompiler
from app.request import KernelRequest

DECODER = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "seq_len": 8,
}


def _weights(seed: int, **shapes: tuple[int, ...]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: (0.3 * rng.standard_normal(s)).astype(np.float32) for n, s in shapes.items()}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _packaged(request: KernelRequest, **kw: Any) -> tuple[str, str]:
    return request.key, _sha(zip_bytes(prepare(request, **kw)))


def conv_mlpackage(tmp_path: Path) -> tuple[str, str]:
    params = {"in_channels": 16, "out_channels": 8, "spatial": 4, "bias": True}
    weights = _weights(1, weight=(8, 16), bias=(8,))
    return _packaged(KernelRequest.create("conv", params, weights, format="mlpackage"))


def matmul_mlmodelc(tmp_path: Path) -> tuple[str, str]:
    params = {"in_features": 16, "out_features": 8, "tokens": 4}
    request = KernelRequest.create("matmul", params, _weights(2, weight=(8, 16)), format="mlmodelc")
    path = tmp_path / "matmul.mlmodelc.zip"
    save_compiled(prepare(request), LinuxCompiler(), path, 120)
    return request.key, _sha(path.read_bytes())


def rmsnorm_mil(tmp_path: Path) -> tuple[str, str]:
    weights = {"weight": 1 + _weights(3, weight=(16,))["weight"]}
    request = KernelRequest.create("rmsnorm", {"channels": 16, "spatial": 4}, weights, format="mil")
    return _packaged(request)


def sdpa_aimodel(tmp_path: Path) -> tuple[str, str]:
    pytest.importorskip("coreai.authoring", reason="needs the coreai extra (coreai-core)")
    params = {"seq_len": 8, "head_dim": 16, "n_heads": 2}
    return _packaged(KernelRequest.create("sdpa", params, format="aimodel"), random_seed=0)


SPLIT_GRAPH = {
    "inputs": {"x": {"shape": [1, 16, 1, 8]}},
    "nodes": [
        {"id": "norm", "op": "rmsnorm", "inputs": {"x": "x"}},
        {
            "id": "halves",
            "op": "split",
            "params": {"axis": 1, "num_splits": 2},
            "inputs": {"x": "norm"},
        },
        {"id": "a", "op": "conv", "params": {"out_channels": 8}, "inputs": {"x": "halves.0"}},
        {"id": "b", "op": "conv", "params": {"out_channels": 8}, "inputs": {"x": "halves.1"}},
        {"id": "act", "op": "silu", "inputs": {"x": "a"}},
        {"id": "total", "op": "add", "inputs": {"x": "act", "y": "b"}},
    ],
    "outputs": {"sum": "total", "upper": "halves.1"},
    "split": True,
}


def split_graph(tmp_path: Path, passes: str = "none") -> tuple[str, str]:
    """Graph passes "none": the key and bytes a graph had before passes existed."""
    weights = _weights(4, **{"norm.weight": (16,), "a.weight": (8, 8), "b.weight": (8, 8)})
    request = KernelRequest.create(
        graph=SPLIT_GRAPH, weights=weights, format="mil", name="m", passes=passes
    )
    prepared = prepare(request, Limits(max_program_weight_bytes=170))
    assert prepared.chain is not None and len(prepared.chain.parts) == 2
    return request.key, _sha(zip_bytes(prepared))


def split_graph_default(tmp_path: Path) -> tuple[str, str]:
    """The default graph passes, each part of the chain through them: a pass that changes what a
    program becomes changes these bytes, and must bump the passes' VERSION (app/passes), which
    changes the key."""
    return split_graph(tmp_path, "default")


def decoder_functions(tmp_path: Path) -> tuple[str, str]:
    functions = {"prefill": {}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 16}}
    request = KernelRequest.create("decoder_layer", DECODER, functions=functions, target="ios18")
    return _packaged(request, random_seed=5)


def palettized_conv(tmp_path: Path) -> tuple[str, str]:
    params = {"in_channels": 32, "out_channels": 16, "spatial": 4}
    request = KernelRequest.create(
        "conv",
        params,
        _weights(6, weight=(16, 32)),
        quantize={"mode": "palettize", "nbits": 4},
        target="ios18",
    )
    return _packaged(request)


def checkpoint_op(tmp_path: Path) -> tuple[str, str]:
    from app.checkpoints import load

    path, config, _ = write_checkpoint(tmp_path / "ck", LLAMA, dtype="bfloat16", seed=7)
    loaded = load("decoder_layer", path, config, 1, {"seq_len": 4})
    return _packaged(KernelRequest.create("decoder_layer", loaded.params, loaded.weights))


CASES: dict[str, Callable[[Path], tuple[str, str]]] = {
    "conv-mlpackage": conv_mlpackage,
    "matmul-mlmodelc": matmul_mlmodelc,
    "rmsnorm-mil": rmsnorm_mil,
    "sdpa-aimodel": sdpa_aimodel,
    "split-graph": split_graph,
    "split-graph-default": split_graph_default,
    "decoder_layer-functions": decoder_functions,
    "palettized-conv": palettized_conv,
    "checkpoint-op": checkpoint_op,
}

# (request key, sha256 of the zip). A catalog kernel's key holds the hand-written pipeline's
# version since its programs went through it (a pass can fire on some weights' values): those
# keys moved then, and again with VERSION 5; every zip is byte for byte what it was.
PINNED: dict[str, tuple[str, str]] = {
    "conv-mlpackage": (
        "b3dbc6e3949673ede8e88b7302954e8106e99fdd4ee3646119d41f2dc40b55f7",
        "cce9159d89fc1085d369c4321c9cbc1e16064b14cd87ea574548e83049ffedfa",
    ),
    "matmul-mlmodelc": (
        "91962f7c34ab1e0c14b5622c8f6cced331c6917956294fb16f4c22cec64b1e54",
        "7a766f4e8e41c6d837ea41bdfa014e375a4c7c79b1b4d99581d375342df1b92d",
    ),
    "rmsnorm-mil": (
        "c1f3ddbf079d15d937b9ca41f0f1ac9279049e56ad02a8b77400b501aeb8b4b7",
        "617da1f1e2a9ae089cb9e948c6c2ea4c62530f9738174c2de19328273f32bf0b",
    ),
    "sdpa-aimodel": (
        "68d1ae8159b59f621a7ddced561b3b8b1c47c66622abb3eb74c0cfc1225261e6",
        "0a5ac127f7bd3089178b784797b1aba8f97dbc3030680a48a9599993932d5ed7",
    ),
    "split-graph": (
        "bf0d5dfcc990f834495239cbebc5c288af8a159d2b644b566fa98bfc0ce504ac",
        "f65b5540e45b537b6c0609d27fb02efc84cc3e1b82d547d2ba50af37b2cc4353",
    ),
    # the default pipeline's VERSION 5 (VERSION 2: the passes whose primitives came after
    # VERSION 1; 3: the other spellings of a normalization and a channels-last prelu; 4:
    # expand_high_rank_reshape_and_transpose; 5: int_op_canonicalization and
    # prefer_state_in_downstream): the key and kernel.json hold the version and, for mil, the
    # three passes left out (gelu and layer_norm writers); model.mil and weight.bin of both
    # parts are byte for byte VERSION 1's (with VERSION set back to 4 the key and the zip are
    # VERSION 4's pins exactly)
    "split-graph-default": (
        "3ab466471b0005552ef9f08e5a1ef0e72623ae413567257ce7336bdc5fd83d91",
        "2c1b7933e75a19bdab8f789b2d48894fc3c2e89c7f03a84a2d3412842f63b3a1",
    ),
    "decoder_layer-functions": (
        "73e4920bec8285441cb5504daa55cc57feb0db91afa81857653f6eed821cf583",
        "6da925a6d6555e8dd91c9f1a0b06edc07e15b4139a528ecb2564805fbc005157",
    ),
    "palettized-conv": (
        "1592c4abcf9a62519ce720735f1d2e53e88c8f0a0d3539fa8eaea694a94326ce",
        "f8149f13fceff08f2fbe91d217fa56ee42ebc40d6ec57facbf6d2192e5696398",
    ),
    "checkpoint-op": (
        "f2f124a0bca6e2e50de7ee01bf57e458f916f874edaf338d38e665bce91026c7",
        "4af2a3ebe23680bfa0a6ad5ac541b34d37845ff45d73ffa57fbb3f9a09cdbd92",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_request_keys_and_zip_bytes_are_unchanged(case, tmp_path):
    got = CASES[case](tmp_path)
    if os.environ.get("PIN_PRINT"):
        print(f"    {case!r}: {got!r},")
    assert got == PINNED[case]


# every file of the kit but kit.json: path -> sha256
KIT_FILES: dict[str, str] = {
    "decoder_0.mlmodelc/analytics/coremldata.bin": "3254589e02acdc39841f19744ae4789605f2f746a9e39d11890aeb1f563defd1",
    "decoder_0.mlmodelc/coremldata.bin": "36cd23988ddcfd7ce3643667d3324beb65fff5def803e9c6b8442cbcf2227322",
    "decoder_0.mlmodelc/metadata.json": "9ecfbb26f10125a883eb828c23f17ecbe6676c18a26e83dd676b638ed927c772",
    "decoder_0.mlmodelc/model.mil": "7bb5c020caec526b7c8b42615400451946866a9f1a838ea54639a72de4b08f3b",
    "decoder_0.mlmodelc/weights/weight.bin": "b8ee84fd0f67246690f58e76bbbe476bbc4af9dfa83c6662a1a06e8886eebd7d",
    "embeddings.f16": "0c5291e0821b5072694cdd164bff2698a4cafe6f82315deda8dd4673c169c5fd",
    "generation_config.json": "bf65c8eddfeca5263bf5798abdf3f0359937a517f8e63f394295a8057c735bec",
    "head_0.mlmodelc/analytics/coremldata.bin": "3830d8e136ec0c11cbe3ae038625aa52b2582759d099fe74c139453b9a93b80a",
    "head_0.mlmodelc/coremldata.bin": "b9d2076e3399a9128521aafd5ec0c7be11da188c24672b8c47b2d21352b1e7d0",
    "head_0.mlmodelc/metadata.json": "ee702f89e2f3c9a95d0da9becef78906a46310a6887d44cf78c7fb3e1d85ce67",
    "head_0.mlmodelc/model.mil": "44518cdfafe5e6f78588f46eb1994822d6e88f0f133a8529a8b2a3e2d9be8543",
    "head_0.mlmodelc/weights/weight.bin": "200495cb91af09232e141a23c5189e92a9dfc77aa8296165c854142430bc39eb",
    "rope.f16": "3ea7a7831741111e1d8e5497d6e51e6123d88f0fdbda74a72996eb86513f425e",
    "tokenizer.json": "8804d77ce4b12b864e78164251fa2c88ef07a94ea5c3af936a5aadf290d047cb",
}
# the job key's version went 1 -> 2 when one quantize config came to cover the head too (kits
# built under the old meaning are rebuilt), and the key took the hand-written pipeline's
# version when kit programs went through it (and moves with it: VERSION 5); the files below did
# not change
KIT_KEY = "d0bcfe5ec8bb15b32feeb5a47b87c2055cc25eb4efb763ffc5cc8a6138c24c23"


def test_a_tiny_qwen3_kit_as_mlmodelc_is_unchanged(tmp_path):
    from app.kits import KitOptions, build_kit
    from app.kits.job import ModelRequest

    folder = write_model(tmp_path / "qwen3", KIT_QWEN3, seed=2)
    options = {"format": "mlmodelc", "context": 16, "prefill": 4}
    files = {p.name: f"sha256:{_sha(p.read_bytes())}" for p in sorted(folder.iterdir())}
    key = ModelRequest.create(files, options).key
    out = tmp_path / "qwen3.kit.zip"
    build_kit(folder, out, KitOptions(**options))
    with zipfile.ZipFile(out) as zf:
        digests = {
            n: _sha(zf.read(n)) for n in zf.namelist() if not n.endswith("/") and n != "kit.json"
        }
    if os.environ.get("PIN_PRINT"):
        print(f"KIT_KEY = {key!r}")
        print("KIT_FILES = {")
        for name, digest in sorted(digests.items()):
            print(f"    {name!r}: {digest!r},")
        print("}")
    assert key == KIT_KEY
    assert digests == KIT_FILES
