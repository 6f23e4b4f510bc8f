"""`ane-kernels model` and `ane-kernels generate`: the summary, --json, and bad input — each
exit 2 naming the file, tensor or key, with nothing written."""

from __future__ import annotations

import json
import shutil
import zipfile

import pytest
from checkpoint_support import write_safetensors
from kit_support import KIT_QWEN2, KIT_QWEN3, TOKENIZER_JSON, model_tensors, write_model

from app.cli import main


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_model(tmp_path_factory.mktemp("ckpt") / "qwen3", KIT_QWEN3, seed=2)


def test_model_then_generate_json(folder, tmp_path, capsys):
    out = tmp_path / "kit.zip"
    code = main(
        [
            "model",
            str(folder),
            "-o",
            str(out),
            "--context",
            "16",
            "--prefill",
            "4",
            "--kv",
            "state",
            "--verify",
        ]
    )
    summary = capsys.readouterr().out
    assert code == 0 and out.is_file()
    assert "qwen3: 2 layers" in summary and "decoder_0.mlpackage" in summary
    assert "verify: passed" in summary
    code = main(["generate", str(out), "--prompt-ids", "1,2,3", "--max-new-tokens", "3", "--json"])
    printed = json.loads(capsys.readouterr().out)
    tokens = printed["tokens"]  # three, or fewer ending at an eos id (generation_config: 2, 3)
    assert code == 0 and (len(tokens) == 3 or (len(tokens) < 3 and tokens[-1] in (2, 3)))
    assert not set(tokens[:-1]) & {2, 3}
    assert [len(row) for row in printed["logits"]] == [KIT_QWEN3["vocab_size"]] * len(tokens)
    assert printed["tokens"] == [max(range(len(r)), key=r.__getitem__) for r in printed["logits"]]


