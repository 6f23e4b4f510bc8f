"""Named pipelines, a request's choice of one, and the pipeline it resolves to.

A request chooses `passes`: a named pipeline ("default", "none", "fuse-all"), one pass by its
name, a list of pass names (run in that order), or {"pipeline": <one of those>, "options":
{<pass>: {<option>: value}}} to set the seed's options (as coremltools' PassPipeline and its
`set_options` do). "none" runs nothing: the program as built, its bytes and key as before
passes existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

from app.errors import RequestError
from app.passes import facts
from app.passes.catalogue import PASSES
from app.passes.graph_pass import GraphPass

# Bump when a pass or a pipeline changes what any program becomes: it is part of the key of every
# request that runs passes, so artifacts built before are built again.
VERSION = 5

# The default order, coremltools' own (its default and cleanup pipelines, pass_pipeline.py in
# coremltools 9.0) restricted to the passes implemented here, and written once:
DEFAULT: tuple[str, ...] = (
    # canonical first: redundant casts and ops that do nothing go, so every fusion below sees
    # the ops that compute
    "cast_optimization",
    "noop_elimination",
    # quantized activations: first a reshape between a dequantize and a quantize of the same
    # parameters reshapes the integers (coremltools runs int_op_canonicalization first of its
    # quantization passes, a canonicalization the others follow), then a dequantize straight
    # back to the same quantization goes, and a
    # dequantize of a constant becomes a constexpr before const_elimination would store it
    # decompressed (coremltools runs both before its const_elimination)
    "int_op_canonicalization",
    "nullify_redundant_quantization_zero_point",
    "dequantize_quantize_pair_elimination",
    "distributive_quantized_binary_op_scale_normalization",
    "dequantize_to_constexpr",
    # a conv_transpose's output shape written out
    "add_conv_transpose_output_shape",
    # constants settle: divisions by constants become multiplications, and whatever is computed
    # from constants alone is computed now; duplicates are merged once all are made
    "const_elimination",
    "divide_to_multiply",
    "const_elimination",
    # a select on a constant condition is one operand (or a mask added), once constants settle
    "select_optimization",
    "const_deduplication",
    # a compressed weight moved by a transpose or a reshape is stored moved (after the
    # duplicates merge, as coremltools orders it: its data must be read by it alone)
    "merge_affine_dequantize_with_consecutive_ops",
    "noop_elimination",
    # fusions, activations first (their spelled-out forms are the longest)
    "fuse_gelu_exact",
    "fuse_gelu_tanh_approximation",
    "fuse_leaky_relu",
    "fuse_prelu",
    "rank0_expand_dims_swap",
    "reduce_transposes",
    # a reflection written as slices and a concat is a pad; paddings merge, then a zero pad
    # melds into the conv it feeds
    "use_reflection_padding",
    "merge_consecutive_paddings",
    "fuse_pad_conv",
    # a product by a constant weight over the channels, between transposes, is a 1×1 conv in
    # (B, C, 1, S) (the ANE's best form), before the conv fusions that may fold into it
    "matmul_to_conv",
    # a batch norm folds into its conv first: what it leaves is a conv whose scale and bias
    # are folded already
    "fuse_conv_batchnorm",
    # a scale before a bias: folding a scale multiplies the bias, so the bias folded after it
    # stays exact; each twice, since one fusion can expose the other
    "fuse_conv_scale",
    "fuse_conv_bias",
    "fuse_reduce_mean",
    "fuse_conv_scale",
    "fuse_conv_bias",
    # a normalization spelt out, once its means are reduce_means (fuse_reduce_mean above)
    "fuse_layernorm_or_instancenorm",
    # a per-channel scale and shift the conv fusions did not take (no conv before them)
    "fuse_elementwise_to_batchnorm",
    "replace_stack_reshape",
    "detect_concat_interleave",
    "concat_to_pixel_shuffle",
    "merge_consecutive_relus",
    "merge_consecutive_reshapes",
    "merge_consecutive_transposes",
    # a rank-6 reshape -> transpose -> reshape (a depth-to-space) in steps of rank 4, once
    # transposes have merged (coremltools' order)
    "expand_high_rank_reshape_and_transpose",
    "fuse_transpose_matmul",
    # a matmul by a constant weight with a constant bias is linear; a bias after it folds in
    # (fuse_onehot_matmul_to_gather is not here: it changes what an index out of range gives;
    # nor compose_conv1d: a conv on (B, C, 1, S) is the ANE's layout, a rank-3 conv is not)
    "fuse_matmul_weight_bias",
    "fuse_linear_bias",
    "reduce_transposes",
    # a rank-5 stretch left by the fusions above computes in rank 4 (the ANE's)
    "fold_high_rank",
    # duplicates left by the fusions above, then names (before add_fp16_cast makes new ones)
    "remove_redundant_ops",
    "dedup_op_and_var_names",
    # fp16 compute, and the cleanup it needs: the casts between fp16 ops cancel
    "add_fp16_cast",
    "const_elimination",
    "dead_code_elimination",
    "cast_optimization",
    "dead_code_elimination",
    "const_deduplication",
    "noop_elimination",
    # order last: a state's write next to what it writes, then (coremltools' order, after its
    # fusions have settled) the readers after a coreml_update_state read the state back; casts
    # and transposes next to readers
    "canonicalize_inplace_pattern",
    "prefer_state_in_downstream",
    "topological_reorder",
    "dead_code_elimination",
)

# "fuse-all": the default's passes, none left out for the runtime (see `resolve`).
PIPELINES: dict[str, tuple[str, ...]] = {"default": DEFAULT, "fuse-all": DEFAULT, "none": ()}
MAX_LISTED = 200  # passes in one list: far more than any useful pipeline


@dataclass(frozen=True)
class PassChoice:
    """What a request asked for, checked; its JSON form is what the key and the job record hold."""

    pipeline: str | tuple[str, ...]
    options: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()

    @property
    def runs_nothing(self) -> bool:
        return self.pipeline == "none"

    def names(self) -> tuple[str, ...]:
        if isinstance(self.pipeline, tuple):
            return self.pipeline
        return PIPELINES.get(self.pipeline, (self.pipeline,))

    def to_json(self) -> str | list[str] | dict[str, Any]:
        pipeline = list(self.pipeline) if isinstance(self.pipeline, tuple) else self.pipeline
        if not self.options:
            return pipeline
        return {"pipeline": pipeline, "options": {p: dict(o) for p, o in self.options}}


DEFAULT_CHOICE = PassChoice("default")
NO_PASSES = PassChoice("none")


def parse_passes(value: Any, field: str = "passes") -> PassChoice:
    """A request's `passes`, checked (a RequestError names the field at fault)."""
    if isinstance(value, PassChoice):
        return value
    if isinstance(value, dict):
        unknown = set(value) - {"pipeline", "options"}
        if unknown or not isinstance(value.get("pipeline"), str | list):
            raise RequestError(
                field, 'an object with "pipeline" (a name or a list) and, optionally, "options"'
            )
        choice = parse_passes(value["pipeline"], f"{field}.pipeline")
        options = _options(value.get("options") or {}, choice, f"{field}.options")
        return PassChoice(choice.pipeline, options)
    if isinstance(value, str):
        if value not in PIPELINES and value not in PASSES:
            raise RequestError(
                field,
                f"{value!r} is neither a pipeline ({', '.join(PIPELINES)}) nor a pass; the "
                f"passes: {', '.join(PASSES)}",
            )
        return PassChoice(value)
    if isinstance(value, list) and 0 < len(value) <= MAX_LISTED:
        for i, name in enumerate(value):
            if not isinstance(name, str) or name not in PASSES:
                raise RequestError(
                    f"{field}[{i}]", f"{name!r} is not a pass; the passes: {', '.join(PASSES)}"
                )
        return PassChoice(tuple(value))
    raise RequestError(
        field,
        f'a pipeline ("default", "none", "fuse-all"), a pass name, a list of 1 to {MAX_LISTED} '
        'pass names, or {"pipeline": ..., "options": {<pass>: {<option>: value}}}',
    )


