"""What the rule modules share: the authoring module, and the few ways they write reshapes,
transposes, scalars and the broadcasting variants of elementwise ops."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.coreai.step import Step
from app.mil import TensorType


def ca():
    """coreai.authoring, imported when a rule runs (the coreai extra is optional)."""
    import coreai.authoring as authoring

    return authoring


def reshape(step: Step, value, shape: Sequence[int]) -> object:
    return ca().reshape(value, step.indices(list(shape), "int32"))


def transpose(step: Step, value, perm: Sequence[int]) -> object:
    return ca().transpose(value, step.indices(list(perm), "uint32"))


def scalar(step: Step, value: float | np.generic | np.ndarray, like: TensorType | str) -> object:
    """A 0-d constant of `like`'s dtype, for the broadcasting ops."""
    return step.make(np.array(value), like)


def elementwise(name: str, x, y, same_shape: bool) -> object:
    """Core AI's `name` for operands of one shape, `broadcasting_<name>` otherwise."""
    return getattr(ca(), name if same_shape else f"broadcasting_{name}")(x, y)


def cast_to(value, like: TensorType) -> object:
    """`value` cast to the dtype of the MIL type `like`."""
    from app.coreai.dtype_map import coreai_dtype, dtype_name

    return ca().cast(value, coreai_dtype(dtype_name(like.dtype)))
