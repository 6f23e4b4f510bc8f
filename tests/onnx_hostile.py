"""Hostile ONNX files: each a folder of files (the model and what it names) that the importer must
refuse with a clear error naming the file, node or tensor, over the CLI (exit 2) and HTTP (4xx).

`HOSTILE[name](folder)` writes the case's files into `folder` and returns (the model's file name,
a fragment the error must hold, the `field` HTTP names).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx_support import Case, model_of, op

Made = tuple[str, str, str]


def _external(name: str, shape: list[int], location: str, length: int | None = None) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape)
    tensor.data_location = TensorProto.EXTERNAL
    entries = {"location": location, "offset": "0"}
    if length is not None:
        entries["length"] = str(length)
    for key, value in entries.items():
        tensor.external_data.add(key=key, value=value)
    return tensor


def _with_weight(folder: Path, tensor: TensorProto) -> str:
    """x·W with W the given (external) tensor."""
    model = model_of(Case("m", [op("MatMul", ["x", tensor.name])], {"x": [1, 4]}))
    model.graph.initializer.append(tensor)
    onnx.save(model, folder / "model.onnx")
    return "model.onnx"


def not_onnx(folder: Path) -> Made:
    (folder / "model.onnx").write_text('{"not": "an onnx model"}\n')
    return "model.onnx", "is not an ONNX model", "model"


def random_bytes(folder: Path) -> Made:
    (folder / "model.onnx").write_bytes(np.random.default_rng(0).bytes(4096))
    return "model.onnx", "is not an ONNX model", "model"


def truncated(folder: Path) -> Made:
    model = model_of(
        Case(
            "m",
            [op("MatMul", ["x", "w"])],
            {"x": [1, 64]},
            consts={"w": np.ones((64, 64), np.float32)},
        )
    )
    data = model.SerializeToString()
    (folder / "model.onnx").write_bytes(data[: len(data) // 2])
    return "model.onnx", "is not an ONNX model", "model"


def absolute_location(folder: Path) -> Made:
    return (
        _with_weight(folder, _external("W", [4, 4], "/etc/passwd")),
        "is absolute",
        "initializers.W",
    )


def climbing_location(folder: Path) -> Made:
    (folder.parent / "secret.bin").write_bytes(b"\0" * 64)
    return (
        _with_weight(folder, _external("W", [4, 4], "../secret.bin")),
        "climbs out",
        "initializers.W",
    )


def location_through_a_link(folder: Path) -> Made:
    (folder.parent / "outside.bin").write_bytes(b"\0" * 64)
    (folder / "weights.bin").symlink_to(folder.parent / "outside.bin")
    return _with_weight(folder, _external("W", [4, 4], "weights.bin")), "outside", "initializers.W"


def short_external_data(folder: Path) -> Made:
    (folder / "weights.bin").write_bytes(b"\0" * 40)
    return (
        _with_weight(folder, _external("W", [4, 4], "weights.bin")),
        "shorter than its tensor",
        "initializers.W",
    )


def wrong_length(folder: Path) -> Made:
    (folder / "weights.bin").write_bytes(b"\0" * 64)
    return (
        _with_weight(folder, _external("W", [4, 4], "weights.bin", length=32)),
        "`length` is 32",
        "initializers.W",
    )


def cyclic(folder: Path) -> Made:
    nodes = [op("Add", ["x", "b"], ["a"]), op("Relu", ["a"], ["b"]), op("Neg", ["b"])]
    onnx.save(model_of(Case("m", nodes, {"x": [4]})), folder / "model.onnx")
    return "model.onnx", "cycle", "nodes./Add_a"


def element_overflow(folder: Path) -> Made:
    tensor = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1 << 40, 1 << 40])
    return _with_weight(folder, tensor), "more than", "initializers.W"


def unknown_domain(folder: Path) -> Made:
    model = model_of(
        Case(
            "m",
            [helper.make_node("Thing", ["x"], ["y"], name="odd", domain="com.example")],
            {"x": [4]},
        )
    )
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(model, folder / "model.onnx")
    return "model.onnx", "domain 'com.example'", "nodes"


def microsoft_fused(folder: Path) -> Made:
    model = model_of(
        Case(
            "m",
            [helper.make_node("FastGelu", ["x"], ["y"], name="gelu", domain="com.microsoft")],
            {"x": [4]},
        )
    )
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(model, folder / "model.onnx")
    return "model.onnx", "without --optimize", "nodes"


def opset_too_new(folder: Path) -> Made:
    onnx.save(model_of(Case("m", [op("Relu", ["x"])], {"x": [4]}, opset=99)), folder / "model.onnx")
    return "model.onnx", "opset 99 is newer", "model"


def opset_too_old(folder: Path) -> Made:
    onnx.save(model_of(Case("m", [op("Relu", ["x"])], {"x": [4]}, opset=11)), folder / "model.onnx")
    return "model.onnx", "opset 11 is older than 13", "model"


def beyond_fp16(folder: Path) -> Made:
    w = np.full((4, 4), 1e6, np.float32)
    model = model_of(Case("m", [op("MatMul", ["x", "big"])], {"x": [1, 4]}, consts={"big": w}))
    onnx.save(model, folder / "model.onnx")
    return "model.onnx", "beyond ±65504", "initializers.big"


def dynamic_axis(folder: Path) -> Made:
    onnx.save(
        model_of(Case("m", [op("Relu", ["x"])], {"x": [1, "sequence"]})), folder / "model.onnx"
    )
    return "model.onnx", "axis 1 is dynamic ('sequence')", "shapes.x"


def name_collision(folder: Path) -> Made:
    case = Case("m", [op("Add", ["a.b", "a_b"])], {"a.b": [4], "a_b": [4]})
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "'a_b' and 'a.b' both become 'a_b'", "inputs.a_b"


def unsupported_ops(folder: Path) -> Made:
    nodes = [
        op("Sinh", ["x"], ["e"]),
        op("Cosh", ["e"], ["l"]),
        op("Asinh", ["x"], ["f"]),
        op("Add", ["l", "f"]),
    ]
    onnx.save(model_of(Case("m", nodes, {"x": [4]})), folder / "model.onnx")
    # every unsupported node at once: Sinh, Cosh (fed by Sinh: judged by its type) and Asinh
    return "model.onnx", "3 node(s) cannot be imported", "nodes"


HOSTILE: dict[str, Callable[[Path], Made]] = {
    f.__name__: f
    for f in (
        not_onnx,
        random_bytes,
        truncated,
        absolute_location,
        climbing_location,
        location_through_a_link,
        short_external_data,
        wrong_length,
        cyclic,
        element_overflow,
        unknown_domain,
        microsoft_fused,
        opset_too_new,
        opset_too_old,
        beyond_fp16,
        dynamic_axis,
        name_collision,
        unsupported_ops,
    )
}


def weights_over(folder: Path, nbytes: int) -> str:
    """A model whose weight (in external data) takes `nbytes` in fp16."""
    side = int((nbytes // 2) ** 0.5) + 1
    w = np.zeros((side, side), np.float32)
    (folder / "weights.bin").write_bytes(w.tobytes())
    model = model_of(Case("m", [op("MatMul", ["x", "W"])], {"x": [1, side]}))
    model.graph.initializer.append(_external("W", [side, side], "weights.bin"))
    onnx.save(model, folder / "model.onnx")
    return "model.onnx"


def output_is_an_input(folder: Path) -> Made:
    case = Case("m", [op("Relu", ["x"], ["r"])], {"x": [4]}, outputs=["r", "x"])
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "is an input unchanged", "outputs.x"


def dropout_mask_used(folder: Path) -> Made:
    nodes = [op("Dropout", ["x"], ["d", "mask"]), op("Cast", ["mask"], ["y"], to=TensorProto.FLOAT)]
    onnx.save(model_of(Case("m", nodes, {"x": [4]})), folder / "model.onnx")
    return "model.onnx", "its output 'mask' has no lowering", "nodes"


def missing_attribute(folder: Path) -> Made:
    onnx.save(model_of(Case("m", [op("Cast", ["x"])], {"x": [4]})), folder / "model.onnx")
    return "model.onnx", "Required attribute 'to' is missing", "nodes./Cast_y"


def too_few_inputs(folder: Path) -> Made:
    onnx.save(model_of(Case("m", [op("MatMul", ["x"])], {"x": [1, 4]})), folder / "model.onnx")
    return "model.onnx", "input size 1 not in range [min=2, max=2]", "nodes./MatMul_y"


def attribute_of_another_type(folder: Path) -> Made:
    case = Case("m", [op("Concat", ["x", "x"], axis=0.5)], {"x": [4]})
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "Mismatched attribute type", "nodes./Concat_y"


def reshape_copying_an_axis_the_input_lacks(folder: Path) -> Made:
    shape = np.array([1, 4, 0], np.int64)  # 0 copies the input's axis 2: a [1, 4] has none
    case = Case("m", [op("Reshape", ["x", "shape"])], {"x": [1, 4]}, consts={"shape": shape})
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "[1, 4] to [1, 4, 0]", "nodes./Reshape_y"


def float_shape(folder: Path) -> Made:
    shape = np.array([4.0, np.nan], np.float32)  # ONNX gives a shape as int64
    case = Case("m", [op("Reshape", ["x", "shape"])], {"x": [4]}, consts={"shape": shape})
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "holds float32, not integers", "nodes./Reshape_y"


def axis_out_of_range(folder: Path) -> Made:
    case = Case("m", [op("LogSoftmax", ["x"], axis=7)], {"x": [2, 4]})
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "axis 7 of a rank-2 tensor", "nodes./LogSoftmax_y"


def lookup_on_an_axis_the_table_lacks(folder: Path) -> Made:
    table = np.ones((8, 4), np.float32)
    case = Case(
        "m",
        [op("Gather", ["table", "ids"], axis=5)],
        {"ids": [1, 3]},
        consts={"table": table},
        input_types={"ids": TensorProto.INT64},
    )
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "axis 5 of a rank-2 tensor", "nodes./Gather_y"


def perm_not_an_order(folder: Path) -> Made:
    case = Case("m", [op("Transpose", ["x"], perm=[0, 1 << 40])], {"x": [2, 4]})
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "is not an order of the 2 axes", "nodes./Transpose_y"


def slice_of_uneven_lists(folder: Path) -> Made:
    consts = {
        "starts": np.array([0, 1], np.int64),
        "ends": np.array([2], np.int64),
    }
    case = Case("m", [op("Slice", ["x", "starts", "ends"])], {"x": [4, 4]}, consts=consts)
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "2 starts, 1 ends", "nodes./Slice_y"


def bool_output(folder: Path) -> Made:
    case = Case(
        "m",
        [op("Less", ["x", "x"], ["mask"])],
        {"x": [4]},
        outputs=["mask"],
        output_types={"mask": TensorProto.BOOL},
    )
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "bool cannot be a Core ML model's output", "outputs.mask"


def constant_where_data_is_lowered(folder: Path) -> Made:
    slope = np.full((4,), 0.1, np.float32)  # PRelu of a constant by a slope from the data
    case = Case("m", [op("PRelu", ["c", "x"])], {"x": [4]}, consts={"c": slope})
    onnx.save(model_of(case), folder / "model.onnx")
    return "model.onnx", "its input 0 ('c') is a constant", "nodes./PRelu_y"


HOSTILE.update(
    {
        f.__name__: f
        for f in (
            output_is_an_input,
            dropout_mask_used,
            missing_attribute,
            too_few_inputs,
            attribute_of_another_type,
            reshape_copying_an_axis_the_input_lacks,
            float_shape,
            axis_out_of_range,
            lookup_on_an_axis_the_table_lacks,
            perm_not_an_order,
            slice_of_uneven_lists,
            bool_output,
            constant_where_data_is_lowered,
        )
    }
)
