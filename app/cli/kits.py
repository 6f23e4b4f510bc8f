"""`ane-kernels model CHECKPOINT_DIR -o KIT.zip` builds a model kit (app/kits); `ane-kernels
generate KIT.zip --prompt-ids 1,2,3 --max-new-tokens N [--json]` runs one from its zip alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.cli.common import EXIT_FAILED, CLIError
from app.cli.layout import add_layout_options, plan_lines, warning_line
from app.cli.summary import BuildSummary, emit
from app.core.files import remove_in_flight_on_stop
from app.core.formats import KIT_FORMATS
from app.errors import FieldError
from app.kits import Kit, KitOptions, build_kit


def cmd_model(args) -> int:

    quantize = None
    if args.quantize == "auto":
        quantize = "auto"
    elif args.quantize is not None:
        try:
            quantize = json.loads(args.quantize)
        except json.JSONDecodeError as exc:
            raise CLIError(f"--quantize is not valid JSON: {exc}") from None
    options = KitOptions(
        format=args.format,
        context=args.context,
        prefill=args.prefill,
        device=args.device,
        quantize=quantize,
        kv=args.kv,
        verify=args.verify,
        strict=args.strict,
        prompts=args.prompts,
        max_kl=args.max_kl,
        min_top1=args.min_top1,
    )
    remove_in_flight_on_stop()  # SIGTERM or Ctrl-C: the half-written kit and its scratch go too
    tty = sys.stderr.isatty()
    progress = (
        (lambda line: print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True))
        if tty
        else None
    )
    try:
        result = build_kit(args.checkpoint, args.output, options, progress)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    finally:
        if tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    emit(summary(result), args.json)
    verification = result.verification
    if verification is not None and not verification["passed"]:
        return EXIT_FAILED
    return EXIT_FAILED if result.meta.get("quality", {}).get("passed") is False else 0


def summary(result) -> BuildSummary:
    """One screen: the model, the programs with their bytes, the plan, the preflight's findings
    (as `compile` prints them), the verification."""
    meta = result.meta
    arch = meta["architecture"]
    details = [
        f"built in {result.seconds:.1f} s",
        f"model: {arch['model_type']}: {arch['num_hidden_layers']} layers, hidden "
        f"{arch['hidden_size']}, vocabulary {arch['vocab_size']}"
        f"{' (tied head)' if arch['tie_word_embeddings'] else ''}",
        f"kit: {meta['format']}, context {meta['context']}, prefill chunks of "
        f"{meta['prefill']}, kv {meta['kv']}",
        *plan_lines(meta["plan"]),
    ]
    details += [warning_line(w) for w in meta.get("warnings", ())]
    for p in meta["programs"]:
        what = (
            f"layers {p['layers'][0]}-{p['layers'][1]}"
            if p["role"] == "decoder"
            else f"vocabulary {p['vocab'][0]}-{p['vocab'][1] - 1}"
        )
        details.append(f"  {p['path']:<24} {what:<24} {p['weight_bytes']:>12} weight bytes")
    details += quality_lines(meta)
    verification = meta.get("verification")
    checked = None
    if verification is None:
        details.append("verify: not asked for (--verify)")
    else:
        details.append(f"greedy tokens compared for {verification['greedy_compared_steps']} steps")
        checked = {
            "passed": verification["passed"],
            "max_rel_error": verification["logits_max_rel_error"],
            "tolerance": verification["tolerance"],
        }
    return BuildSummary(
        str(result.path),
        result.size,
        details=details,
        preflight=kit_findings(meta),
        verification=checked,
    )


def _measured(m: dict) -> str:
    line = (
        f"KL mean {m['kl_mean']}, p99 {m['kl_p99']}, top-1 {m['top1_agreement']}, "
        f"cosine {m['cosine_mean']}"
    )
    if "perplexity_change" in m:
        line += f", perplexity {m['perplexity']} ({m['perplexity_change']:+.2%})"
    return line


def quality_lines(meta: dict) -> list[str]:
    """What quantize auto tried and chose, and the quality gate's numbers (docs/kits.md)."""
    lines = []
    auto = meta.get("quantize_auto")
    if auto is not None:
        lines.append(f"quantize auto for {auto['thresholds']} in {auto['seconds']} s:")
        for part in ("layers", "head"):
            if part in auto:
                tried = ", ".join(
                    f"{t['setting']} {'passes' if t['passed'] else 'fails'} (KL {t['kl_mean']})"
                    for t in auto[part]["tried"]
                )
                lines.append(f"  {part}: {auto[part]['chosen']}; tried {tried}")
    quality = meta.get("quality")
    if quality is not None:
        verdict = (
            ""
            if "passed" not in quality
            else f"; {'passes' if quality['passed'] else 'FAILS'} {quality['thresholds']}"
        )
        lines.append(
            f"quality gate (float64, {quality['prompts']['tokens']} prompt tokens, "
            f"{quality['prompts']['source']}){verdict}"
        )
        lines.append(f"  vs checkpoint: {_measured(quality['kit_vs_checkpoint'])}")
        lines.append(f"  vs fp16 build: {_measured(quality['kit_vs_fp16'])}")
    return lines


