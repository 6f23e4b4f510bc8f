"""The catalog as data: one JSON-ready description per op (for `ops --json` and GET /v1/ops), and
the MIL primitives graph nodes may use."""

from __future__ import annotations

from typing import Any

from app.graphs import primitives
from app.kernels import CATALOG


def catalog() -> list[dict[str, Any]]:
    return [
        {
            "kind": "op",
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
        for k in CATALOG.values()
    ]


def primitive_catalog() -> list[dict[str, Any]]:
    return [{"kind": "primitive", **p} for p in primitives.describe()]
