"""The quality gate (app/kits/gate.py) and `quantize auto` (app/kits/auto.py) on a tiny random
Qwen3: what the numbers measure here is the gate, not any model's quality."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from kit_support import KIT_QWEN3, write_model

from app.cli import main
from app.errors import RequestError
from app.kits import KitOptions, build_kit
from app.kits.auto import LADDER
from app.kits.gate import Prompts, compare

LENGTHS = {"context": 32, "prefill": 8}
TWO_BITS = {"mode": "palettize", "nbits": 2}
EIGHT_BITS = {"mode": "palettize", "nbits": 8}
SETTINGS = ["fp16", "int8", "6-bit palettes", "4-bit palettes", "3-bit palettes", "2-bit palettes"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_model(tmp_path_factory.mktemp("gate") / "qwen3", KIT_QWEN3, seed=2)


def kit(folder: Path, out: Path, **options) -> dict:
    return build_kit(folder, out, KitOptions(**LENGTHS, **options)).meta


def test_the_measures_on_known_logits():
    reference = np.array([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0]])
    same = compare(reference, reference)
    assert same["kl_mean"] == 0 and same["top1_agreement"] == 1 and same["cosine_mean"] == 1
    swapped = compare(reference[:, ::-1].copy(), reference)
    assert swapped["top1_agreement"] == 0.5 and swapped["kl_mean"] > 0.5
    # KL(p || q) row by row by hand, p the reference's softmax, q the reversed logits'
    kl = []
    for row in reference:
        p, q = np.exp(row) / np.exp(row).sum(), np.exp(row[::-1]) / np.exp(row[::-1]).sum()
        kl.append(float((p * np.log(p / q)).sum()))
    assert swapped["kl_mean"] == pytest.approx(np.mean(kl), rel=1e-3)
    assert max(kl) >= swapped["kl_p99"] > np.mean(kl)
    p = np.exp(reference[0]) / np.exp(reference[0]).sum()
    text = Prompts([[1, 2]], "prompts.txt", text=True)
    # one prediction, token 2 after token 1: perplexity 1 / softmax(row 0)[2]
    assert compare(reference, reference, text)["perplexity"] == pytest.approx(1 / p[2], rel=1e-3)


def test_two_bits_fail_a_tight_gate_and_eight_bits_pass(folder, tmp_path):
    tight = {"verify": True, "max_kl": 0.01}
    two = kit(folder, tmp_path / "2.zip", quantize=TWO_BITS, **tight)["quality"]
    eight = kit(folder, tmp_path / "8.zip", quantize=EIGHT_BITS, **tight)["quality"]
    assert not two["passed"] and eight["passed"]
    assert two["kit_vs_checkpoint"]["kl_mean"] > 0.01 >= eight["kit_vs_checkpoint"]["kl_mean"]
    assert two["kit_vs_checkpoint"]["top1_agreement"] < 1 <= eight["kit_vs_fp16"]["top1_agreement"]
    assert two["kit_vs_checkpoint"]["cosine_mean"] < eight["kit_vs_checkpoint"]["cosine_mean"]
    # fp16 alone is the floor: far below what either quantization costs
    floor = eight["fp16_vs_checkpoint"]["kl_mean"]
    assert floor < eight["kit_vs_fp16"]["kl_mean"] / 10
    assert two["prompts"] == {"source": "seeded", "prompts": 4, "tokens": 64, "seed": 0}


def test_auto_picks_a_lighter_setting_for_a_looser_gate(folder, tmp_path):
    tight = kit(folder, tmp_path / "tight.zip", quantize="auto", max_kl=0.001)
    loose = kit(folder, tmp_path / "loose.zip", quantize="auto", max_kl=0.05)
    chosen = {
        name: [SETTINGS.index(meta["quantize_auto"][p]["chosen"]) for p in ("layers", "head")]
        for name, meta in (("tight", tight), ("loose", loose))
    }
    assert all(t < lo for t, lo in zip(chosen["tight"], chosen["loose"], strict=True)), chosen
    for meta in (tight, loose):
        auto = meta["quantize_auto"]
        assert auto["ladder"] == SETTINGS and auto["thresholds"] == {"max_kl": meta_kl(meta)}
        for part in ("layers", "head"):
            tried = auto[part]["tried"]
            assert len(tried) <= 3  # bisected: three runs settle six rungs
            passed = [t["setting"] for t in tried if t["passed"]]
            assert auto[part]["chosen"] == passed[-1]  # the lightest that passed
            assert all(t["kl_mean"] > meta_kl(meta) for t in tried if not t["passed"])
            rung = LADDER[SETTINGS.index(auto[part]["chosen"])]
            assert (meta["quantize"] or {}).get(part, {}).get("nbits") == (rung or {}).get("nbits")
    loose_bytes = sum(p["weight_bytes"] for p in loose["programs"])
    assert loose_bytes < sum(p["weight_bytes"] for p in tight["programs"])


def test_strict_auto_skips_the_rungs_strict_would_refuse(folder, tmp_path):
    """int8 (constexpr_blockwise_shift_scale) is reported failing through Core ML on the
    iPhone's chip: with --strict the ladder leaves it out rather than refusing after choosing."""
    meta = kit(
        folder, tmp_path / "s.zip", quantize="auto", max_kl=0.05, strict=True, device="a18-pro"
    )
    for part in ("layers", "head"):
        report = meta["quantize_auto"][part]
        assert report["skipped_strict"] == ["int8"]
        assert all(t["setting"] != "int8" for t in report["tried"])
    assert not [w for w in meta["warnings"] if w["rule"].startswith("quant.")]
    # without --strict the same ladder may stop on int8, and the kit then carries the warning
    loose = kit(folder, tmp_path / "l.zip", quantize="auto", max_kl=0.05, device="a18-pro")
    assert "skipped_strict" not in loose["quantize_auto"]["layers"]


