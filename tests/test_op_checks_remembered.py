"""An op application's checked types are remembered (app/mil/ops/check.py): an application alike
in its arguments' types and sources, and in the values its rule read, gets the types the rule
gave; one that differs in a value the rule read is checked again, and a rejected one is never
remembered."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from app.mil.builder import Builder
from app.mil.ir import MILBuildError
from app.mil.types import DType, TensorType

check = importlib.import_module("app.mil.ops.check")


def _reshape(shape: list[int]) -> TensorType:
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (2, 3, 4))
    return b.op("reshape", "r", x=x, shape=b.const("s", np.array(shape, np.int32))).tensor


def test_a_value_the_rule_read_tells_applications_apart():
    assert _reshape([6, 4]).shape == (6, 4)
    assert _reshape([4, 6]).shape == (4, 6)  # the same types, another shape read
    assert _reshape([6, 4]).shape == (6, 4)
    with pytest.raises(MILBuildError, match="shape"):
        _reshape([5, 5])  # the same types: checked, and rejected
    with pytest.raises(MILBuildError, match="shape"):
        _reshape([5, 5])  # still rejected: a failure is not remembered


def test_values_the_rule_never_reads_do_not_matter_and_a_remembered_check_is_the_rules():
    def conv(weight: np.ndarray, strides: list[int]) -> TensorType:
        b = Builder("ios18")
        x = b.input("x", DType.FP16, (1, 4, 8, 8))
        w = b.const("w", weight.astype(np.float16))
        s = b.const("s", np.array(strides, np.int32))
        return b.op("conv", "c", x=x, weight=w, strides=s).tensor

    rng = np.random.default_rng(0)
    first = conv(rng.standard_normal((2, 4, 3, 3)), [1, 1])
    before = sum(len(v) for v in check._CHECKED.values())
    again = conv(rng.standard_normal((2, 4, 3, 3)), [1, 1])  # other weights, the same strides
    assert again == first == TensorType(DType.FP16, (1, 2, 6, 6))
    assert sum(len(v) for v in check._CHECKED.values()) == before  # remembered, not checked
    assert conv(rng.standard_normal((2, 4, 3, 3)), [2, 2]).shape == (1, 2, 3, 3)


def test_how_an_argument_is_made_is_part_of_what_is_remembered():
    b = Builder("ios18")
    x = b.input("x", DType.FP16, (2, 4))
    axis = b.const("axis", np.int32(1))
    b.op("softmax", "s", x=x, axis=axis)
    computed = b.op("add", "a", x=axis, y=b.const("zero", np.int32(0)))  # the same type
    with pytest.raises(MILBuildError, match="must be a const"):
        b.op("softmax", "t", x=x, axis=computed)


def test_what_is_kept_of_the_values_read_is_sized_whatever_their_form():
    assert check._size(None) == check._size(()) == 0
    assert check._size(("str", "valid")) == 5
    assert check._size(("<i4", (2,), b"\0" * 8)) == 8
    several = (("<i4", (1,), b"\0" * 4), (), ("str", "ab"))  # a variadic argument's values
    assert check._size(several) == 6
