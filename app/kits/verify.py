"""verification.json of a kit: the kit run as an app runs it (app/kits/runner.py) against the
float64 whole model (app/kits/reference.py) on the weights the programs compute with.

- Logits: every prompt position's logits, through the kit's prefill chunks and head pieces,
  against the float64 model's; per position max_rel_error = max|kit − exact| / max|exact|, held
  to LOGITS_TOLERANCE.
- Greedy tokens: the kit generates; at each step the float64 model reads the same tokens and
  gives its own logits. The step's token is compared while the reference's top-2 margin exceeds
  twice the step's largest logit error (then the error cannot swap them, so the tokens must
  agree); at the first step where it does not (random test models have near-ties), comparing
  stops, and the report says where.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.errors import ErrorKind, RequestError
from app.kits.reference import WholeModel
from app.kits.runner import Kit

# fp16 through every layer and the head: test models measure up to about 5e-3 (tests/test_kits.py)
LOGITS_TOLERANCE = 2e-2
DEFAULT_PROMPT_TOKENS = 8
DEFAULT_NEW_TOKENS = 4
# What verifying costs in memory is the kit's prefill program run by the reference executor: its
# attention scores, heads x prefill x context, and their temporaries, whatever the prompt (the
# chunk is padded to `prefill`). Measured with `/usr/bin/time` over build_kit(..., verify=True)
# on test models (2-8 heads, context 2,048-4,096, prefill 256-1,024, 2-4 layers, hidden 32-256):
# 37-43 bytes per score above the unverified build's peak, independent of layers and hidden;
# 48 is taken, so the estimate errs on the large side. (A 120 KB checkpoint at context 16,384,
# prefill 4,096 and 4 heads: 12.9 GB, refused under the 4 GiB default.)
VERIFY_BYTES_PER_SCORE = 48
VERIFY_SETTING = "ANE_MAX_VERIFY_BYTES"


def verify_bytes(heads: int, context: int, prefill: int) -> int:
    """The memory verifying a kit of these shapes takes, estimated (VERIFY_BYTES_PER_SCORE)."""
    return VERIFY_BYTES_PER_SCORE * heads * prefill * context


def check_verify_memory(heads: int, context: int, prefill: int, limit: int) -> int:
    """The estimate, or a refusal naming the limit and what to lower."""
    needed = verify_bytes(heads, context, prefill)
    if needed > limit:
        raise RequestError(
            "verify",
            f"verifying a kit of {heads} attention heads, context {context} and prefill "
            f"{prefill} takes about {needed} bytes of memory (the prefill program's attention "
            f"scores), over {VERIFY_SETTING}={limit}: verify with a smaller context or prefill, "
            "or raise the setting",
            kind=ErrorKind.TOO_LARGE,
            title="Verification too large",
            limit=limit,
            setting=VERIFY_SETTING,
            verify_bytes_estimate=needed,
        )
    return needed


def _num(value: float) -> float:
    return float(f"{value:.4g}")


def _errors(got: np.ndarray, exact: np.ndarray) -> tuple[float, float]:
    err = float(np.abs(np.asarray(got, np.float64) - exact).max())
    return err, err / max(float(np.abs(exact).max()), 1e-30)


def default_prompt(vocab: int, count: int = DEFAULT_PROMPT_TOKENS, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, vocab, count)]


def verify_kit(
    kit: Kit, model: WholeModel, prompt: Sequence[int], new_tokens: int = DEFAULT_NEW_TOKENS
) -> dict[str, Any]:
    if len(prompt) + new_tokens > kit.context + 1:
        raise RequestError(
            "max_new_tokens",
            f"{len(prompt)} prompt tokens and {new_tokens} new "
            f"ones do not fit the kit's context of {kit.context}",
        )
    session = kit.session()
    got = session.logits_rows(session.feed(prompt))
    # the kit generates on from the prompt's cache, as `generate` would from a new session
    tokens, rows = session.greedy(got[-1], new_tokens)
    # one float64 pass over prompt and generated tokens: causal, so a row depends only on the
    # tokens up to it, and each layer's weights are read once
    whole = model.logits(list(prompt) + tokens[:-1])
    exact = whole[: len(prompt)]
    positions = []
    for i in range(len(prompt)):
        err, rel = _errors(got[i], exact[i])
        positions.append({"max_abs_error": _num(err), "max_rel_error": _num(rel)})
    logits_passed = all(p["max_rel_error"] <= LOGITS_TOLERANCE for p in positions)

    steps, compared_until, tokens_passed = [], len(tokens), True
    for step, (token, row) in enumerate(zip(tokens, rows, strict=True)):
        reference = whole[len(prompt) - 1 + step]
        err, rel = _errors(row, reference)
        top2 = np.sort(reference)[-2:]
        margin = float(top2[1] - top2[0])
        if compared_until == len(tokens) and margin <= 2 * err:
            compared_until = step  # a near-tie: fp16 may pick either, and the texts part here
        compared = step < compared_until
        expected = int(np.argmax(reference))
        tokens_passed = tokens_passed and (token == expected or not compared)
        steps.append(
            {
                "token": token,
                "reference_token": expected,
                "top2_margin": _num(margin),
                "max_abs_error": _num(err),
                "max_rel_error": _num(rel),
                "compared": compared,
            }
        )
    return {
        "method": "the kit run from its files as an app runs it (reference executor, fp16 "
        "storage) against the float64 whole model on the weights the programs hold",
        "error_measure": "max_rel_error = max|kit - exact| / max|exact| over the vocabulary, "
        "per position",
        "prompt_ids": list(prompt),
        "logits": {
            "tolerance": LOGITS_TOLERANCE,
            "positions": positions,
            "max_rel_error": max(p["max_rel_error"] for p in positions),
            "passed": logits_passed,
        },
        "greedy": {
            "rule": "a step's token is compared while the reference's top-2 margin exceeds twice "
            "the step's largest logit error; comparing stops at the first step where it does not",
            "steps": steps,
            "compared_steps": compared_until,
            "passed": tokens_passed,
        },
        "passed": logits_passed and tokens_passed,
    }