def meta_kl(meta: dict) -> float:
    return meta["quantize_auto"]["thresholds"]["max_kl"]


def test_auto_with_verify_passes_its_own_gate_and_prints_it(folder, tmp_path, capsys):
    out = tmp_path / "auto.zip"
    args = ["model", str(folder), "-o", str(out), "--context", "32", "--prefill", "8"]
    assert main([*args, "--quantize", "auto", "--min-top1", "0.95", "--verify", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    lines = "\n".join(summary["details"])
    assert "quantize auto for {'min_top1': 0.95}" in lines and "  layers: " in lines
    assert "quality gate (float64, 64 prompt tokens, seeded); passes" in lines
    assert "vs fp16 build: KL mean" in lines


def test_a_failing_gate_exits_1_and_text_prompts_give_perplexity(folder, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello world hello world\n\nworld world hello\n")
    out = tmp_path / "two.zip"
    args = ["model", str(folder), "-o", str(out), "--context", "32", "--prefill", "8"]
    flags = ["--quantize", json.dumps(TWO_BITS), "--verify", "--max-kl", "0.01"]
    assert main([*args, *flags, "--prompts", str(prompts)]) == 1
    printed = capsys.readouterr().out
    assert "FAILS {'max_kl': 0.01}" in printed and "perplexity" in printed
    meta = json.loads(__import__("zipfile").ZipFile(out).read("kit.json"))
    quality = meta["quality"]
    assert quality["prompts"] == {"source": "prompts.txt", "prompts": 2, "tokens": 7}
    measured = quality["kit_vs_checkpoint"]
    assert measured["perplexity"] == pytest.approx(
        measured["perplexity_reference"] * (1 + measured["perplexity_change"]), rel=1e-2
    )


@pytest.mark.parametrize(
    "flags, field",
    [
        (["--quantize", "auto"], "max_kl"),
        (["--quantize", "auto", "--max-kl", "-1"], "max_kl"),
        (["--quantize", "auto", "--max-kl", "nan"], "max_kl"),
        (["--quantize", "auto", "--min-top1", "1.5"], "min_top1"),
        (["--max-kl", "0.1"], "max_kl"),
        (["--verify", "--quantize", "auto", "--max-kl", "1", "--prompts", "none.txt"], "prompts"),
        (["--quantize", '{"layers": "auto", "head": {"mode": "x"}}', "--max-kl", "1"], "quantize"),
        (["--quantize", "auto", "--max-kl", "1e-12"], "max_kl"),  # not even fp16 passes
    ],
)
def test_bad_gate_options_exit_2_naming_them(folder, tmp_path, capsys, flags, field):
    out = tmp_path / "bad.zip"
    assert main(["model", str(folder), "-o", str(out), *flags]) == 2
    assert f"error: {field}" in capsys.readouterr().err
    assert not out.exists()


def test_the_python_api_refuses_what_the_cli_does(folder, tmp_path):
    with pytest.raises(RequestError) as err:
        kit(folder, tmp_path / "k.zip", quantize="auto", min_top1=True)
    assert err.value.field == "min_top1"
