"""`plan` and `model` lay a kit out with one function (app/planner/layout.py): the kit built is
the plan, program for program (names, layers, vocabulary rows, functions, precision), and each
program's weight.bin holds exactly the plan's weight bytes (blob headers and alignment aside),
on three devices and with no device, in fp16 and two quantizations. Honest quantization: linear
int4 on an iPhone chip warns in the summary and kit.json, and --strict refuses it (exit 2; 422
over HTTP) with nothing written."""

from __future__ import annotations

import json
import zipfile

import pytest
from http_support import assert_problem
from kit_support import KIT_LLAMA, KIT_QWEN2, KIT_QWEN3, write_model

from app.blob.reader import BlobReader
from app.cli import main
from app.errors import RequestError
from app.kits import KitOptions, build_kit_files
from app.planner import make_plan
from app.planner.layout import MAX_LIVE_FUNCTIONS, lay_out

LUT4 = {"mode": "palettize", "nbits": 4}
INT8 = {"mode": "linear", "dtype": "int8"}
INT4 = {"mode": "linear", "dtype": "int4"}
# a palette per 4 output channels: the head's pieces come in whole groups (16,500 rows: 8,252 +
# 8,248, not 8,250 + 8,250)
GROUPED = {"mode": "palettize", "nbits": 4, "granularity": "per_grouped_channel", "group_size": 4}
CONFIGS = {"llama": KIT_LLAMA, "qwen2": KIT_QWEN2, "qwen3": KIT_QWEN3}
CONTEXT, PREFILL = 16, 4


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {
        name: write_model(root / name, c, seed=i) for i, (name, c) in enumerate(CONFIGS.items())
    }


def payload(files: dict[str, bytes], program: str) -> int:
    """The bytes of every blob in the program's weight.bin: headers and alignment left out."""
    (name,) = [n for n in files if n.startswith(f"{program}/") and n.endswith("weight.bin")]
    with BlobReader(files[name]) as reader:
        return sum(e.size_in_bytes for e in reader.entries())


CASES = [
    ("llama", "a18-pro", None),
    ("llama", "m1", LUT4),
    ("qwen2", "m4", INT8),
    ("qwen2", None, {"layers": LUT4, "head": INT8}),
    ("qwen3", "a18-pro", LUT4),
    ("qwen3", "m4", None),
    ("qwen3", "m1", {"layers": INT8}),
    ("llama", "m4", GROUPED),
    ("qwen3", None, {"layers": GROUPED, "head": {"mode": "palettize", "nbits": 3}}),
]


@pytest.mark.parametrize(("model", "device", "quantize"), CASES)
def test_the_kit_built_is_the_plan(folders, model, device, quantize):
    options = KitOptions(
        format="mil", context=CONTEXT, prefill=PREFILL, device=device, quantize=quantize
    )
    built = build_kit_files(folders[model], options)
    meta = built.meta
    plan = make_plan(
        CONFIGS[model], device, quantize=quantize, context=CONTEXT, prefill=PREFILL
    ).to_json()
    assert meta["plan"] == {k: v for k, v in plan.items() if k != "warnings"}
    assert meta["warnings"] == plan["warnings"]
    assert [p["name"] for p in meta["programs"]] == [p["name"] for p in plan["programs"]]
    for kit_program, planned in zip(meta["programs"], plan["programs"], strict=True):
        where = "layers" if planned["role"] == "decoder" else "vocab"
        assert kit_program[where] == planned[where]
        assert sorted(kit_program["functions"]) == sorted(planned["functions"])
        assert kit_program["weight_bytes"] == planned["weight_bytes"], planned["name"]
        assert payload(built.files, planned["name"]) == planned["weight_bytes"], planned["name"]
    assert plan["functions"] == sum(len(p["functions"]) for p in meta["programs"])
    # the precision of every piece: the head quantized as asked (one config: both parts)
    layers, head = (quantize or {}).get("layers", quantize), (quantize or {}).get("head", quantize)
    if quantize is not None and set(quantize) <= {"layers", "head"}:
        layers, head = quantize.get("layers"), quantize.get("head")
    assert plan["quantize"] == {"layers": layers, "head": head}
    if head is None:
        assert plan["precisions"]["head"] == "fp16"


