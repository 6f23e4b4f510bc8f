"""The quality gate: what a kit's weights cost, measured in exact arithmetic.

The float64 whole model (app/kernels/transformer_reference.py) runs a set of prompts three ways
(app/kits/weights.py): on the checkpoint's own values, on the fp16 weights a kit without
quantization holds, and on the weights the kit's programs hold. The next-token distributions at
every prompt position are compared with the checkpoint's and the fp16 build's:

- KL divergence KL(reference || kit) of the softmaxes, in nats: the mean and the 99th percentile
  over positions;
- top-1 agreement: the fraction of positions where both pick the same token;
- cosine of the logit vectors, the mean over positions (and the lowest);
- with text prompts (a file, read with the checkpoint's tokenizer), the perplexity of each
  prompt's own next tokens, kit against checkpoint.

Arithmetic is float64 throughout, so what is measured is the weights' cost, not the device's:
a runtime fault on the ANE (a kernel that computes a palette wrong) shows only when the kit runs
there (docs/kits.md, "The quality gate"). Random weights measure the gate's cost, not any
model's quality.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from app.errors import RequestError
from app.kernels.common import f64
from app.kernels.rope import tables
from app.kernels.transformer_params import DecoderParams
from app.kernels.transformer_reference import attention, mlp, rms_norm
from app.kits.weights import KitWeights

PROMPTS = 4  # seeded prompts
PROMPT_TOKENS = 16  # tokens each (fewer when the context is shorter)
SEED = 0
P99 = 99


@dataclass(frozen=True)
class Prompts:
    ids: list[list[int]]
    source: str  # "seeded" or the prompts file's name
    text: bool  # real text: the perplexity of its own next tokens means something

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "prompts": len(self.ids),
            "tokens": sum(len(p) for p in self.ids),
            **({"seed": SEED} if not self.text else {}),
        }


def seeded_prompts(vocab: int, context: int) -> Prompts:
    length = max(2, min(PROMPT_TOKENS, context))
    rng = np.random.default_rng(SEED)
    ids = [[int(t) for t in rng.integers(0, vocab, length)] for _ in range(PROMPTS)]
    return Prompts(ids, "seeded", text=False)


def text_prompts(path: str | Path, tokenizer_files: Sequence[Path], context: int) -> Prompts:
    """One prompt per non-empty line of `path`, encoded by the checkpoint's tokenizer.json and
    cut to the context; errors name `prompts`."""
    path = Path(path)
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise RequestError("prompts", f"{path}: {exc}") from None
    if not lines:
        raise RequestError("prompts", f"{path} holds no prompt (one per non-empty line)")
    tokenizer_json = next((p for p in tokenizer_files if p.name == "tokenizer.json"), None)
    if tokenizer_json is None:
        raise RequestError("prompts", "text prompts need the checkpoint's tokenizer.json")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise RequestError(
            "prompts", "text prompts need the `tokenizers` package (the dev extra)"
        ) from None
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    ids = [tokenizer.encode(line).ids[:context] for line in lines]
    short = [i for i, p in enumerate(ids) if len(p) < 2]
    if short:
        raise RequestError(
            "prompts", f"line {short[0] + 1} of {path} is under two tokens: nothing to predict"
        )
    return Prompts(ids, path.name, text=True)


def final_hidden(
    params: DecoderParams, num_layers: int, weights: KitWeights, prompts: Prompts
) -> list[np.ndarray]:
    """Each prompt's final-normed hidden states [S, hidden] in float64: every layer's weights
    read once, for all prompts."""
    p = params
    xs = [f64(weights.embeddings(ids)) for ids in prompts.ids]
    longest = max(len(ids) for ids in prompts.ids)
    cos, sin = tables(np.arange(longest), p.dim, p.rope_theta, p.rope_scaling)
    ends = np.cumsum([len(ids) for ids in prompts.ids])[:-1]
    for i in range(num_layers):
        w = {name: f64(v) for name, v in weights.layer(i).items()}
        xs = [attention(p, x, w, f"layers.{i}.", cos[: len(x)], sin[: len(x)])[0] for x in xs]
        # the MLP works token by token: every prompt's tokens in one product
        xs = np.split(mlp(p, np.concatenate(xs), w, f"layers.{i}.", norm=True, residual=True), ends)
        del w
    norm = weights.norm()
    return [rms_norm(x, norm, p.rms_norm_eps) for x in xs]


def logits(hidden: Sequence[np.ndarray], pieces: Iterable[np.ndarray]) -> np.ndarray:
    """[positions, vocab]: every prompt position's logits, the head read a piece at a time."""
    rows = np.concatenate(list(hidden))
    return np.concatenate([rows @ f64(piece).T for piece in pieces], axis=1)


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=1, keepdims=True))


