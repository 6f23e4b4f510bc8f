"""Kits against transformers itself, without torch: tests/fixtures/kits holds transformers'
float64 greedy tokens and logits for the kit tests' seeded checkpoints (written by
tests/make_kit_fixtures.py, with the versions that made them). Each kit's logits for the same
steps are within the kit tolerance of transformers', and its tokens are transformers' while
transformers' own top-2 margin exceeds twice the step's logit error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from kit_support import FIXTURE_MODELS, FIXTURE_NEW_TOKENS, FIXTURE_PROMPT, write_model

from app.kits import Kit, KitOptions, build_kit
from app.kits.verify import LOGITS_TOLERANCE

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kits"
RECORD = json.loads((FIXTURES / "transformers.json").read_text())


def test_fixtures_are_for_these_checkpoints():
    assert RECORD["prompt_ids"] == FIXTURE_PROMPT and RECORD["new_tokens"] == FIXTURE_NEW_TOKENS
    assert {n: m["seed"] for n, m in RECORD["models"].items()} == {
        n: seed for n, (_, seed) in FIXTURE_MODELS.items()
    }
    assert RECORD["transformers"] and RECORD["torch"]


@pytest.mark.parametrize("kv", ["io", "state"])
@pytest.mark.parametrize("name", list(FIXTURE_MODELS))
def test_kit_matches_transformers(tmp_path, name, kv):
    config, seed = FIXTURE_MODELS[name]
    folder = write_model(tmp_path / name, config, seed=seed)
    build_kit(folder, tmp_path / "kit.zip", KitOptions(format="mil", kv=kv, context=16, prefill=4))
    tokens, rows = Kit.open(tmp_path / "kit.zip").generate(FIXTURE_PROMPT, FIXTURE_NEW_TOKENS)
    expected_tokens = RECORD["models"][name]["tokens"]
    expected = np.load(FIXTURES / f"{name}.npy").astype(np.float64)
    for step, (row, exact) in enumerate(zip(rows, expected, strict=True)):
        err = float(np.abs(row - exact).max())
        assert err / np.abs(exact).max() <= LOGITS_TOLERANCE, step
        top2 = np.sort(exact)[-2:]
        if top2[1] - top2[0] <= 2 * err:
            break  # a near-tie in transformers' own logits: fp16 may choose either
        assert tokens[step] == expected_tokens[step], step  # so the next rows share a prefix
