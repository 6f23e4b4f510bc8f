"""The kernel request's kind (one op, a package of functions, a graph), made by its one checked
constructor: a mix of kinds refused naming the field, the kind kept through the JSON form (and
read from records written before it was spelled out), and the cache key computed once."""

import numpy as np
import pytest

from app.errors import RequestError
from app.graphs.examples import swiglu_ffn
from app.request import KernelRequest, RequestKind

CONV = {"in_channels": 4, "out_channels": 4, "spatial": 2}
CONV_WEIGHTS = {"weight": np.eye(4, dtype=np.float32)}
D, H, S = 8, 16, 4
FFN = swiglu_ffn(D, H, S)
DECODER = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "seq_len": 8,
}
FUNCTIONS = {"prefill": {}, "decode": {"seq_len": 1, "mode": "decode", "cache_len": 16}}


def _requests() -> dict[RequestKind, KernelRequest]:
    return {
        RequestKind.OP: KernelRequest.create("conv", CONV, CONV_WEIGHTS),
        RequestKind.FUNCTIONS: KernelRequest.create("decoder_layer", DECODER, functions=FUNCTIONS),
        RequestKind.GRAPH: KernelRequest.create(graph=FFN, name="ffn"),
    }


def test_each_kind_comes_from_what_the_constructor_is_given():
    for kind, request in _requests().items():
        assert request.kind is kind
    graph = _requests()[RequestKind.GRAPH]
    assert graph.op == "graph" and graph.params.nodes[0].id == "gate"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("args", "kwargs", "field"),
    [
        (("conv", CONV), {"graph": FFN}, "op"),
        ((None, CONV), {"graph": FFN}, "params"),
        ((), {"graph": FFN, "functions": FUNCTIONS}, "functions"),
        ((), {"graph": FFN, "quantize": {"mode": "palettize", "nbits": 4}}, "quantize"),
        (("graph", FFN), {}, "op"),
        ((), {}, "op"),
        (("decoder_layer", DECODER), {"functions": FUNCTIONS, "target": "ios17"}, "target"),
        (("conv", CONV), {"functions": {"bad name": {}}}, "functions.bad name"),
    ],
)
def test_a_mix_of_kinds_is_refused_naming_the_field(args, kwargs, field):
    with pytest.raises(RequestError) as refused:
        KernelRequest.create(*args, **kwargs)
    assert refused.value.field == field


def test_the_kind_survives_the_json_form_and_old_records_read_the_same():
    for kind, request in _requests().items():
        data = request.to_json()
        assert data["kind"] == kind.value
        again = KernelRequest.from_json(data)
        assert again.kind is kind and again.key == request.key
        # a record written before the kind was spelled out: a graph is named by its op alone
        data.pop("kind")
        assert KernelRequest.from_json(data).key == request.key


def test_the_key_is_computed_once_and_its_compiled_variants_from_the_same_document():
    request = KernelRequest.create("conv", CONV, CONV_WEIGHTS, format="mlmodelc")
    assert request.key is request.key  # the same string object: not hashed a second time
    toolchain = {"compiler": "linux", "coremlcompiler": "3500"}
    compiled = request.compiled_key(toolchain)
    assert compiled == request.compiled_key(dict(toolchain)) != request.key
    assert compiled != request.compiled_key({**toolchain, "coremlcompiler": "3600"})
    # another request with the same identity has the same key; other weights, another one
    same = KernelRequest.create("conv", CONV, CONV_WEIGHTS, format="mlmodelc", bypass_cache=True)
    other = KernelRequest.create(
        "conv", CONV, {"weight": 2 * np.eye(4, dtype=np.float32)}, format="mlmodelc"
    )
    assert same.key == request.key != other.key
    assert request.with_weights(other.weights).key == other.key
