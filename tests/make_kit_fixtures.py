"""Writes tests/fixtures/kits/: transformers' own float64 greedy tokens and logits for the kit
tests' seeded checkpoints (tests/kit_support.py), so `make test` compares kits with transformers
without torch installed.

    pip install -e '.[reference]'        # torch and transformers, in a separate environment
    python tests/make_kit_fixtures.py

For each model: the checkpoint folder is written exactly as the tests write it, loaded with
AutoModelForCausalLM (eager attention) in float64, and greedy-decoded from PROMPT for
NEW_TOKENS tokens, each step a full forward pass over the whole sequence (no cache). Saved:
<name>.npy (float32 [NEW_TOKENS, vocab]: the logits each new token was chosen from) and
transformers.json (the tokens, the prompt, the seeds and the versions that made them).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kit_support import FIXTURE_MODELS, FIXTURE_NEW_TOKENS, FIXTURE_PROMPT, write_model

OUT = Path(__file__).resolve().parent / "fixtures" / "kits"


def greedy(folder: Path) -> tuple[list[int], np.ndarray]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        folder, dtype=torch.float64, attn_implementation="eager"
    ).eval()
    ids, tokens, rows = list(FIXTURE_PROMPT), [], []
    with torch.no_grad():
        for _ in range(FIXTURE_NEW_TOKENS):
            logits = model(torch.tensor([ids])).logits[0, -1].numpy()
            tokens.append(int(np.argmax(logits)))
            rows.append(logits)
            ids.append(tokens[-1])
    return tokens, np.stack(rows)


def main() -> None:
    import torch
    import transformers

    OUT.mkdir(parents=True, exist_ok=True)
    record = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "prompt_ids": FIXTURE_PROMPT,
        "new_tokens": FIXTURE_NEW_TOKENS,
        "models": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        for name, (config, seed) in FIXTURE_MODELS.items():
            tokens, logits = greedy(write_model(Path(tmp) / name, config, seed=seed))
            np.save(OUT / f"{name}.npy", logits.astype(np.float32))
            record["models"][name] = {"seed": seed, "tokens": tokens}
            print(name, tokens)
    (OUT / "transformers.json").write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