def test_a_budget_of_two_layers_lays_out_three_programs_and_builds_them(folders):
    """Several decoder programs: the same cut in the plan and the kit, byte for byte."""
    one = lay_out(KIT_QWEN3, context=CONTEXT, prefill=PREFILL).layer_bytes
    config = KIT_QWEN3 | {"num_hidden_layers": 5}
    folder = write_model(folders["qwen3"].parent / "qwen3-5", config, seed=3)
    options = KitOptions(format="mil", context=CONTEXT, prefill=PREFILL)
    budget = {"max_program_weight_bytes": 2 * one + 1}
    built = build_kit_files(folder, KitOptions(**vars(options) | budget))
    planned = lay_out(config, context=CONTEXT, prefill=PREFILL, **budget)
    assert [p["layers"] for p in built.meta["programs"] if p["role"] == "decoder"] == [
        [0, 1],
        [2, 3],
        [4, 4],
    ]
    for p in planned.programs:
        assert payload(built.files, p.name) == p.weight_bytes


def test_grouped_palettes_refused_where_groups_cannot_be_whole():
    """A group size that does not divide a projection's channels or the vocabulary is refused by
    plan and kit alike, naming the option's key, before anything is built."""
    with pytest.raises(RequestError) as err:
        lay_out(KIT_LLAMA, quantize=GROUPED | {"group_size": 16})  # k_proj: 16 channels, fine
    assert err.value.field == "quantize.group_size" and "16,500" in err.value.message
    with pytest.raises(RequestError) as err:
        make_plan(KIT_QWEN3, "m4", quantize={"layers": GROUPED | {"group_size": 64}})
    assert err.value.field == "quantize.layers.group_size"


def test_the_head_split_names_its_rule():
    """The Llama's 16,500 rows: two pieces under the ops' 16,384 cap on a chip that takes 65,536
    rows, under the chip's own axis limit on m1 and with no device; under the envelope when it
    holds fewer rows."""
    rule = lay_out(KIT_LLAMA, device="a18-pro").head_rule
    assert "parameter cap of 16,384" in rule
    assert "axis limit of 16,384" in lay_out(KIT_LLAMA, device="m1").head_rule
    assert "axis limit of 16,384" in lay_out(KIT_LLAMA).head_rule
    small = lay_out(KIT_LLAMA, max_program_weight_bytes=64 * 2 * KIT_LLAMA["hidden_size"])
    assert "envelope" in small.head_rule and len(small.heads) > 2


def test_live_functions_over_fifteen_warn():
    """A kit loads every function at once: Qwen3-0.6B's shape (1 decoder program of 2, 10 head
    pieces) is 12, within the 15 measured; a 16th warns, with its source."""
    from app.api.examples import QWEN3_0_6B

    qwen = lay_out(QWEN3_0_6B, device="a18-pro", quantize=LUT4)
    assert qwen.functions == 12 and qwen.warnings() == []
    many = lay_out(
        KIT_QWEN3 | {"num_hidden_layers": 8},
        max_program_weight_bytes=lay_out(KIT_QWEN3).layer_bytes,
    )
    assert many.functions == 2 * 8 + 1 > MAX_LIVE_FUNCTIONS
    (warning,) = many.warnings()
    assert warning["rule"] == "kit.live-functions" and "17 compiled functions" in warning["message"]
    assert "tmc/apple" in warning["source"]


