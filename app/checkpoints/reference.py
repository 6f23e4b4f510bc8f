"""One checkpoint reference for every way in: the CLI and farm manifests give files on disk, HTTP
and the Python client give uploaded blobs by digest; each names a config and the layer(s).

    {"checkpoint": {"blob": "sha256:…" (or a list: the shards), "config": {…config.json…},
                    "layer": 3}}                         # or "layers": "0-15" (decoder_stack)

`load.resolve` turns any of them into the op's params (the config's, under the call's) and, for
each of the op's weights, the checkpoint tensor that holds it (found by its Hugging Face name,
its shape checked against the config) — before any tensor is read.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.checkpoints.load import parse_layers
from app.errors import RequestError


class CheckpointReference(BaseModel):
    """A checkpoint in a kernel request (HTTP, the Python client): uploaded safetensors files
    by digest, the model's config.json, and the layer or layer range to build."""

    model_config = ConfigDict(extra="forbid")
    blob: str | list[str] = Field(
        description="the digest of a safetensors file uploaded to POST /v1/blobs, or the "
        "digests of all its shards"
    )
    config: dict[str, Any] = Field(description="the model's config.json, as an object")
    layer: int | None = Field(None, ge=0, description="the layer to build")
    layers: str | int | None = Field(
        None, description="decoder_stack: the inclusive layer range, e.g. '0-15'"
    )

    @model_validator(mode="after")
    def _one_of_layer_and_layers(self) -> CheckpointReference:
        if (self.layer is None) == (self.layers is None):
            raise ValueError("give `layer` (one layer) or `layers` (a range), not both")
        return self

    @property
    def blobs(self) -> list[str]:
        return [self.blob] if isinstance(self.blob, str) else list(self.blob)

    def layer_range(self) -> range:
        if self.layers is not None:
            return parse_layers(self.layers, "checkpoint.layers")
        assert self.layer is not None  # the validator asks for one of the two
        return parse_layers(self.layer, "checkpoint.layer")


def check_role(field: str, weight: str, tensor_name: str) -> None:
    """A checkpoint tensor given for `weight` by name must be the one the config's role names:
    `model.layers.0.self_attn.o_proj.weight` is not a `self_attn.q_proj.weight`, even when the
    shapes agree (a swap would build a wrong program silently)."""
    if tensor_name != weight and not tensor_name.endswith(f".{weight}"):
        raise RequestError(
            field,
            f"tensor {tensor_name!r} is not a {weight!r}: a checkpoint tensor given by name must "
            f"be the one its role names (<prefix>layers.<i>.{weight})",
            title="Checkpoint tensor in the wrong role",
        )