def _options(given: Any, choice: PassChoice, field: str) -> tuple:
    if not isinstance(given, dict):
        raise RequestError(field, "an object: pass name -> {option: value}")
    listed = set(choice.names())
    out = []
    for name, options in sorted(given.items()):
        where = f"{field}.{name}"
        if name not in listed:
            raise RequestError(where, f"{name!r} is not a pass of the pipeline chosen")
        declared = PASSES[name].options
        if not isinstance(options, dict) or not options:
            raise RequestError(where, f"an object of options: {', '.join(declared) or 'none'}")
        for option, value in options.items():
            if option not in declared:
                known = ", ".join(declared) or "it has none"
                raise RequestError(f"{where}.{option}", f"not an option of {name} ({known})")
            try:
                declared[option].check(value)
            except ValueError as exc:
                raise RequestError(f"{where}.{option}", str(exc)) from None
        out.append((name, tuple(sorted(options.items()))))
    return tuple(out)


@dataclass(frozen=True)
class Step:
    graph_pass: GraphPass
    options: Mapping[str, Any]


@dataclass(frozen=True)
class Pipeline:
    """The passes a request runs, in order, with their options."""

    choice: PassChoice
    steps: tuple[Step, ...]
    # Passes "default" leaves out because they would write an op the runtime reports failing.
    left_out: tuple[str, ...] = ()

    @cached_property
    def same_as(self) -> tuple[int, ...]:
        """For each step, the first step running the same pass with the same options (the
        runner skips a step whose twin left the function as it is)."""
        first: dict[tuple[str, str], int] = {}
        return tuple(
            first.setdefault((s.graph_pass.name, repr(sorted(s.options.items()))), i)
            for i, s in enumerate(self.steps)
        )

    def key_json(self) -> dict[str, Any]:
        """What the request key holds of it: the choice, VERSION, and what was left out."""
        doc: dict[str, Any] = {"pipeline": self.choice.to_json(), "version": VERSION}
        if self.left_out:
            doc["left_out"] = list(self.left_out)
        return doc


