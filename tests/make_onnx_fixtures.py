"""Writes tests/fixtures/onnx/: transformers' BERT, ViT and Whisper encoder with small random
weights, exported to ONNX by torch, so `make test` imports real exports without torch installed.

    pip install torch==2.13.0 transformers     # the `reference` extra, in a separate environment
    python tests/make_onnx_fixtures.py

Each model is built from a small config (seeded weights, eval mode, eager attention) and
exported with torch.onnx.export's default (dynamo) exporter at its default opset, with fixed
input shapes (`EXAMPLES`). Saved: <name>.onnx (weights embedded; each under 1 MB) and
versions.json (the torch, transformers and onnx versions, the configs, the seeds and opsets).
"""

from __future__ import annotations

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "fixtures" / "onnx"
SEED = 0

CONFIGS = {
    "bert": {
        "vocab_size": 128,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": 64,
        "type_vocab_size": 2,
    },
    "vit": {
        "image_size": 32,
        "patch_size": 8,
        "num_channels": 3,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
    },
    "whisper_encoder": {
        "num_mel_bins": 16,
        "d_model": 32,
        "encoder_layers": 2,
        "encoder_attention_heads": 2,
        "encoder_ffn_dim": 64,
        "max_source_positions": 32,
    },
}
# the inputs each export traces with (and the shapes its graph keeps)
EXAMPLES = {
    "bert": {"input_ids": [1, 16], "attention_mask": [1, 16]},
    "vit": {"pixel_values": [1, 3, 32, 32]},
    "whisper_encoder": {"input_features": [1, 16, 64]},
}


def _model(name: str):
    import torch
    from transformers import BertConfig, BertModel, ViTConfig, ViTModel, WhisperConfig

    torch.manual_seed(SEED)
    if name == "bert":
        return BertModel(BertConfig(**CONFIGS[name], attn_implementation="eager"))
    if name == "vit":
        return ViTModel(
            ViTConfig(**CONFIGS[name], attn_implementation="eager"), add_pooling_layer=False
        )
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    return WhisperEncoder(WhisperConfig(**CONFIGS[name], attn_implementation="eager"))


class _Outputs:
    """The model's last hidden state alone (one output, named)."""

    def __init__(self, model):
        import torch

        class Wrapped(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, *args):
                return self.model(*args).last_hidden_state

        self.module = Wrapped().eval()


def _inputs(name: str):
    import torch

    generator = torch.Generator().manual_seed(SEED)
    out = []
    for input_name, shape in EXAMPLES[name].items():
        if input_name == "input_ids":
            out.append(torch.randint(0, CONFIGS["bert"]["vocab_size"], shape, generator=generator))
        elif input_name == "attention_mask":
            out.append(torch.ones(shape, dtype=torch.int64))
        else:
            out.append(torch.randn(shape, generator=generator))
    return tuple(out)


def main() -> None:
    import onnx
    import torch
    import transformers

    OUT.mkdir(parents=True, exist_ok=True)
    record = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "onnx": onnx.__version__,
        "exporter": "torch.onnx.export (dynamo=True, the default)",
        "seed": SEED,
        "models": {},
    }
    for name in CONFIGS:
        module = _Outputs(_model(name).eval()).module
        path = OUT / f"{name}.onnx"
        with torch.no_grad():
            program = torch.onnx.export(
                module,
                _inputs(name),
                input_names=list(EXAMPLES[name]),
                output_names=["last_hidden_state"],
                dynamo=True,
                external_data=False,
            )
        program.save(str(path))
        model = onnx.load(str(path))
        opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        size = path.stat().st_size
        assert size <= 1 << 20, f"{path.name} takes {size} bytes, over 1 MB"
        record["models"][name] = {
            "config": CONFIGS[name],
            "inputs": EXAMPLES[name],
            "opset": opset,
            "bytes": size,
            "ops": sorted({n.op_type for n in model.graph.node}),
        }
        print(f"wrote {path} ({size} bytes, opset {opset})")
    (OUT / "versions.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
