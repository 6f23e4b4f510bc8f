"""The compressed-weight ops (iOS18 `constexpr_*`) as Core AI's own: the weights stay compressed
in the `.aimodel` and are expanded by the runtime, as Core ML does with MIL's.

    constexpr_blockwise_shift_scale(data, scale, offset) -> blockwise_shift_scale
        MIL: scale · (data − offset); Core AI: (data − offset1) · scale + offset2
    constexpr_lut_to_dense(indices, lut[..., 2^n, V], vector_axis) -> lut_to_dense

Sub-byte data and indices are packed (app.coreai.weights). Palettes of 1, 3 or 6 bits have no
Core AI index dtype here, nor do the sparse forms a rule: both are refused by name before
anything is written.
"""

from __future__ import annotations

import numpy as np

from app.coreai.spelling import ca as _ca
from app.coreai.step import NoCoreAIForm, Step


def _plain(step: Step, arg: str) -> np.ndarray:
    array = step.array(arg)
    if array is None:
        raise NoCoreAIForm(f"{step.op.type} with a computed {arg!r}")
    return array


def blockwise_shift_scale(step: Step) -> list:
    data_type, scale_type = step.type("data"), step.type("scale")
    data = step.make(_plain(step, "data"), data_type)
    scale = step.make(_plain(step, "scale"), scale_type)
    offset = _plain(step, "offset") if step.has("offset") else np.zeros(scale_type.shape)
    offset = np.broadcast_to(offset, scale_type.shape)
    offset1 = step.make(offset, step.type("offset") if step.has("offset") else data_type)
    offset2 = step.make(np.zeros(scale_type.shape), scale_type)
    return [_ca().blockwise_shift_scale(data, scale, offset1, offset2)]


def lut_to_dense(step: Step) -> list:
    indices = step.make(_plain(step, "indices"), step.type("indices"))
    lut = step.make(_plain(step, "lut"), step.type("lut"))
    axis = step.const("vector_axis", 0) or 0
    return [_ca().lut_to_dense(indices, lut, np.array(axis, np.int16))]


RULES = {
    "constexpr_blockwise_shift_scale": blockwise_shift_scale,
    "constexpr_lut_to_dense": lut_to_dense,
}
