"""The builder's type inference: right shapes out, and wrong ones fail naming the op and argument."""

import numpy as np
import pytest

from app.mil import TARGETS, Builder, DType, MILBuildError, TensorType, ops

F16 = DType.FP16


def _x(b, shape=(1, 4, 1, 3), dtype=F16, name="x"):
    return b.input(name, dtype, shape)


@pytest.mark.parametrize(
    ("op", "args", "shape"),
    [
        ("add", {"y": 1.0}, (1, 4, 1, 3)),
        ("mul", {"y": np.ones((1, 4, 1, 1), np.float16)}, (1, 4, 1, 3)),
        ("reduce_mean", {"axes": [1], "keep_dims": True}, (1, 1, 1, 3)),
        ("reduce_sum", {"axes": [-1]}, (1, 4, 1)),
        ("reduce_max", {}, ()),
        ("transpose", {"perm": [0, 3, 2, 1]}, (1, 3, 1, 4)),
        ("reshape", {"shape": [1, -1, 3]}, (1, 4, 3)),
        ("tile", {"reps": [1, 2, 1, 1]}, (1, 8, 1, 3)),
        ("slice_by_size", {"begin": [0, 1, 0, 0], "size": [1, 2, 1, -1]}, (1, 2, 1, 3)),
        ("expand_dims", {"axes": [0]}, (1, 1, 4, 1, 3)),
        ("squeeze", {"axes": [0, 2]}, (4, 3)),
        ("squeeze", {}, (4, 3)),
        ("softmax", {"axis": -1}, (1, 4, 1, 3)),
        ("cast", {"dtype": "fp32"}, (1, 4, 1, 3)),
    ],
)
def test_inference(op, args, shape):
    b = Builder()
    y = b.op(op, "y", x=_x(b), **args)
    assert y.tensor.shape == shape


def test_conv_and_matmul_shapes():
    b = Builder()
    x = _x(b, (1, 4, 1, 5))
    w = b.const("w", np.zeros((6, 4, 1, 1), np.float16))
    assert b.op("conv", "c", x=x, weight=w).tensor.shape == (1, 6, 1, 5)
    m = b.op(
        "matmul", "m", x=b.input("a", F16, (2, 3, 4)), y=b.input("b", F16, (5, 4)), transpose_y=True
    )
    assert m.tensor.shape == (2, 3, 5)


def test_concat_interleave_and_sdpa():
    b = Builder()
    x = _x(b, (1, 2, 3, 4))
    assert b.op("concat", "c", values=(x, x, x), axis=1, interleave=True).tensor.shape == (
        1,
        6,
        3,
        4,
    )
    k = b.input("k", F16, (1, 2, 7, 4))
    y = b.op("scaled_dot_product_attention", "a", query=x, key=k, value=k)
    assert y.tensor.shape == (1, 2, 3, 4)


@pytest.mark.parametrize(
    ("op", "args", "arg", "fragment"),
    [
        ("add", {"y": np.ones((1, 5, 1, 1), np.float16)}, "y", "do not broadcast"),
        ("reshape", {"shape": [1, 5]}, "shape", "cannot reshape"),
        ("transpose", {"perm": [0, 1]}, "perm", "needs 4 axes"),
        ("transpose", {"perm": [0, 1, 1, 2]}, "perm", "repeated axis"),
        ("reduce_mean", {"axes": [4]}, "axes", "out of range"),
        ("slice_by_size", {"begin": [0, 3, 0, 0], "size": [1, 2, 1, 1]}, "size", "outside"),
        ("squeeze", {"axes": [1]}, "axes", "size 1"),
        ("cast", {"dtype": "int8"}, "dtype", "cannot cast"),
        ("tile", {"reps": [1, 0, 1, 1]}, "reps", "positive"),
        ("softmax", {"bogus": 1}, "bogus", "unknown argument"),
        ("mul", {}, "y", "required argument is missing"),
    ],
)
def test_errors_name_op_and_argument(op, args, arg, fragment):
    b = Builder()
    with pytest.raises(MILBuildError) as info:
        b.op(op, "bad", x=_x(b), **args)
    assert info.value.arg == arg
    assert op in info.value.op and "bad" in info.value.op
    assert fragment in info.value.message