def kit_findings(meta: dict) -> list[dict]:
    """Every program's preflight findings, in run order, each node named `<program>.<node>`."""
    return [
        {**finding, "node": f"{p['name']}.{finding['node']}"}
        for p in meta["programs"]
        for finding in p.get("preflight", ())
    ]


def _ids(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise CLIError(f"--prompt-ids takes comma-separated token ids, got {text!r}") from None


def cmd_generate(args) -> int:

    if args.prompt_ids is None and args.prompt is None:
        raise CLIError("give --prompt-ids 1,2,3 (or --prompt TEXT with tokenizers installed)")
    if not Path(args.kit).is_file():
        raise CLIError(f"{args.kit}: no such file")
    try:
        kit = Kit.open(args.kit)
        tokenizer = _tokenizer(kit) if args.prompt_ids is None else None
        prompt = _ids(args.prompt_ids) if tokenizer is None else tokenizer.encode(args.prompt).ids
        stop = kit.manifest.special_tokens.eos_token_id
        stop = stop if isinstance(stop, list) else [] if stop is None else [stop]
        tokens, logits = kit.generate(prompt, args.max_new_tokens, stop)
    except FieldError as exc:
        raise CLIError(str(exc)) from None
    # text in, text out: the new tokens through the same tokenizer
    text = None if tokenizer is None else tokenizer.decode(tokens)
    if args.json:
        rows = [[float(v) for v in row] for row in logits]
        print(
            json.dumps(
                {"tokens": tokens, "logits": rows, **({"text": text} if text is not None else {})}
            )
        )
    else:
        print(" ".join(str(t) for t in tokens) if text is None else text)
    return 0


def _tokenizer(kit):
    """The kit's own tokenizer.json, read with the tokenizers package (when installed)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise CLIError("--prompt needs the tokenizers package; pass --prompt-ids") from None
    if kit.tokenizer is None:
        raise CLIError("the kit holds no tokenizer.json; pass --prompt-ids")
    return Tokenizer.from_str(str(kit.tokenizer, "utf-8"))


def add_commands(sub) -> None:
    model = sub.add_parser("model", help="build a model kit from a Hugging Face checkpoint folder")
    model.add_argument(
        "checkpoint",
        metavar="CHECKPOINT_DIR",
        help="a save_pretrained folder: config.json, safetensors, tokenizer files",
    )
    model.add_argument("-o", "--output", required=True, metavar="KIT.zip")
    model.add_argument("--format", choices=KIT_FORMATS, default="mlpackage")
    add_layout_options(model)
    model.add_argument(
        "--max-kl",
        type=float,
        help="quality gate: the most mean KL divergence (nats) from the checkpoint that passes",
    )
    model.add_argument(
        "--min-top1",
        type=float,
        help="quality gate: the least top-1 agreement with the checkpoint that passes (0-1)",
    )
    model.add_argument(
        "--prompts",
        metavar="FILE",
        help="quality gate: prompts, one per line, read with the checkpoint's tokenizer "
        "(default: seeded token ids)",
    )
    model.add_argument(
        "--verify",
        action="store_true",
        help="compare the kit's logits with the float64 model (verification.json)",
    )
    model.add_argument(
        "--strict",
        action="store_true",
        help="refuse (exit 2) a quantization reported failing on the device and path, or one the "
        "planner cannot model, instead of warning",
    )
    model.add_argument("--json", action="store_true", help="the build summary as one JSON object")
    model.set_defaults(run=cmd_model)

    gen = sub.add_parser("generate", help="run a model kit greedily with the numerical reference")
    gen.add_argument("kit", metavar="KIT.zip")
    gen.add_argument("--prompt-ids", help="comma-separated token ids")
    gen.add_argument(
        "--prompt",
        help="text, through the kit's tokenizer.json (needs tokenizers); the new tokens are "
        "printed as text too",
    )
    gen.add_argument("--max-new-tokens", type=int, default=16)
    gen.add_argument(
        "--json",
        action="store_true",
        help='print {"tokens": [...], "logits": [[...] per new token]}',
    )
    gen.set_defaults(run=cmd_generate)