def _num(value: float) -> float:
    return float(f"{value:.4g}")


def compare(got: np.ndarray, reference: np.ndarray, prompts: Prompts | None = None) -> dict:
    """KL(reference || got) mean and p99, top-1 agreement, logits' cosine; with text prompts
    the perplexity of the prompts' own next tokens under each. In float64 whatever comes in (a
    runtime's fp16 logits overflow a norm)."""
    got, reference = np.asarray(got, np.float64), np.asarray(reference, np.float64)
    log_p, log_q = _log_softmax(reference), _log_softmax(got)
    kl = np.maximum((np.exp(log_p) * (log_p - log_q)).sum(axis=1), 0.0)
    top1 = float(np.mean(reference.argmax(axis=1) == got.argmax(axis=1)))
    dot = (got * reference).sum(axis=1)
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1)
    cosine = dot / np.maximum(norms, 1e-300)
    out = {
        "kl_mean": _num(kl.mean()),
        "kl_p99": _num(np.percentile(kl, P99)),
        "top1_agreement": _num(top1),
        "cosine_mean": _num(cosine.mean()),
        "cosine_min": _num(cosine.min()),
    }
    if prompts is not None and prompts.text:
        ref_ppl, ppl = _perplexity(log_p, prompts), _perplexity(log_q, prompts)
        out |= {
            "perplexity_reference": _num(ref_ppl),
            "perplexity": _num(ppl),
            "perplexity_change": _num(ppl / ref_ppl - 1),
        }
    return out


def _perplexity(log_probs: np.ndarray, prompts: Prompts) -> float:
    """exp of the mean negative log-likelihood of each prompt's next tokens."""
    nll: list[float] = []
    start = 0
    for ids in prompts.ids:
        rows = log_probs[start : start + len(ids) - 1]
        nll.extend(-rows[np.arange(len(ids) - 1), ids[1:]])
        start += len(ids)
    return float(np.exp(np.mean(nll)))


@dataclass(frozen=True)
class Thresholds:
    """What passes: KL to the checkpoint at most `max_kl` (mean over positions), top-1 agreement
    with it at least `min_top1`."""

    max_kl: float | None = None
    min_top1: float | None = None

    def __bool__(self) -> bool:
        return self.max_kl is not None or self.min_top1 is not None

    def passes(self, measured: dict[str, Any]) -> bool:
        if self.max_kl is not None and measured["kl_mean"] > self.max_kl:
            return False
        return self.min_top1 is None or measured["top1_agreement"] >= self.min_top1

    def to_json(self) -> dict[str, Any]:
        return {
            k: v for k, v in (("max_kl", self.max_kl), ("min_top1", self.min_top1)) if v is not None
        }


def check_thresholds(max_kl: Any, min_top1: Any) -> Thresholds:
    """The thresholds, checked; errors name `max_kl` or `min_top1`."""
    for name, value in (("max_kl", max_kl), ("min_top1", min_top1)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise RequestError(name, f"{value!r} is not a number")
        if not np.isfinite(value) or value < 0:
            raise RequestError(name, f"{value} is not a finite number ≥ 0")
    if min_top1 is not None and min_top1 > 1:
        raise RequestError("min_top1", f"{min_top1} is a fraction of positions: at most 1")
    return Thresholds(max_kl, min_top1)


METHOD = (
    "float64 whole-model runs over the prompts on three sets of weights: the checkpoint's own "
    "values, the fp16 weights of an unquantized kit, the weights the kit's programs hold; the "
    "kit's next-token distributions compared with each. Exact arithmetic: the weights' cost, "
    "not the device's; on random weights, the gate's cost and not any model's quality"
)


def gate_report(
    kit: np.ndarray,
    fp16: np.ndarray,
    exact: np.ndarray,
    prompts: Prompts,
    thresholds: Thresholds,
) -> dict[str, Any]:
    """kit.json's `quality`: the kit against the checkpoint and against its fp16 build, the fp16
    build against the checkpoint (the floor no quantization goes under), and, with thresholds,
    whether the kit passes them."""
    against_exact = compare(kit, exact, prompts)
    report: dict[str, Any] = {
        "method": METHOD,
        "prompts": prompts.to_json(),
        "kit_vs_checkpoint": against_exact,
        "kit_vs_fp16": compare(kit, fp16, prompts),
        "fp16_vs_checkpoint": compare(fp16, exact, prompts),
    }
    if thresholds:
        report["thresholds"] = thresholds.to_json()
        report["passed"] = thresholds.passes(against_exact)
    return report
