"""Every implemented graph pass, listed once: a new pass is a module in app/passes/defs and a
line here. The seed's other passes, and why each is not here, are in docs/passes.md."""

from __future__ import annotations

from app.passes.defs import (
    add_fp16_cast,
    canonicalize_inplace_pattern,
    cast_optimization,
    const_deduplication,
    const_elimination,
    dead_code_elimination,
    dedup_op_and_var_names,
    detect_concat_interleave,
    divide_to_multiply,
    fuse_conv_bias,
    fuse_conv_scale,
    fuse_gelu_tanh_approximation,
    fuse_reduce_mean,
    fuse_transpose_matmul,
    merge_consecutive_relus,
    merge_consecutive_reshapes,
    merge_consecutive_transposes,
    noop_elimination,
    rank0_expand_dims_swap,
    reduce_transposes,
    remove_redundant_ops,
    topological_reorder,
)
from app.passes.graph_pass import GraphPass

PASSES: dict[str, GraphPass] = {
    m.PASS.name: m.PASS
    for m in (
        const_deduplication,
        const_elimination,
        dead_code_elimination,
        dedup_op_and_var_names,
        fuse_reduce_mean,
        noop_elimination,
        remove_redundant_ops,
        topological_reorder,
        fuse_gelu_tanh_approximation,
        fuse_conv_bias,
        fuse_conv_scale,
        divide_to_multiply,
        rank0_expand_dims_swap,
        fuse_transpose_matmul,
        cast_optimization,
        merge_consecutive_relus,
        merge_consecutive_reshapes,
        merge_consecutive_transposes,
        reduce_transposes,
        canonicalize_inplace_pattern,
        detect_concat_interleave,
        add_fp16_cast,
    )
}
