"""The SwiGLU feed-forward network as a graph request: the example the docs UI runs, the graph
benchmarks time and the graph tests build, written once."""

from __future__ import annotations


def swiglu_ffn(dim: int, hidden: int, seq_len: int, weights: dict | None = None) -> dict:
    """The body of `down(silu(gate(x)) * up(x))` over x [1, dim, 1, seq_len] (fp16): nodes `gate`,
    `up` (dim -> hidden), `act`, `h` and `down` (hidden -> dim), output `y`. `weights` maps a conv
    node's id to the weight it carries in the body (a nested list or a `sha256:` digest); nodes
    left out get theirs from file parts or a weights mapping."""
    nodes = [
        {"id": "gate", "op": "conv", "params": {"out_channels": hidden}, "inputs": {"x": "x"}},
        {"id": "up", "op": "conv", "params": {"out_channels": hidden}, "inputs": {"x": "x"}},
        {"id": "act", "op": "silu", "inputs": {"x": "gate"}},
        {"id": "h", "op": "mul", "inputs": {"x": "act", "y": "up"}},
        {"id": "down", "op": "conv", "params": {"out_channels": dim}, "inputs": {"x": "h"}},
    ]
    for node in nodes:
        if weights and node["id"] in weights:
            node["weights"] = {"weight": weights[node["id"]]}
    return {
        "inputs": {"x": {"shape": [1, dim, 1, seq_len], "dtype": "fp16"}},
        "nodes": nodes,
        "outputs": {"y": "down"},
    }