def test_model_prints_every_programs_preflight_as_compile_does(folder, tmp_path, capsys):
    """The summary counts every program's findings and lists the warnings by rule, each node
    named after its program; --json carries the findings themselves, as kit.json holds them."""
    out = tmp_path / "kit.zip"
    args = ["model", str(folder), "-o", str(out), "--context", "16", "--prefill", "4"]
    assert main([*args, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    with zipfile.ZipFile(out) as zf:
        programs = json.loads(zf.read("kit.json"))["programs"]
    expected = [{**f, "node": f"{p['name']}.{f['node']}"} for p in programs for f in p["preflight"]]
    assert printed["preflight"] == expected and expected
    counts = printed["preflight_counts"]
    assert counts["warning"] == sum(f["severity"] == "warning" for f in expected) > 0
    assert main(args) == 0
    text = capsys.readouterr().out
    levels = " ".join(f"{s}={counts[s]}" for s in ("error", "warning", "advice"))
    assert f"preflight: {levels}" in text
    assert "warning io.surface-min" in text and "(decoder_0.x, " in text


def _variant(tmp_path, name, config=KIT_QWEN2, edit=None):
    folder = write_model(tmp_path / name, config, seed=4)
    if edit is not None:
        edit(folder)
    return folder


def _drop(tensor):
    def edit(folder):
        tensors = model_tensors(KIT_QWEN2, 4)
        del tensors[tensor]
        write_safetensors(folder / "model.safetensors", tensors)

    return edit


def _reshape(tensor):
    def edit(folder):
        tensors = model_tensors(KIT_QWEN2, 4)
        tensors[tensor] = tensors[tensor][:-1]
        write_safetensors(folder / "model.safetensors", tensors)

    return edit


def _pickles_only(folder):
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")


BAD = {
    "unknown architecture": (
        KIT_QWEN2 | {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
        None,
        [],
        "model_type 'gpt2'",
    ),
    "wrong class": (
        KIT_QWEN2 | {"architectures": ["Qwen2ForSequenceClassification"]},
        None,
        [],
        "config.architectures",
    ),
    "missing layer tensor": (
        KIT_QWEN2,
        _drop("model.layers.1.mlp.up_proj.weight"),
        [],
        "model.layers.1.mlp.up_proj.weight",
    ),
    "missing head": (KIT_QWEN2, _drop("lm_head.weight"), [], "lm_head.weight"),
    "mismatched bias": (
        KIT_QWEN2,
        _reshape("model.layers.0.self_attn.k_proj.bias"),
        [],
        "model.layers.0.self_attn.k_proj.bias",
    ),
    "context over max positions": (
        KIT_QWEN2,
        None,
        ["--context", "128"],
        "max_position_embeddings of 64",
    ),
    "pytorch pickles only": (KIT_QWEN2, _pickles_only, [], "pytorch_model.bin only"),
    "prefill not dividing context": (
        KIT_QWEN2,
        None,
        ["--context", "16", "--prefill", "5"],
        "prefill",
    ),
    # the largest divisor of the context not above the ask, and the next one up
    "prefill near a divisor": (
        KIT_QWEN2 | {"max_position_embeddings": 512},
        None,
        ["--context", "256", "--prefill", "100"],
        "error: prefill: 100 tokens per chunk must divide the context of 256 (chunks start at "
        "multiples of it and must end within the cache); e.g. 64 or 128",
    ),
    # named as the option spells it, not by the path inside a program's request
    "quantize typo": (
        KIT_QWEN2,
        None,
        ["--quantize", '{"mode": "palettize", "nbit": 4}'],
        "error: quantize.nbit: unknown for mode palettize",
    ),
    "quantize typo in the head": (
        KIT_QWEN2,
        None,
        ["--quantize", '{"layers": {"mode": "palettize", "nbits": 4}, "head": {"nbits": 4}}'],
        "error: quantize.head.mode: must be one of",
    ),
    "layer over the budget": (KIT_QWEN2, None, [], "max_program_weight_bytes"),
    "unknown device": (KIT_QWEN2, None, ["--device", "m99"], "known: m1, m1-pro"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_exits_2_naming_it(case, tmp_path, capsys, monkeypatch):
    config, edit, flags, named = BAD[case]
    folder = _variant(tmp_path, "m", config, edit)
    if case == "layer over the budget":
        monkeypatch.setenv("ANE_MAX_PROGRAM_WEIGHT_BYTES", "1000")
    out = tmp_path / "out" / "kit.zip"
    out.parent.mkdir()
    code = main(["model", str(folder), "-o", str(out), *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert named in err
    assert list(out.parent.iterdir()) == []  # nothing half-written
    shutil.rmtree(folder)


def test_generate_bad_input(folder, tmp_path, capsys):
    assert main(["generate", str(tmp_path / "none.zip"), "--prompt-ids", "1"]) == 2
    out = tmp_path / "kit.zip"
    assert main(["model", str(folder), "-o", str(out), "--context", "8", "--prefill", "4"]) == 0
    capsys.readouterr()
    assert main(["generate", str(out), "--prompt-ids", "1,x"]) == 2
    assert main(["generate", str(out), "--prompt-ids", "1", "--max-new-tokens", "0"]) == 2
    assert main(["generate", str(out), "--prompt-ids", "1,99999"]) == 2
    assert "outside the vocabulary" in capsys.readouterr().err
    kernel = tmp_path / "kernel.zip"  # a kernel zip, not a kit
    assert (
        main(
            [
                "compile",
                "rmsnorm",
                "--params",
                '{"channels": 8, "spatial": 2}',
                "--random-weights",
                "0",
                "--format",
                "mil",
                "-o",
                str(kernel),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["generate", str(kernel), "--prompt-ids", "1"]) == 2
    assert "no kit.json in the zip" in capsys.readouterr().err


def test_prompt_text_through_the_kits_tokenizer(tmp_path, capsys):
    """Text in, text out: --prompt is encoded with the kit's tokenizer.json and the new tokens
    are printed decoded with it (a word for every id of the vocabulary here)."""
    from tokenizers import Tokenizer  # the dev extra installs it

    vocab = {f"w{i}": i for i in range(KIT_QWEN3["vocab_size"])} | {"hello": 5, "world": 17}
    vocab = {word: i for word, i in vocab.items() if word not in ("w5", "w17")}
    spec = TOKENIZER_JSON | {"model": {**TOKENIZER_JSON["model"], "vocab": vocab}}
    folder = write_model(tmp_path / "words", KIT_QWEN3, seed=2)
    (folder / "tokenizer.json").write_text(json.dumps(spec))
    out = tmp_path / "kit.zip"
    assert main(["model", str(folder), "-o", str(out), "--context", "8", "--prefill", "4"]) == 0
    capsys.readouterr()
    assert main(["generate", str(out), "--prompt-ids", "5,17", "--max-new-tokens", "2"]) == 0
    ids = [int(t) for t in capsys.readouterr().out.split()]
    assert main(["generate", str(out), "--prompt", "hello world", "--max-new-tokens", "2"]) == 0
    text = capsys.readouterr().out.strip()
    assert text == Tokenizer.from_str(json.dumps(spec)).decode(ids)
    assert len(text.split()) == len(ids) and set(text.split()) <= set(vocab)  # words, not ids


def test_model_for_a_device_plans_with_its_limits(folder, tmp_path, capsys):
    """--device: the summary names the device and the planner's prediction for it."""
    out = tmp_path / "kit.zip"
    code = main(
        [
            "model",
            str(folder),
            "-o",
            str(out),
            "--context",
            "16",
            "--prefill",
            "4",
            "--device",
            "a18-pro",
        ]
    )
    summary = capsys.readouterr().out
    assert code == 0 and out.is_file()
    assert "a18-pro (coreml), fp16, context 16, prefill chunks of 4" in summary
    assert "axis limit 65,536 (a18-pro)" in summary and "parameter cap of 16,384" in summary
    assert "decode: " in summary and "tok/s" in summary and "\nfits\n" in summary