def resolve(choice: PassChoice, *, ane_direct: bool = False) -> Pipeline:
    """The pipeline a choice names, for a runtime that drives the ANE directly (`ane_direct`) or
    through Core ML: for the former the default pipeline leaves out every pass that would write
    an op whose record reports it failing on the ANE (facts.reported_failing: the program keeps
    it spelled out); "fuse-all" and passes named one by one run whatever the records report."""
    names = choice.names()
    left_out: tuple[str, ...] = ()
    if choice.pipeline == "default" and ane_direct:
        failing = facts.reported_failing()
        left_out = tuple(dict.fromkeys(n for n in names if PASSES[n].creates & failing))
        names = tuple(n for n in names if n not in left_out)
    given = dict(choice.options)
    steps = []
    for name in names:
        graph_pass = PASSES[name]
        options = graph_pass.defaults()
        for option, value in given.get(name, ()):
            options[option] = graph_pass.options[option].check(value)
        steps.append(Step(graph_pass, options))
    return Pipeline(choice, tuple(steps), left_out)


# A program written by hand for the ANE (a catalog kernel's, a kit's) goes through the default
# pipeline too, less the two passes that would only undo its author's choices: the order its ops
# are written in (topological_reorder moves the attention blocks' value transpose one op later:
# no op more or less), and the dtype each op computes in (add_fp16_cast would make a conv asked
# for fp32 weights compute in fp16: the request's own choice, as coremltools' compute_precision
# FLOAT32 runs without add_fp16_cast). Every other pass runs; on today's programs none changes
# anything (tests/test_passes_catalog.py holds every catalog example to that).
AUTHORS_CHOICES: tuple[str, ...] = ("topological_reorder", "add_fp16_cast")


@cache
def hand_written(*, ane_direct: bool = False) -> Pipeline:
    """The default pipeline for a program written by hand, for the runtime (see `resolve`):
    AUTHORS_CHOICES are left out, and said so in `left_out`."""
    full = resolve(DEFAULT_CHOICE, ane_direct=ane_direct)
    steps = tuple(s for s in full.steps if s.graph_pass.name not in AUTHORS_CHOICES)
    return Pipeline(DEFAULT_CHOICE, steps, (*full.left_out, *AUTHORS_CHOICES))
