"""The catalog's build entry: op name + params + weights -> a checked MIL program, its weights
compressed first when a quantize config asks (`build_kernel`), or several such programs as the
functions of one package (`build_functions`).

It sits above the catalog (app/kernels) because compressing runs coremltools' own quantization
arithmetic (app.quantize.compress), and the catalog and the IR load without coremltools: a command
that lists ops, reads a program or builds an unquantized one does not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from app.core.names import name_problem
from app.errors import RequestError
from app.kernels import KernelBuild, get_op, parse_params
from app.kernels.compressed import (
    CompressingBuilder,
    QuantizedWeight,
    check_quantize,
    read_quantize,
)
from app.kernels.functions import (
    FunctionsBuild,
    check_functions,
    merge_functions,
    weight_shapes,
)
from app.kernels.op import CatalogOp, WeightSpec, const_name
from app.kernels.params import OpParams
from app.kernels.weight_check import (
    PreparedWeights,
    WeightsOnRead,
    check_names,
    prepare_weights,
    random_weights,
)
from app.language.targets import DEFAULT_TARGET
from app.mil import MILBuildError, OpsetError, Target, get_target
from app.mil.ceilings import Ceilings
from app.quantize import QuantizeConfig, QuantizeConfigError


def target_and_name(target: str | Target, name: str) -> tuple[Target, str]:
    """A build's target and model name, checked (errors name `target` and `name`)."""
    try:
        tgt = get_target(target)
    except ValueError as exc:
        raise RequestError("target", str(exc)) from None
    if (problem := name_problem(name)) is not None:
        raise RequestError("name", problem)
    return tgt, name


def build_kernel(
    op: str,
    params: Mapping[str, Any] | OpParams | None,
    weights: Mapping[str, np.ndarray] | None = None,
    *,
    target: str | Target = DEFAULT_TARGET,
    name: str | None = None,
    random_seed: int | None = None,
    quantize: Mapping[str, Any] | QuantizeConfig | None = None,
    ceilings: Ceilings = Ceilings(),
    sibling: KernelBuild | None = None,
) -> KernelBuild:
    """Validate a request and build its program. Missing weights are an error unless
    `random_seed` is given, which draws every missing weight reproducibly. `quantize` compresses
    the op's weight matrices (app/quantize; its errors name `quantize.<key>`). `sibling`: another
    function of the same package, built from the same weights; the weights it compressed with
    the same config are taken as they are (and, weights read on demand, those it read). Every
    value of the program is held to `ceilings` (a tensor over one is refused naming `params`)."""
    catalog_op = get_op(op)
    p = parse_params(catalog_op, params)
    tgt, name = target_and_name(target, name or op)
    specs = catalog_op.weights(p)
    if quantize is not None and isinstance(weights, WeightsOnRead) and random_seed is None:
        return _build_on_read(catalog_op, p, tgt, name, specs, weights, quantize, sibling, ceilings)
    given = dict(weights or {})
    if random_seed is not None:
        missing = [s for s in specs if s.name not in given]
        given.update(random_weights(missing, random_seed))
    prepared = prepare_weights(specs, given)
    compressed: dict[str, QuantizedWeight] = {}
    if quantize is not None:
        config = read_quantize(quantize, "quantize")
        done = sibling.quantized if sibling is not None else {}
        compressed = quantize_weights(op, specs, prepared, config, tgt, done=done)
    return _build(catalog_op, p, tgt, name, prepared, compressed, ceilings)


def _build_on_read(
    catalog_op: CatalogOp,
    p: OpParams,
    tgt: Target,
    name: str,
    specs: list[WeightSpec],
    weights: WeightsOnRead,
    quantize: Mapping[str, Any] | QuantizeConfig,
    sibling: KernelBuild | None,
    ceilings: Ceilings,
) -> KernelBuild:
    """`build_kernel` of weights read on demand: each weight the config compresses is read,
    validated and compressed in turn, and only its compressed form is kept (the build reads
    it again if asked for it as given); the others are read once and held."""
    check_names(specs, weights)
    config = read_quantize(quantize, "quantize")
    chosen = {s.name for s in check_quantize(catalog_op.name, specs, config, tgt)}
    source = weights if sibling is None else sibling.weights  # held there: not read again
    held = prepare_weights(
        [s for s in specs if s.name not in chosen],
        {k: source[k] for k in weights if k not in chosen},
    )
    on_read = PreparedWeights(specs, held, weights)
    done = sibling.quantized if sibling is not None else {}
    compressed = quantize_weights(catalog_op.name, specs, on_read, config, tgt, done=done)
    # the op's build passes each weight to `const`, which puts a compressed one in as its
    # constexpr ops without looking at the value: None there, not a weight read for nothing
    values = {**held, **dict.fromkeys(compressed)}
    return _build(catalog_op, p, tgt, name, on_read, compressed, ceilings, values)


