"""The planner: from config.json alone, programs under each device's envelope, speeds with
ranges, memory, and what does not fit (by which limit, by how much, and what would fit); on the
command line, over HTTP and through the Python client."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from app.api.examples import QWEN3_0_6B  # the /docs examples plan it too
from app.client import Client
from app.devices import get_chip
from app.devices.llm import palettized
from app.errors import RequestError
from app.planner import make_plan, shape_from_config
from tests.http_support import assert_problem

LLAMA_2_7B = {
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "vocab_size": 32000,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
}
LLAMA_3_2_1B = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 16,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "vocab_size": 128256,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "tie_word_embeddings": True,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
}
CONFIGS = {"llama-2-7b": LLAMA_2_7B, "llama-3.2-1b": LLAMA_3_2_1B, "qwen3-0.6b": QWEN3_0_6B}
LUT4 = {"mode": "palettize", "nbits": 4}
CONTEXT = 2048
# What the table's limits say at a context of 2048: a 7B model in fp16 needs ~14.6 GB, which only
# the M1 Max's 32 GB (two thirds for an app) holds; at 4 bits (the embedding table the app gathers
# from stays fp16) it needs ~4.7 GB, over the 4 GB assumed for an app on an 8 GB phone. The small
# models fit everywhere.
EXPECTED_FIT = {
    ("llama-2-7b", "m1-max", None): True,
    ("llama-2-7b", "m4", None): False,
    ("llama-2-7b", "a18-pro", None): False,
    ("llama-2-7b", "m1-max", 4): True,
    ("llama-2-7b", "m4", 4): True,
    ("llama-2-7b", "a18-pro", 4): False,
}


@pytest.mark.parametrize("model", CONFIGS)
@pytest.mark.parametrize("device", ["m1-max", "m4", "a18-pro"])
@pytest.mark.parametrize("bits", [None, 4])
def test_plans_fit_exactly_where_the_tables_limits_say(model, device, bits):
    chip, shape = get_chip(device), shape_from_config(CONFIGS[model])
    quantize = LUT4 if bits else None
    plan = make_plan(CONFIGS[model], device, quantize=quantize, context=CONTEXT).to_json()
    # the programs' weights (norms, LUTs and the decoder's tables beside the matrices: within
    # 1 %) and the fp16 embedding table the app gathers from
    matrices = (shape.layers * shape.layer_params + shape.head_params) * (bits or 16) / 8
    programs = sum(p["weight_bytes"] for p in plan["programs"])
    assert programs == pytest.approx(matrices, rel=1e-2) and programs >= matrices
    assert plan["embedding_bytes"] == 2 * shape.vocab * shape.hidden
    assert plan["weight_bytes"] == programs + plan["embedding_bytes"]
    kv = shape.layers * 2 * CONTEXT * shape.kv_heads * shape.head_dim * 2
    assert plan["kv_cache_bytes"] == kv and plan["first_load_bytes"] == plan["weight_bytes"]
    weights = plan["weight_bytes"]
    assert weights + kv < plan["peak_memory_bytes"] < (weights + kv) * 1.05
    memory_fits = plan["peak_memory_bytes"] <= chip.app_memory_bytes
    assert plan["fits"] is memory_fits is EXPECTED_FIT.get((model, device, bits), True)
    if not memory_fits:
        (problem,) = plan["problems"]
        assert problem["limit"] == "app_memory_bytes"
        assert problem["over_by"] == plan["peak_memory_bytes"] - chip.app_memory_bytes
        assert device in problem["message"] and f"{problem['over_by']:,}" in problem["message"]
    envelope = chip.program_weight_bytes.value
    for program in plan["programs"]:
        assert program["weight_bytes"] <= envelope, program
    layers = [p for p in plan["programs"] if "layers" in p]
    assert layers[0]["layers"][0] == 0 and layers[-1]["layers"][1] == shape.layers - 1
    heads = [p for p in plan["programs"] if "vocab" in p]
    assert plan["head"]["programs"] == len(heads) >= -(-shape.vocab // 16384)
    assert all(p["vocab"][1] - p["vocab"][0] <= 16384 for p in heads)
    for key in ("decode_tokens_per_s", "prefill_tokens_per_s"):
        low, high = plan[f"{key}_range"]
        assert 0 < low < plan[key] < high


def test_a_7b_model_in_fp16_on_an_8_gb_phone_names_the_quantization_that_fits():
    plan = make_plan(LLAMA_2_7B, "a18-pro", context=CONTEXT).to_json()
    assert not plan["fits"] and plan["problems"][0]["limit"] == "app_memory_bytes"
    fit = plan["fits_with"]
    assert fit["quantize"] == LUT4 and fit["context"] == 512
    assert fit["peak_memory_bytes"] <= get_chip("a18-pro").app_memory_bytes
    at_512 = make_plan(LLAMA_2_7B, "a18-pro", quantize=LUT4, context=512).to_json()
    assert at_512["fits"] and at_512["decode_tokens_per_s"] == fit["decode_tokens_per_s"]
    on_a_mac = make_plan(LLAMA_2_7B, "m4", context=CONTEXT).to_json()["fits_with"]
    assert on_a_mac["quantize"] == LUT4 and "context" not in on_a_mac  # int8, 6-bit: over


def test_a_layer_over_every_envelope_cannot_fit_any_split_and_says_by_how_much():
    huge = {
        **LLAMA_2_7B,
        "hidden_size": 16384,
        "intermediate_size": 16384,
        "num_hidden_layers": 2,
        "num_attention_heads": 128,
        "num_key_value_heads": 16,
    }
    weights = 2 * 16384 * 16384 + 2 * 16384 * 2048 + 3 * 16384 * 16384
    layer = 2 * weights + 2 * (2 * 16384)  # and its two norms
    plan = make_plan(huge, "m4").to_json()
    problem = next(p for p in plan["problems"] if p["limit"] == "program_weight_bytes")
    tables = plan["programs"][0]["weight_bytes"] - layer  # one layer a program, and its tables
    assert problem["over_by"] == layer - (2 << 30) and 0 < tables < 20_000
    assert "no split into whole layers fits" in problem["message"]
    # int8 would fit, but on ios18 it lowers to constexpr_blockwise_shift_scale, reported failing
    # on M4 through Core ML and on every chip ANE-direct: the 6-bit palette is named instead
    for path in ("coreml", "ane-direct"):
        named = make_plan(huge, "m4", path=path).to_json()["fits_with"]
        assert named["quantize"] == {"mode": "palettize", "nbits": 6}, path
    # Core AI has no reports: the lightest format that fits is named
    core_ai = make_plan(huge, "m4", path="coreai").to_json()["fits_with"]
    assert core_ai["quantize"] == {"mode": "linear", "dtype": "int8", "granularity": "per_channel"}


def test_a_plan_carries_the_field_reports_on_its_quantization():
    reports = make_plan(QWEN3_0_6B, "m4", quantize={"mode": "linear", "dtype": "int8"}).to_json()
    rules = {r["rule"] for r in reports["quantization_reports"]}
    assert rules == {"quant.reported-failing"}
    assert make_plan(QWEN3_0_6B, "m4").to_json()["quantization_reports"] == []


def test_the_1b_layer_the_old_budget_refused_now_groups_into_few_programs():
    plan = make_plan(LLAMA_3_2_1B, "a18-pro").to_json()
    assert [p["layers"] for p in plan["programs"] if "layers" in p] == [[0, 7], [8, 15]]
    # vocab 128,256 in pieces the ops take (16,384 rows), though the chip takes 65,536
    assert plan["head"]["programs"] == 8 and "parameter cap of 16,384" in plan["head"]["rule"]
    old = make_plan(LLAMA_3_2_1B, "a15").to_json()
    assert old["head"]["programs"] == 8 and "axis limit of 16,384" in old["head"]["rule"]


def test_sanity_fewer_bits_decode_faster_and_a_longer_context_decodes_slower():
    def decode(**kw):
        return make_plan(QWEN3_0_6B, "m4", **kw).to_json()["decode_tokens_per_s"]

    assert decode(quantize=LUT4) > decode(quantize={"mode": "palettize", "nbits": 6}) > decode()
    assert decode(context=512) > decode(context=2048) > decode(context=8192)


def test_m1_reads_int8_as_fp16_so_int8_gains_nothing_there():
    int8 = {"mode": "linear", "dtype": "int8"}
    m1 = [
        make_plan(QWEN3_0_6B, "m1", quantize=q).to_json()["decode_tokens_per_s"]
        for q in (None, int8)
    ]
    m2 = [
        make_plan(QWEN3_0_6B, "m2", quantize=q).to_json()["decode_tokens_per_s"]
        for q in (None, int8)
    ]
    assert m1[0] == m1[1] and m2[1] > m2[0]
    assert palettized(4).streams_compressed(get_chip("m1"))


# Hugging Face's bert-base-uncased and openai/whisper-tiny config.json, the keys that matter here
BERT_BASE = {
    "architectures": ["BertModel"],
    "model_type": "bert",
    "hidden_act": "gelu",
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_attention_heads": 12,
    "num_hidden_layers": 12,
    "vocab_size": 30522,
}
WHISPER_TINY = {
    "architectures": ["WhisperForConditionalGeneration"],
    "model_type": "whisper",
    "is_encoder_decoder": True,
    "activation_function": "gelu",
    "d_model": 384,
    "encoder_layers": 4,
    "decoder_layers": 4,
    "encoder_attention_heads": 6,
    "vocab_size": 51865,
}


@pytest.mark.parametrize(
    ("config", "kwargs", "field", "words"),
    [
        (
            {k: v for k, v in QWEN3_0_6B.items() if k != "num_hidden_layers"},
            {},
            "config.num_hidden_layers",
            "missing",
        ),
        (
            {k: v for k, v in QWEN3_0_6B.items() if k != "hidden_size"},
            {},
            "config.hidden_size",
            "missing",
        ),
        ({**QWEN3_0_6B, "vocab_size": "big"}, {}, "config.vocab_size", "valid integer"),
        ({**QWEN3_0_6B, "hidden_act": "gelu"}, {}, "config.hidden_act", "not supported"),
        (QWEN3_0_6B, {"device": "m9"}, "device", "a18-pro"),
        (QWEN3_0_6B, {"quantize": {"mode": "palettize", "nbits": 5}}, "quantize.nbits", ""),
        (QWEN3_0_6B, {"prefill": 4096, "context": 2048}, "prefill", "context of 2048"),
        (QWEN3_0_6B, {"prefill": 48, "context": 2048}, "prefill", "e.g. 32 or 64"),
        (QWEN3_0_6B, {"prompt": 4096, "context": 2048}, "prompt", "context of 2048"),
        ({**QWEN3_0_6B, "max_position_embeddings": 1024}, {"context": 2048}, "context", "1024"),
        (QWEN3_0_6B, {"kv": "cache"}, "kv", "state"),
        (QWEN3_0_6B, {"path": "metal"}, "path", "coreml"),
        # encoders and encoder-decoders are refused on the model_type, not on the first key
        # they spell otherwise (hidden_act 'gelu' for BERT, no hidden_size for Whisper)
        (BERT_BASE, {}, "config.model_type", "model_type 'bert' (architectures ['BertModel'])"),
        (WHISPER_TINY, {}, "config.model_type", "model_type 'whisper'"),
        (
            {k: v for k, v in WHISPER_TINY.items() if k != "is_encoder_decoder"},
            {},
            "config.model_type",
            "hidden_size: missing",
        ),
    ],
)
def test_bad_input_names_the_field(config, kwargs, field, words):
    kwargs = {"device": "m4", **kwargs}
    with pytest.raises(RequestError) as err:
        make_plan(config, kwargs.pop("device"), **kwargs)
    assert err.value.field == field and words in err.value.message


@pytest.mark.slow
def test_plan_on_the_command_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_2_7B))
    run = [sys.executable, "-m", "app.cli", "plan", str(tmp_path), "--device", "a18-pro"]
    out = subprocess.run(run, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "does not fit" in out.stdout and '"nbits": 4' in out.stdout
    answer = json.loads(
        subprocess.run(
            [*run, "--json", "--quantize", json.dumps(LUT4), "--context", "512"],
            capture_output=True,
            text=True,
        ).stdout
    )
    assert answer["fits"] and answer["precision"] == "4-bit palettized"
    bad = subprocess.run([*run[:-1], "m9"], capture_output=True, text=True)
    assert bad.returncode == 2 and "a18-pro" in bad.stderr


def test_post_plan_and_the_client(server, client):
    answer = client.post(
        "/v1/plan", json={"config": QWEN3_0_6B, "device": "a18-pro", "quantize": LUT4}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == make_plan(QWEN3_0_6B, "a18-pro", quantize=LUT4).to_json()
    assert_problem(
        client.post("/v1/plan", json={"config": QWEN3_0_6B, "device": "m9"}), 422, "device"
    )
    missing = {k: v for k, v in QWEN3_0_6B.items() if k != "vocab_size"}
    assert_problem(
        client.post("/v1/plan", json={"config": missing, "device": "m4"}), 422, "config.vocab_size"
    )
    with Client(server.url) as sdk:
        planned = sdk.plan(LLAMA_2_7B, "a18-pro")
        assert planned["fits"] is False and planned["fits_with"]["quantize"] == LUT4
        assert [d["name"] for d in sdk.devices()][-1] == "a19-pro"


@pytest.mark.slow
def test_the_pages_command_line_examples_say_what_they_should(tmp_path):
    """The commands of docs/preflight.md (the docs tests run them; this reads what they print)."""
    page = (Path(__file__).resolve().parent.parent / "docs" / "preflight.md").read_text()
    section = page.split("## Devices, plans and estimates", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in section.split("```sh\n")[1].split("```")[0].splitlines() if line]
    for folder, config in (("Qwen3-0.6B", QWEN3_0_6B), ("Llama-2-7b", LLAMA_2_7B)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config.json").write_text(json.dumps(config))
    outputs = []
    for command in commands:
        args = shlex.split(command)
        assert args[0] == ".venv/bin/ane-kernels"
        done = subprocess.run(
            [sys.executable, "-m", "app.cli", *args[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (command, done.stderr)
        outputs.append(done.stdout)
    assert "`a19-pro`" in outputs[0] and "fits" in outputs[1].splitlines()[-1]
    assert json.loads(outputs[2])["fits_with"]["precision"] == "4-bit palettized"
    assert "estimate: m1=" in outputs[3]
    assert outputs[4].startswith("m4: ") and "\na18-pro: " in outputs[4]
