"""Model kits: a Hugging Face checkpoint folder in, everything an app needs to run the causal LM
on the ANE out (programs, embedding and RoPE tables, tokenizer files, kit.json), verified
against a float64 definition of the whole model. docs/kits.md describes a kit and its use.

    from app.kits import build_kit, KitOptions, Kit
    build_kit("Qwen3-0.6B", "qwen3.kit.zip", KitOptions(format="mlmodelc", verify=True))
    tokens, logits = Kit.open("qwen3.kit.zip").generate([1, 2, 3], max_new_tokens=8)
"""

from app.kits.build import KitOptions, KitResult, build_kit, build_kit_files, model_zip
from app.kits.runner import Kit, KitError

__all__ = [
    "Kit",
    "KitError",
    "KitOptions",
    "KitResult",
    "build_kit",
    "build_kit_files",
    "model_zip",
]