def test_dtype_errors():
    b = Builder()
    x = _x(b)
    with pytest.raises(MILBuildError, match="dtype fp32 differs from fp16"):
        b.op("add", "a", x=x, y=b.input("f", DType.FP32, (1, 4, 1, 3)))
    with pytest.raises(MILBuildError, match="int32 is not allowed"):
        b.op("sqrt", "s", x=b.input("i", DType.INT32, (2,)))
    w = b.const("w", np.zeros((6, 5, 1, 1), np.float16))
    with pytest.raises(MILBuildError, match=r"C_in / groups = 4/1 != weight\[1\] \(5\)"):
        b.op("conv", "c", x=x, weight=w)


def test_const_only_arguments_must_be_consts():
    b = Builder()
    x = _x(b)
    axes = b.input("axes", DType.INT32, (1,))
    with pytest.raises(MILBuildError, match="must be a const"):
        b.op("reduce_sum", "r", x=x, axes=axes)


def test_targets_refuse_newer_ops():
    b = Builder("ios17")
    x = _x(b, (1, 2, 3, 4))
    with pytest.raises(MILBuildError, match="not in the ios17 opset"):
        b.op("scaled_dot_product_attention", "a", query=x, key=x, value=x)
    with pytest.raises(MILBuildError, match="states need ios18"):
        b.state("s", F16, (1, 4))
    assert {r.name for r in ops.built() if not r.availability["ios17"]} == {
        "scaled_dot_product_attention",
        "read_state",
        "write_state",
        "coreml_update_state",
        "slice_update",
        "constexpr_blockwise_shift_scale",
        "constexpr_sparse_blockwise_shift_scale",
    }
    # lut_to_dense and sparse_to_dense have earlier (iOS16) forms under the same names
    ios17, ios18 = TARGETS["ios17"], TARGETS["ios18"]
    for name in ("constexpr_lut_to_dense", "constexpr_sparse_to_dense"):
        record = ops.get(name)
        assert record is not None and record.availability == {"ios18": True, "ios17": True}
        assert "shape" in record.form_in(ios17).args and "shape" not in record.form_in(ios18).args


@pytest.mark.parametrize("name", ["1x", "a-b", "", "x y", "é"])
def test_identifiers(name):
    with pytest.raises(MILBuildError, match="not an identifier"):
        Builder().input(name, F16, (1,))


def test_names_are_unique():
    b = Builder()
    x = _x(b)
    with pytest.raises(MILBuildError, match="already used"):
        b.op("abs", "x", x=x)
    b.op("abs", "a", x=x)
    assert b.unique("a") == "a_1"


def test_float_literals_take_their_partners_dtype():
    b = Builder()
    y = b.op("mul", "y", x=_x(b), y=0.5)
    const = y.op.inputs["y"].op
    assert const.value.type.dtype is F16 and const.name == "y_y"


def test_states_and_write_state_checks():
    b = Builder()
    s = b.state("kv", F16, (1, 4))
    with pytest.raises(MILBuildError, match="expects a state"):
        b.op("read_state", "r", input=b.input("t", F16, (1, 4)))
    with pytest.raises(MILBuildError, match="does not match the state"):
        b.op_outputs("write_state", "w", input=s, data=b.input("v", F16, (1, 5)))
    assert b.op_outputs("write_state", "w", input=s, data=b.input("v2", F16, (1, 4))) == ()


def test_op_is_for_one_output_and_op_outputs_for_any():
    b = Builder()
    x = b.input("x", F16, (1, 4, 1, 6))
    with pytest.raises(MILBuildError, match="2 outputs where one was asked for"):
        b.op("split", "halves", x=x, num_splits=2, axis=1)
    first, second = b.op_outputs("split", "halves", x=x, num_splits=2, axis=1)
    assert (first.name, second.name) == ("halves_0", "halves_1")
    assert first.tensor == second.tensor == TensorType(F16, (1, 2, 1, 6))
