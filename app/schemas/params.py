"""Parameters of each catalog op: names, types, defaults and limits are a public contract."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# 16384 is the largest tensor dimension reported to compile for the ANE.
MAX_DIM = 16384

Dim = Annotated[int, Field(ge=1, le=MAX_DIM)]
IODType = Literal["fp16", "fp32"]
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", min_length=1, max_length=64)]


class OpParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ConvParams(OpParams):
    """1×1 convolution y = W·x (+ b) on the ANE layout [1, C, 1, S]."""

    in_channels: Dim
    out_channels: Dim
    spatial: Dim = Field(description="S, the length of the last axis")
    io_dtype: IODType = Field("fp16", description="fp32 I/O is cast to and from fp16 inside")
    weight_dtype: Literal["fp16", "fp32"] = Field(
        "fp16", description="fp32 keeps weights and compute in fp32 (the ANE computes in fp16 only)"
    )
    bias: bool = False


class MatmulParams(OpParams):
    """y = x·Wᵀ for tokens laid out as [1, in_features, 1, tokens]."""

    in_features: Dim
    out_features: Dim
    tokens: Dim
    io_dtype: IODType = "fp16"
    dynamic: bool = Field(
        False, description="take W as a second runtime input `w` instead of a weight"
    )


class IdentityParams(OpParams):
    """y = x, through a 1×1 convolution with identity weights."""

    channels: Dim
    spatial: Dim
    io_dtype: IODType = "fp16"


class ScaleParams(OpParams):
    """y = x · scale per channel (a depthwise 1×1 convolution)."""

    channels: Dim
    spatial: Dim
    io_dtype: IODType = "fp16"


class RMSNormParams(OpParams):
    """y = x / sqrt(mean(x², over channels) + eps) · w, safe from fp16 overflow."""

    channels: Dim
    spatial: Dim
    eps: float = Field(1e-5, gt=0, le=1)
    variant: Literal["safe", "l2norm"] = Field(
        "safe", description="safe: square + reduce_mean; l2norm: reduce_l2_norm (faster for wide C)"
    )


class SDPAParams(OpParams):
    """softmax(Q·Kᵀ·scale)·V over [1, heads, seq, head_dim]."""

    n_heads: Dim
    head_dim: Dim
    seq_len: Dim
    kv_seq_len: Dim | None = Field(None, description="defaults to seq_len")
    causal: bool = False
    scale: float | None = Field(None, gt=0, description="defaults to 1/sqrt(head_dim)")

    @model_validator(mode="after")
    def _causal_needs_keys(self) -> SDPAParams:
        if self.causal and self.kv_len < self.seq_len:
            raise ValueError(
                "causal attention needs kv_seq_len >= seq_len (queries are the last positions)"
            )
        return self

    @property
    def kv_len(self) -> int:
        return self.kv_seq_len or self.seq_len


class GQAExpandParams(OpParams):
    """Repeat kv_heads key/value heads to q_heads for grouped-query attention."""

    kv_heads: Dim
    q_heads: Dim
    head_dim: Dim
    seq_len: Dim
    order: Literal["repeat_kv", "tile"] = Field(
        "repeat_kv", description="repeat_kv: head h reads kv head h // (q/kv); tile: h % kv"
    )

    @model_validator(mode="after")
    def _divisible(self) -> GQAExpandParams:
        if self.q_heads % self.kv_heads:
            raise ValueError(
                f"q_heads ({self.q_heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        return self


class ReadStateParams(OpParams):
    """Read a state buffer (iOS18 state; experimental on the ANE-direct path)."""

    state_name: Identifier = "state"
    shape: list[Dim] = Field(min_length=1, max_length=4)

    @model_validator(mode="after")
    def _not_reserved(self) -> ReadStateParams:
        if self.state_name in ("x", "y", "value"):
            raise ValueError(
                f"state_name {self.state_name!r} is reserved for the kernel's inputs/outputs"
            )
        return self


class UpdateStateParams(ReadStateParams):
    """Write `value` into a state buffer, then read it back (write_state + read_state)."""


PARAMS: dict[str, type[OpParams]] = {
    "conv": ConvParams,
    "matmul": MatmulParams,
    "identity": IdentityParams,
    "scale": ScaleParams,
    "rmsnorm": RMSNormParams,
    "sdpa": SDPAParams,
    "gqa_expand": GQAExpandParams,
    "read_state": ReadStateParams,
    "update_state": UpdateStateParams,
}