def _build(
    catalog_op: CatalogOp,
    p: OpParams,
    tgt: Target,
    name: str,
    prepared: Mapping[str, np.ndarray],
    compressed: Mapping[str, QuantizedWeight],
    ceilings: Ceilings,
    values: Mapping[str, np.ndarray | None] | None = None,
) -> KernelBuild:
    """The op's program from its checked params and weights (`values`, default `prepared`),
    those in `compressed` put in as their constexpr ops."""
    builder = CompressingBuilder(tgt, ceilings=ceilings)
    builder.compressed.update({const_name(k): q.compressed for k, q in compressed.items()})
    op = catalog_op.name
    try:
        # a compressed weight's value is None: the op takes it from the builder's compressed map
        outputs = catalog_op.build(builder, p, prepared if values is None else values)  # type: ignore[arg-type]
        program = builder.build(outputs)
    except OpsetError as exc:
        raise RequestError("target", f"{op} is not available for {tgt.name}: {exc}") from None
    except MILBuildError as exc:
        raise RequestError("params", str(exc)) from exc
    return KernelBuild(p, tgt, name, program, prepared, dict(compressed), op=catalog_op)


def quantize_weights(
    op: str,
    specs: Sequence[WeightSpec],
    weights: Mapping[str, np.ndarray],
    config: QuantizeConfig,
    target: Target,
    *,
    field: str = "quantize",
    weights_field: str = "weights",
    done: Mapping[str, QuantizedWeight] = {},
) -> dict[str, QuantizedWeight]:
    """Every quantizable weight of an op compressed by `config`, by weight name; those in `done`
    under `config` (compressed from the same arrays) are taken from there."""
    out = {}
    # Only a quantized request loads the compressor: it runs coremltools' own arithmetic, whose
    # import loads the whole converter stack (seconds per process) that nothing else here needs.
    from app.quantize.compress import quantize

    for spec in check_quantize(op, specs, config, target, field):
        earlier = done.get(spec.name)
        if (
            earlier is not None
            and earlier.config == config
            and (earlier.shape, earlier.compressed.dtype) == (spec.shape, spec.dtype)
        ):
            out[spec.name] = earlier
            continue
        try:
            compressed = quantize(
                weights[spec.name],
                config,
                target,
                dtype=spec.dtype,
                field=field,
                weight_field=f"{weights_field}.{spec.name}",
            )
        except QuantizeConfigError as exc:
            raise RequestError(exc.field, exc.message) from None
        out[spec.name] = QuantizedWeight(config, compressed)
    return out


def build_functions(
    op: str,
    params: Mapping[str, Any],
    functions: Mapping[str, Mapping[str, Any]],
    weights: Mapping[str, np.ndarray] | None = None,
    *,
    target: str | Target = DEFAULT_TARGET,
    name: str | None = None,
    random_seed: int | None = None,
    quantize=None,
) -> FunctionsBuild:
    check_functions(functions, target if isinstance(target, str) else target.name)
    parts: dict[str, KernelBuild] = {}
    given = weights or {}
    for fn_name, overrides in functions.items():
        try:
            part = build_kernel(
                op,
                {**params, **overrides},
                given,
                target=target,
                name=name,
                random_seed=random_seed,
                quantize=quantize,
                # the functions take the same arrays: each weight is compressed once, and every
                # function's constexpr consts hold the same arrays (weight.bin stores them once)
                sibling=next(iter(parts.values()), None),
            )
        except RequestError as exc:
            raise RequestError(
                f"functions.{fn_name}.{exc.field}", exc.message, title=exc.title
            ) from None
        if parts:
            first_name, first = next(iter(parts.items()))
            if weight_shapes(part) != weight_shapes(first):
                raise RequestError(
                    f"functions.{fn_name}",
                    f"takes other weights than "
                    f"{first_name}: a package's functions share one set of weights",
                )
        if random_seed is not None:  # random weights drawn once, shared by all
            given = {**part.weights, **given}
        parts[fn_name] = part
    program = merge_functions(parts)
    first = next(iter(parts.values()))
    return FunctionsBuild(
        first.params,
        first.target,
        first.name,
        program,
        first.weights,
        first.quantized,
        op=get_op(op),
        parts=parts,
    )
