"""Model kits from small random checkpoints written here (Llama: tied, vocabulary 16,500 so the
head is split in two; Qwen2: q/k/v biases, untied; Qwen3: per-head q/k norms, head_dim given):
in every format and both KV-cache modes the kit verifies, and its generate — run from the zip
alone — matches a float64 model computed here from the checkpoint's own float32 tensors; every
.mlpackage loads in coremltools and every .mlmodelc decompiles back to the same program."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from kit_support import KIT_LLAMA, KIT_QWEN2, KIT_QWEN3, model_tensors, write_model
from mlmodelc_support import coremltools_loads

from app.artifacts import Limits, prepare
from app.devices import get_chip
from app.devices.llm import layer_groups
from app.errors import RequestError
from app.kits import Kit, KitError, KitOptions, build_kit, model_zip
from app.kits.causal_lm import open_model
from app.kits.reference import WholeModel
from app.kits.verify import LOGITS_TOLERANCE
from app.mlmodelc import decompile
from app.planner import make_plan
from app.preflight import findings_to_json
from app.reference.load import open_artifact
from app.request import KernelRequest

CONFIGS = {"llama": KIT_LLAMA, "qwen2": KIT_QWEN2, "qwen3": KIT_QWEN3}
CONTEXT, PREFILL = 16, 4
PROMPT = [5, 17, 3, 250, 9, 1]  # six tokens: a full prefill chunk, then a padded one


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        name: write_model(root / name, config, seed=i)
        for i, (name, config) in enumerate(CONFIGS.items())
    }


def float64_model(folder: Path) -> WholeModel:
    """The whole model on the checkpoint's float32 tensors (not the kit's fp16 ones)."""
    config = json.loads((folder / "config.json").read_text())
    tensors = model_tensors(config, seed=list(CONFIGS).index(config["model_type"]))
    layers = {k.removeprefix("model."): v for k, v in tensors.items() if ".layers." in f".{k}"}
    embeddings = tensors["model.embed_tokens.weight"]
    head = embeddings if config.get("tie_word_embeddings") else tensors["lm_head.weight"]
    params = open_model(folder).stack_params(0, 1, seq_len=1)
    return WholeModel(
        params, config["num_hidden_layers"], layers, embeddings, tensors["model.norm.weight"], head
    )


def build(folders, tmp_path, arch, **options) -> tuple[Path, dict]:
    out = tmp_path / f"{arch}.kit.zip"
    result = build_kit(folders[arch], out, KitOptions(context=CONTEXT, prefill=PREFILL, **options))
    return out, result.meta


def extracted(folders, tmp_path, arch, **options) -> tuple[Path, dict]:
    """A kit built and unzipped: its directory and kit.json."""
    path, meta = build(folders, tmp_path, arch, **options)
    with zipfile.ZipFile(path) as zf:
        zf.extractall(tmp_path / "x")
    return tmp_path / "x", meta


CASES = [
    (a, f, kv) for a in CONFIGS for f in ("mlpackage", "mlmodelc", "mil") for kv in ("io", "state")
]


@pytest.mark.parametrize(("arch", "fmt", "kv"), CASES, ids=["-".join(c) for c in CASES])
def test_kit_generates_what_the_float64_model_generates(folders, tmp_path, arch, fmt, kv):
    path, meta = build(folders, tmp_path, arch, format=fmt, kv=kv, verify=True)
    report = json.loads(zipfile.ZipFile(path).read("verification.json"))
    assert report["passed"], report
    assert meta["verification"]["passed"] and report["logits"]["max_rel_error"] < 5e-3
    tokens, rows = Kit.open(path).generate(PROMPT, 5)
    assert len(tokens) == len(rows) == 5
    model = float64_model(folders[arch])
    for step, (token, row) in enumerate(zip(tokens, rows, strict=True)):
        exact = model.logits(PROMPT + tokens[:step])[-1]
        err = float(np.abs(row - exact).max())
        assert err / np.abs(exact).max() <= LOGITS_TOLERANCE, step
        top2 = np.sort(exact)[-2:]
        if top2[1] - top2[0] <= 2 * err:
            break  # a near-tie: from here fp16 may choose either
        assert token == int(np.argmax(exact)), step


def test_kit_layout_and_kit_json(folders, tmp_path):
    """Decoder chunks with both functions, head pieces within 16,384 rows covering the
    vocabulary, tables, verbatim tokenizer files, special tokens, a digest for every file."""
    path, meta = build(folders, tmp_path, "llama", max_program_weight_bytes=40_000 * 1024)
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}
    assert meta["kit_version"] == 3 and json.loads(files["kit.json"]) == meta
    assert set(meta["files"]) == set(files) - {"kit.json"}
    assert all(hashlib.sha256(files[p]).hexdigest() == d for p, d in meta["files"].items())
    heads = [p for p in meta["programs"] if p["role"] == "head"]
    assert [h["vocab"] for h in heads] == [[0, 8250], [8250, 16500]]
    decoder = meta["programs"][0]
    assert decoder["layers"] == [0, 1] and set(decoder["functions"]) == {"prefill", "decode"}
    prefill_x = decoder["functions"]["prefill"]["inputs"][0]
    assert prefill_x == {"name": "x", "shape": [1, 32, 1, PREFILL], "dtype": "fp16"}
    assert decoder["kv_cache"]["shape"] == [1, 2, CONTEXT, 8]
    assert files["tokenizer.json"] == (folders["llama"] / "tokenizer.json").read_bytes()
    assert meta["special_tokens"] == {"bos_token_id": 1, "eos_token_id": [2, 3]}
    assert len(files["embeddings.f16"]) == 16500 * 32 * 2
    assert len(files["rope.f16"]) == 2 * CONTEXT * 8 * 2


def test_layers_grouped_under_the_budget_compute_the_same(folders, tmp_path):
    """A budget of one layer per program: two decoder programs in a row give exactly the logits
    of the one program holding both layers."""
    one, meta_one = build(folders, tmp_path, "qwen3")
    layer = meta_one["programs"][0]["weight_bytes"] // 2
    two = tmp_path / "two.zip"
    meta_two = build_kit(
        folders["qwen3"],
        two,
        KitOptions(context=CONTEXT, prefill=PREFILL, max_program_weight_bytes=layer + 100),
    ).meta
    decoders = [p["layers"] for p in meta_two["programs"] if p["role"] == "decoder"]
    assert decoders == [[0, 0], [1, 1]]
    a, b = Kit.open(one).generate(PROMPT, 3), Kit.open(two).generate(PROMPT, 3)
    assert a[0] == b[0] and all(np.array_equal(x, y) for x, y in zip(a[1], b[1], strict=True))


def test_every_mlpackage_loads_in_coremltools(folders, tmp_path):
    unpacked, meta = extracted(folders, tmp_path, "qwen2", kv="state")
    assert "ANECCompile -14" in meta["kv_note"]  # what is reported of states on the ANE
    import coremltools as ct

    for program in meta["programs"]:
        package = unpacked / program["path"]
        assert coremltools_loads(package) > 0
        for function in program["functions"]:
            if function != "main":
                model = ct.models.MLModel(
                    str(package), skip_model_load=True, function_name=function
                )
                assert model.function_name == function


def test_every_mlmodelc_decompiles_back(folders, tmp_path):
    unpacked, meta = extracted(folders, tmp_path, "llama", format="mlmodelc")
    for program in meta["programs"]:
        bundle = unpacked / program["path"]
        out = tmp_path / "back" / f"{program['name']}.mlpackage"
        decompile(bundle, out)
        back, compiled = open_artifact(out).program, open_artifact(bundle).program
        assert set(back.functions) == set(compiled.functions) == set(program["functions"])
        for name, fn in back.functions.items():
            assert [op.type for op in fn.operations] == [
                op.type for op in compiled.functions[name].operations
            ]


def test_an_altered_file_is_refused(folders, tmp_path):
    path, _ = build(folders, tmp_path, "qwen3", format="mil")
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}
    files["embeddings.f16"] = b"\0\0" + files["embeddings.f16"][2:]
    with pytest.raises(KitError, match=r"embeddings\.f16: its sha256"):
        Kit(files)


def test_every_program_carries_the_preflight_the_one_builder_gives_it(folders, tmp_path):
    """kit.json holds each program's ANE preflight findings: exactly what the artifact builder
    finds for the same program asked for as a kernel request (the decoder chunk: decoder_stack
    with prefill and decode functions) or a graph (the head piece), whatever its weights."""
    _, meta = build(folders, tmp_path, "qwen3")
    decoder, head = meta["programs"]
    limits = Limits(max_program_weight_bytes=meta["plan"]["max_program_weight_bytes"])
    params = decoder["functions"]["decode"]["params"]
    functions = {"prefill": {"seq_len": PREFILL}, "decode": {"seq_len": 1}}
    as_kernel = KernelRequest.create(
        "decoder_stack", params, functions=functions, target="ios18", name="decoder_0"
    )
    hidden, rows = KIT_QWEN3["hidden_size"], KIT_QWEN3["vocab_size"]
    graph = {
        "inputs": {"x": {"shape": [1, hidden, 1, 1], "dtype": "fp16"}},
        "nodes": [
            {"id": "norm", "op": "rmsnorm", "params": {"eps": 1e-6}, "inputs": {"x": "x"}},
            {
                "id": "lm_head",
                "op": "conv",
                "params": {"out_channels": rows},
                "inputs": {"x": "norm"},
            },
        ],
        "outputs": {"logits": "lm_head"},
    }
    as_graph = KernelRequest.create(graph=graph, target="ios18", name="head_0")
    for program, request in ((decoder, as_kernel), (head, as_graph)):
        findings = findings_to_json(prepare(request, limits, random_seed=7).findings)
        assert program["preflight"] == findings, program["name"]
    # the tiny model's 4-token input is far below the IOSurface size ANE-direct runtimes need
    assert {"rule": "io.surface-min", "node": "x"} in [
        {k: f[k] for k in ("rule", "node")} for f in decoder["preflight"]
    ]


def test_a_kit_of_version_1_still_runs(folders, tmp_path):
    """kit_version 1 lacked the programs' findings, which running a kit does not read: the
    runner reads it and generates the same tokens."""
    path, meta = build(folders, tmp_path, "qwen2", format="mil")
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}
    old = {**meta, "kit_version": 1}
    old["programs"] = [{k: v for k, v in p.items() if k != "preflight"} for p in meta["programs"]]
    files["kit.json"] = json.dumps(old).encode()
    (tokens, logits), (again, expected) = (
        k.generate(PROMPT, 3) for k in (Kit(files), Kit.open(path))
    )
    assert tokens == again and np.array_equal(logits, expected)
    with pytest.raises(KitError, match="kit_version 4; this runner reads 1, 2 and 3"):
        Kit({**files, "kit.json": json.dumps({**old, "kit_version": 4}).encode()})


def test_python_api_returns_the_kit_bytes(folders):
    data = model_zip(folders["qwen2"], context=CONTEXT, prefill=PREFILL, format="mil")
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
    assert "kit.json" in names and "decoder_0/model.mil" in names and "head_0/model.mil" in names


def test_generate_refuses_what_the_context_cannot_hold(folders, tmp_path):
    path, _ = build(folders, tmp_path, "qwen2")
    with pytest.raises(RequestError, match="context of 16"):
        Kit.open(path).generate(PROMPT, 12)


def test_mistral_builds_within_its_sliding_window(tmp_path, capsys):
    from app.cli import main

    config = KIT_LLAMA | {
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        "vocab_size": 200,
        "sliding_window": 8,
        "rope_scaling": None,
    }
    folder = write_model(tmp_path / "mistral", config, seed=5)
    assert main(["model", str(folder), "-o", str(tmp_path / "k.zip"), "--context", "16"]) == 2
    assert "config.sliding_window" in capsys.readouterr().err
    path = tmp_path / "ok.zip"
    result = build_kit(folder, path, KitOptions(context=8, prefill=4, verify=True))
    assert result.meta["architecture"]["model_type"] == "mistral" and result.verification["passed"]


def test_quantized_kit_verifies_on_the_weights_it_holds(folders, tmp_path):
    _, plain = build(folders, tmp_path, "qwen2")
    quantize = {
        "layers": {"mode": "palettize", "nbits": 4},
        "head": {"mode": "linear", "dtype": "int8"},
    }
    path, meta = build(folders, tmp_path, "qwen2", quantize=quantize, verify=True)
    assert meta["quantize"] == quantize and meta["verification"]["passed"]
    for small, full in zip(meta["programs"], plain["programs"], strict=True):
        assert small["weight_bytes"] < full["weight_bytes"] * 0.6, small["name"]
    assert len(Kit.open(path).generate(PROMPT, 2)[0]) == 2


def test_formats_a_kit_cannot_take_are_refused(folders, tmp_path):
    for options in ({"format": "aimodel"}, {"kv": "cache"}, {"device": "m99"}):
        with pytest.raises(RequestError) as err:
            build_kit(folders["qwen2"], tmp_path / "k.zip", KitOptions(**options))
        assert err.value.field == next(iter(options))
    assert not (tmp_path / "k.zip").exists()


@pytest.mark.parametrize("device", ["m1", "a16"])
def test_a_device_sets_the_head_split_and_the_grouping(folders, tmp_path, device):
    """The Llama's 16,500-row head: split in two under m1's 16,384 axis, and under a16's 65,536
    too (the ops take at most 16,384 per dimension); the envelope is the device's; kit.json's
    plan is the planner's for the device (tests/test_kits_plan.py: program for program)."""
    path, meta = build(folders, tmp_path, "llama", device=device)
    plan, chip, pieces = meta["plan"], get_chip(device), 2
    assert plan["device"] == device and plan["head"]["axis_max"] == chip.axis_max.value
    rule = "axis limit of 16,384" if chip.axis_max.value == 16384 else "parameter cap of 16,384"
    assert rule in plan["head"]["rule"]
    assert plan["max_program_weight_bytes"] == chip.program_weight_bytes.value
    assert plan["head"]["programs"] == pieces
    assert [p["role"] for p in meta["programs"]].count("head") == pieces
    config = json.loads((folders["llama"] / "config.json").read_text())
    predicted = make_plan(config, device, context=CONTEXT, prefill=PREFILL).to_json()
    assert plan == {k: v for k, v in predicted.items() if k != "warnings"}
    assert plan["decode_tokens_per_s"] > 0 and plan["fits"] is True
    tokens, _ = Kit.open(path).generate(PROMPT, 2)
    (tmp_path / "plain").mkdir()
    plain_tokens, _ = Kit.open(build(folders, tmp_path / "plain", "llama")[0]).generate(PROMPT, 2)
    assert tokens == plain_tokens


def test_the_python_api_takes_a_device(folders):
    kit = model_zip(folders["qwen2"], context=CONTEXT, prefill=PREFILL, device="a15")
    with zipfile.ZipFile(io.BytesIO(kit)) as zf:
        plan = json.loads(zf.read("kit.json"))["plan"]
    assert plan["device"] == "a15" and plan["max_program_weight_bytes"] == 1 << 30
    with pytest.raises(RequestError, match="known: m1"):
        model_zip(folders["qwen2"], device="nope")


def test_a_device_envelope_groups_layers_as_the_planner_does(folders, tmp_path):
    """A budget holding two of three layers: the rule evens the runs out (2 + 1), the same one
    the planner applies."""
    layer = build(folders, tmp_path, "qwen3")[1]["programs"][0]["weight_bytes"] // 2
    assert layer_groups(3, layer, 2 * layer + 10) == (2, 1)
    assert layer_groups(16, 1, 7) == (6, 5, 5)
    with pytest.raises(RequestError) as err:
        build(folders, tmp_path, "qwen3", device="m4", max_program_weight_bytes=layer // 2)
    assert err.value.field == "max_program_weight_bytes"
