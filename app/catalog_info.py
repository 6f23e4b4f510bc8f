"""The catalog as data: one JSON-ready description per op (for `ops --json` and GET /v1/ops)."""

from __future__ import annotations

from typing import Any

from app.kernels import KERNELS


def catalog() -> list[dict[str, Any]]:
    return [
        {
            "name": k.name,
            "summary": k.summary,
            "parameters": k.params.model_json_schema(),
            "weights": [
                {"name": w.name, "shape": w.shape, "required": w.required} for w in k.weight_docs
            ],
            "inputs": [{"name": n, "shape": s} for n, s in k.inputs.items()],
            "outputs": [{"name": n, "shape": s} for n, s in k.outputs.items()],
            "experimental": k.experimental,
        }
        for k in KERNELS.values()
    ]
