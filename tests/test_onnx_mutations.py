"""Real exported models (tests/fixtures/onnx: BERT, ViT, a Whisper encoder), broken at random
the ways a file can be: an attribute given an odd value or another type, an op type swapped, an
input rewired, an initializer's type, size, values or bytes changed, a node dropped or repeated,
the opset or an output changed. The command line imports each with exit 0 or refuses it with
exit 2 naming the file, node or tensor; never a traceback, nothing left in $TMPDIR. (A fuzzer of
the same kind found nodes breaking their schema, non-integer shapes, axes out of range and bool
outputs reaching a traceback: tests/onnx_hostile.py holds one case of each.)"""

from __future__ import annotations

import copy
import random
from pathlib import Path

import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, ModelProto, numpy_helper

from app.cli import main

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "onnx"
MODELS = {name: onnx.load(FIXTURES / f"{name}.onnx") for name in ("bert", "vit", "whisper_encoder")}
ODD_INTS = [0, -1, 1, 2, 3, -2, 7, 64, 2**31 - 1, -(2**31), 2**40]
ODD_FLOATS = [0.0, -1.0, float("nan"), float("inf"), 1e30]


def _small_ints(tensor: onnx.TensorProto) -> bool:
    try:
        return tensor.data_type in (6, 7) and numpy_helper.to_array(tensor).size <= 16
    except ValueError:  # already broken by an earlier mutation
        return False


def mutate(model: ModelProto, rng: random.Random) -> str:
    """Break `model` in place one way; what was done."""
    g = model.graph
    nodes = list(g.node)
    node = rng.choice(nodes) if nodes else None
    kind = rng.randrange(13)
    if kind == 0 and node is not None:
        ints = [a for a in node.attribute if a.type in (AttributeProto.INT, AttributeProto.INTS)]
        if ints:
            a = rng.choice(ints)
            if a.type == AttributeProto.INT:
                a.i = rng.choice(ODD_INTS)
            elif a.ints:
                a.ints[rng.randrange(len(a.ints))] = rng.choice(ODD_INTS)
        return f"int attribute of {node.op_type}"
    if kind == 1 and node is not None:
        node.op_type = rng.choice([n.op_type for n in nodes] + ["Reshape", "Gather", "Concat"])
        return f"op type {node.op_type}"
    if kind == 2 and node is not None and node.input:
        names = [o for n in nodes for o in n.output] + [t.name for t in g.initializer] + [""]
        node.input[rng.randrange(len(node.input))] = rng.choice(names)
        return f"input of {node.op_type}"
    if kind == 3 and g.initializer:
        t = rng.choice(list(g.initializer))
        if t.dims and rng.random() < 0.5:
            t.dims[rng.randrange(len(t.dims))] = rng.choice(ODD_INTS)
        else:
            t.data_type = rng.choice([0, 1, 2, 6, 7, 9, 10, 11, 16, 99])
        return f"initializer {t.name}"
    if kind == 4:
        dims = rng.choice(list(g.input)).type.tensor_type.shape.dim
        if dims:
            dims[rng.randrange(len(dims))].dim_value = rng.choice(ODD_INTS)
        return "input shape"
    if kind == 5 and node is not None:
        g.node.remove(node)
        return "node dropped"
    if kind == 6 and node is not None:
        g.node.append(copy.deepcopy(node))
        return "node repeated"
    if kind == 7 and g.initializer:
        t = rng.choice(list(g.initializer))
        t.raw_data = t.raw_data[: rng.randrange(len(t.raw_data) + 1)]
        return f"initializer {t.name} cut short"
    if kind == 8 and node is not None and node.attribute:
        node.attribute.remove(rng.choice(list(node.attribute)))
        return f"attribute of {node.op_type} dropped"
    if kind == 9:
        model.opset_import[0].version = rng.choice([0, 7, 13, 17, 21, 99])
        return "opset"
    if kind == 10 and g.output and nodes:
        g.output[0].name = rng.choice([n.output[0] for n in nodes if n.output])
        return "output"
    if kind == 11 and node is not None:
        floats = [a for a in node.attribute if a.type == AttributeProto.FLOAT]
        if floats:
            rng.choice(floats).f = rng.choice(ODD_FLOATS)
        return f"float attribute of {node.op_type}"
    if kind == 12:
        ints = [t for t in g.initializer if _small_ints(t)]
        if ints:
            t = rng.choice(ints)
            values = numpy_helper.to_array(t).copy()
            if values.size:
                values.flat[rng.randrange(values.size)] = rng.choice(ODD_INTS[:-1])
            t.CopyFrom(numpy_helper.from_array(values, t.name))
        return "integer initializer values"
    return "unchanged"


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.sampled_from(sorted(MODELS)), st.integers(0, 2**32), st.integers(1, 3))
def test_a_broken_model_is_imported_or_refused_never_a_traceback(
    tmp_path, tmpdir_env, capsys, name, seed, count
):
    rng = random.Random(seed)
    model = copy.deepcopy(MODELS[name])
    done = [mutate(model, rng) for _ in range(count)]
    path = tmp_path / f"{name}-{seed}.onnx"
    path.write_bytes(model.SerializeToString())
    out = tmp_path / f"{name}-{seed}.zip"
    code = main(["onnx", str(path), "-o", str(out), "--format", "mil"])
    err = capsys.readouterr().err
    assert code in (0, 2), (done, err)
    assert "Traceback" not in err, (done, err)
    if code == 2:
        assert str(path) in err and not out.exists(), (done, err)
    out.unlink(missing_ok=True)
    path.unlink()
    assert list(tmpdir_env.iterdir()) == [], done
