"""Shared request examples for the catalog: one small valid params dict per op."""

SMALL = {
    "conv": {"in_channels": 4, "out_channels": 8, "spatial": 2},
    "matmul": {"in_features": 4, "out_features": 8, "tokens": 3},
    "identity": {"channels": 4, "spatial": 2},
    "scale": {"channels": 3, "spatial": 2},
    "rmsnorm": {"channels": 16, "spatial": 2},
    "sdpa": {"n_heads": 2, "head_dim": 4, "seq_len": 3},
    "gqa_expand": {"kv_heads": 2, "q_heads": 4, "head_dim": 4, "seq_len": 3},
    "read_state": {"state_name": "kv", "shape": [1, 1, 4, 8]},
    "update_state": {"state_name": "kv", "shape": [1, 1, 4, 8]},
}

# Variants that exercise every branch of each kernel (fp32 I/O, bias, dynamic, causal, ...).
VARIANTS = [
    ("conv", {"in_channels": 4, "out_channels": 8, "spatial": 2, "io_dtype": "fp32", "bias": True}),
    ("conv", {"in_channels": 4, "out_channels": 4, "spatial": 1, "weight_dtype": "fp32"}),
    ("matmul", {"in_features": 4, "out_features": 8, "tokens": 3, "dynamic": True}),
    ("matmul", {"in_features": 16, "out_features": 8, "tokens": 5, "io_dtype": "fp32"}),
    ("identity", {"channels": 4, "spatial": 2, "io_dtype": "fp32"}),
    ("scale", {"channels": 1, "spatial": 7, "io_dtype": "fp32"}),
    ("rmsnorm", {"channels": 16, "spatial": 2, "variant": "l2norm", "eps": 1e-6}),
    ("sdpa", {"n_heads": 2, "head_dim": 4, "seq_len": 3, "kv_seq_len": 5, "causal": True}),
    ("sdpa", {"n_heads": 1, "head_dim": 8, "seq_len": 4, "kv_seq_len": 6, "scale": 0.5}),
    ("gqa_expand", {"kv_heads": 2, "q_heads": 6, "head_dim": 4, "seq_len": 3, "order": "tile"}),
    ("gqa_expand", {"kv_heads": 3, "q_heads": 3, "head_dim": 2, "seq_len": 1}),
    ("read_state", {"shape": [8]}),
    ("update_state", {"state_name": "cache", "shape": [2, 3]}),
]
