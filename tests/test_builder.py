"""The one builder (app/artifacts.py): any request that answers what `ProgramRequest` asks goes
through the same steps as a kernel request — size limit, budget, preflight (strict refuses),
its format's translation and runtime, verification, packaging — with nothing else to add."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pytest

from app.artifacts import Limits, prepare, write
from app.catalog_build import build_kernel
from app.errors import FieldError, RequestError
from app.graphs.build import build_graph
from app.graphs.spec import GraphParams
from app.graphs.split import Chain
from app.kernels import ProgramBuild
from app.mil.ceilings import Ceilings
from app.preflight import findings_to_json
from app.request import KernelRequest

PARAMS = {"channels": 64, "spatial": 2}


@dataclass(frozen=True)
class Doubled:
    """A kind of request made here: the scale op with every gain 2."""

    format: str = "mil"
    preflight: str = "warn"
    verifies: bool = True
    max_quantization_error: float | None = None

    @property
    def known_digests(self) -> Mapping[str, str]:
        return {}

    def build(
        self, random_seed: int | None, ceilings: Ceilings, weight_budget: int | None
    ) -> ProgramBuild:
        gains = np.full((64, 1, 1, 1), 2.0, np.float32)
        return build_kernel("scale", PARAMS, {"scale": gains}, name="doubled", ceilings=ceilings)

    def splits_within(self, weight_bytes: int, budget: int) -> bool:
        return False

    def split(self, build: ProgramBuild, budget: int) -> Chain:
        raise AssertionError("never asked: splits_within says no")


def _zip(request) -> dict[str, bytes]:
    out = io.BytesIO()
    write(prepare(request), out)
    with zipfile.ZipFile(out) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def test_a_request_type_made_here_goes_through_every_step():
    files = _zip(Doubled())
    kernel = json.loads(files["kernel.json"])
    same = prepare(KernelRequest.create("scale", PARAMS, {"scale": np.full((64, 1, 1, 1), 2.0)}))
    assert kernel["preflight"] == findings_to_json(same.findings) and kernel["preflight"]
    assert json.loads(files["verification.json"])["passed"] is True
    assert {"model.mil", "weights/weight.bin"} <= set(files)


@dataclass(frozen=True)
class MaskedAttention(Doubled):
    """Another made here: attention with a mask, a preflight error (the ANE ignores masks)."""

    def build(
        self, random_seed: int | None, ceilings: Ceilings, weight_budget: int | None
    ) -> ProgramBuild:
        graph = {
            "inputs": {"q": {"shape": [1, 2, 4, 8]}, "mask": {"shape": [1, 1, 4, 4]}},
            "nodes": [
                {
                    "id": "att",
                    "op": "mil.scaled_dot_product_attention",
                    "inputs": {"query": "q", "key": "q", "value": "q", "attn_mask": "mask"},
                }
            ],
            "outputs": {"y": "att"},
        }
        return build_graph(GraphParams.model_validate(graph), ceilings=ceilings)


def test_its_limits_and_strict_preflight_hold_as_for_a_kernel():
    with pytest.raises(FieldError) as too_large:
        prepare(Doubled(), Limits(max_artifact_bytes=1))
    assert too_large.value.field == "weights" and too_large.value.kind == "too_large"
    assert any(f.severity == "error" for f in prepare(MaskedAttention(verifies=False)).findings)
    with pytest.raises(RequestError) as refused:
        prepare(MaskedAttention(preflight="strict"))
    assert refused.value.title == "Preflight failed" and refused.value.field == "nodes[0]"