def test_plan_and_model_share_their_defaults(folders, capsys):
    """No options: both lay out for the default envelope with a context of min(512,
    max_position_embeddings) and chunks of 64; `plan DIR --context 64` works."""
    assert main(["plan", str(folders["qwen3"]), "--context", "64", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["device"] is None and plan["context"] == 64 and plan["prefill"] == 64
    assert plan["decode_tokens_per_s"] is None and "no device" in plan["envelope"]
    assert main(["plan", str(folders["qwen3"])]) == 0
    text = capsys.readouterr().out
    assert "context 64, prefill chunks of 64" in text  # max_position_embeddings: 64
    assert "no prediction: name a device" in text
    assert main(["plan", str(folders["qwen3"]), "--prefill", "5"]) == 2
    assert "prefill" in capsys.readouterr().err


def test_linear_int4_on_an_iphone_warns_and_strict_refuses_it(folders, tmp_path, capsys):
    out = tmp_path / "kit.zip"
    args = ["model", str(folders["qwen2"]), "-o", str(out), "--format", "mil"]
    args += ["--context", "16", "--prefill", "4", "--device", "iPhone 16 Pro"]
    args += ["--quantize", json.dumps(INT4)]
    assert main(args) == 0
    summary = capsys.readouterr().out
    assert "warning quant.reported-failing (layers and head)" in summary
    assert "warning quant.not-modelled" in summary
    with zipfile.ZipFile(out) as zf:
        warnings = json.loads(zf.read("kit.json"))["warnings"]
    assert {w["rule"] for w in warnings} == {"quant.reported-failing", "quant.not-modelled"}
    assert all(w["source"] for w in warnings)
    strict = tmp_path / "strict.zip"
    assert main([*args[:3], str(strict), *args[4:], "--strict"]) == 2
    err = capsys.readouterr().err
    assert "quantize" in err and "reported failing" in err and not strict.exists()
    assert main(["plan", str(folders["qwen2"]), *args[6:], "--strict"]) == 2
    # 4-bit palettes are not reported failing there: no warning, and strict builds
    assert main([*args[:-1], json.dumps(LUT4), "--strict"]) == 0
    assert "(layers and head)" not in capsys.readouterr().out
    with zipfile.ZipFile(out) as zf:
        assert json.loads(zf.read("kit.json"))["warnings"] == []


def test_strict_is_a_422_before_anything_is_queued_over_http(folders, server, client):
    """POST /v1/models with strict: refused naming `quantize` with no job queued (the kit's
    limits are derived first, and its plan with them); without it the job is queued. POST
    /v1/plan takes strict the same way."""
    from app.client import Client
    from app.client.flows import checkpoint_files

    with Client(server.url) as sdk:
        files = {
            name: sdk.upload_file(path)["digest"]
            for name, path in checkpoint_files(folders["qwen2"]).items()
        }
    body = {"files": files, "format": "mil", "context": 16, "prefill": 4}
    body |= {"device": "iPhone 16 Pro", "quantize": INT4}
    jobs = len(client.get("/v1/jobs").json()["jobs"])
    assert_problem(client.post("/v1/models", json=body | {"strict": True}), 422, "quantize")
    assert len(client.get("/v1/jobs").json()["jobs"]) == jobs  # nothing queued
    assert client.post("/v1/models", json=body).status_code == 202
    plan = {"config": KIT_QWEN2, "device": "a18-pro", "quantize": INT4, "context": 16}
    answer = client.post("/v1/plan", json=plan)
    assert answer.status_code == 200 and answer.json()["warnings"], answer.text
    assert_problem(client.post("/v1/plan", json=plan | {"strict": True}), 422, "quantize")


def test_the_iphone_walkthrough_names_products_as_the_device_table_does():
    """docs/kits.md's chip | iPhones table is app/devices/products.py's, row for row."""
    from pathlib import Path

    from app.devices.products import PRODUCTS

    page = (Path(__file__).resolve().parents[1] / "docs" / "kits.md").read_text()
    section = page.split("## A 4-bit kit for an iPhone", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    shown = {}
    for row in rows:
        chip, phones = (cell.strip() for cell in row.strip("|").split("|"))
        shown[chip.strip("`")] = phones.split(", ")
    expected: dict[str, list[str]] = {}
    for product, chip in PRODUCTS.items():
        if product.startswith("iPhone"):
            expected.setdefault(chip, []).append(product)
    assert shown == expected
