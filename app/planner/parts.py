"""A kit's `quantize` option read as its two parts, the layers' and the head's: one config for
both, or {"layers": ..., "head": ...} (a part left out stays fp16), each checked as the option
spells it against the kits' target and, by the layout, against every weight shape it meets."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.errors import RequestError
from app.quantize import (
    LinearConfig,
    PalettizeConfig,
    QuantizeConfig,
    QuantizeConfigError,
    check_config,
    check_target,
    parse_config,
)

TARGET = "ios18"  # the kits' target: multifunction packages and states
FP16 = "fp16"
AUTO = "auto"  # a part left to the quality gate's ladder (app/kits/auto.py): laid out as fp16


@dataclass(frozen=True)
class Part:
    """The layers' or the head's quantization: its config (None: fp16) as the option gave it."""

    quantize: Mapping[str, Any] | None
    config: QuantizeConfig | None
    field: str = "quantize"  # how the option spells this part

    @property
    def align(self) -> int:
        """Output channels a piece of this part's weight must come in: a palette per group of
        channels needs whole groups."""
        c = self.config
        if isinstance(c, PalettizeConfig) and c.granularity == "per_grouped_channel":
            return c.group_size
        return 1

    def check(self, shape: tuple[int, ...]) -> None:
        """The config applies to a weight of `shape` (groups and blocks divide it), named as the
        option spells it: refused before anything is laid out or built."""
        if self.config is None:
            return
        try:
            check_config(self.config, shape, TARGET, field=self.field)
        except QuantizeConfigError as exc:
            raise RequestError(exc.field, exc.message) from None

    def describe(self) -> str:
        c = self.config
        if c is None:
            return FP16
        if isinstance(c, PalettizeConfig):
            groups = f", groups of {c.group_size}" if c.granularity == "per_grouped_channel" else ""
            return f"{c.nbits}-bit palettized{groups}"
        if isinstance(c, LinearConfig):
            return f"linear {c.dtype} {c.granularity}"
        return f"pruned {c.target_sparsity:g}" + (f" + {c.dtype}" if c.dtype else "")


def quantize_parts(quantize: Mapping[str, Any] | str | None) -> tuple[Any, Any]:
    """The `quantize` option as (the layers' config, the head's): {layers, head} (a part left
    out stays fp16), or one config for both. A part "auto" is fp16 until the ladder chooses."""
    if quantize is None or quantize == AUTO:
        return None, None
    if not isinstance(quantize, Mapping):
        raise RequestError(
            "quantize", 'a JSON object: a quantize config, or {layers, head}; or "auto"'
        )
    if set(quantize) <= {"layers", "head"}:
        layers, head = quantize.get("layers"), quantize.get("head")
        return (None if layers == AUTO else layers), (None if head == AUTO else head)
    return quantize, quantize


def read_parts(quantize: Mapping[str, Any] | str | None) -> tuple[Part, Part]:
    """Each part's config read as the option spells it (`quantize.nbits`, or
    `quantize.layers.nbits` in the {layers, head} form), checked against the kits' target."""
    layers_q, head_q = quantize_parts(quantize)
    split = quantize is not None and layers_q is not quantize
    parts = []
    for name, data in (("layers", layers_q), ("head", head_q)):
        if data is None:
            parts.append(Part(None, None))
            continue
        field = f"quantize.{name}" if split else "quantize"
        try:
            config = parse_config(data, field)
            check_target(config, TARGET, field)
        except QuantizeConfigError as exc:
            raise RequestError(exc.field, exc.message) from None
        except (TypeError, AttributeError) as exc:
            raise RequestError(field, f"a key has a value of the wrong type: {exc}") from None
        parts.append(Part(dict(data), config, field))
    return parts[0], parts[1]
