"""A graph request -> one MIL program: the nodes' ops in a topological order, named after the
node ids, every weight in the one weight.bin (identical tensors stored once).

Shapes and dtypes flow from the graph inputs: a catalog-op node gets the params its inputs fix
(`CatalogOp.bind`) and adds its own; a primitive node's tensor arguments are its inputs or its
weights (constants), its other arguments its params. A node whose output the graph exports names
that output after the graph's output. Every fault names its path (`nodes[3].inputs.y`,
`nodes[0].weights.weight`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from app.catalog_build import quantize_weights, target_and_name
from app.errors import ErrorKind, RequestError
from app.graphs.built import BuiltNode, GraphBuild
from app.graphs.primitives import Primitive, resolve_op
from app.graphs.scope import NodeScope
from app.graphs.spec import GRAPH_OP, GraphNode, GraphParams, producer
from app.kernels import CatalogOp, parse_params
from app.kernels.compressed import (
    CompressingBuilder,
    QuantizedWeight,
    check_quantize,
    read_quantize,
)
from app.kernels.op import const_name
from app.kernels.weight_check import check_values, prepare_weights, random_weights
from app.language.targets import DEFAULT_TARGET
from app.mil import DType, MILBuildError, OpsetError, Target, Var
from app.mil.ceilings import CeilingError, Ceilings

Value = Var | tuple[Var, ...]


class _Builder:
    """One graph being built."""

    def __init__(
        self,
        graph: GraphParams,
        weights: Mapping[str, np.ndarray],
        target: Target,
        random_seed: int | None,
        ceilings: Ceilings,
    ):
        self.graph, self.given, self.seed = graph, dict(weights), random_seed
        # each node's weights by their names within it ("<node>.<weight>"; an id holds no dot),
        # gathered once: a graph of thousands of nodes is not searched whole for each node's
        self.by_node: dict[str, dict[str, np.ndarray]] = {}
        for key, array in self.given.items():
            node_id, _, name = key.partition(".")
            self.by_node.setdefault(node_id, {})[name] = array
        self.b = CompressingBuilder(target, ceilings=ceilings)
        self.values: dict[str, Value] = {}
        self.weights: dict[str, np.ndarray] = {}
        self.quantized: dict[str, QuantizedWeight] = {}
        self.consts: dict[str, str] = {}
        self.nodes: list[BuiltNode] = []
        self.exported = {ref: name for name, ref in graph.outputs.items()}

    def run(self, model_name: str) -> GraphBuild:
        ids = {n.id for n in self.graph.nodes}
        for key in self.given:
            if producer(key) not in ids or "." not in key:
                raise RequestError(f"weights.{key}", "names no node's weight (<node>.<weight>)")
        for input_name, spec in self.graph.inputs.items():
            try:
                self.values[input_name] = self.b.input(input_name, DType(spec.dtype), spec.shape)
            except MILBuildError as exc:
                raise _fault(f"inputs.{input_name}", exc) from None
        for index in self.graph.order():
            self._node(index)
        outputs = []
        for output, ref in self.graph.outputs.items():
            value = self._ref(ref, f"outputs.{output}")
            assert isinstance(value, Var)
            outputs.append(value)
        program = self.b.build(outputs)
        return GraphBuild(
            self.graph,
            self.b.target,
            model_name,
            program,
            self.weights,
            self.quantized,
            nodes=tuple(self.nodes),
            consts=self.consts,
        )

    # -- references ---------------------------------------------------------------------------
    def _ref(self, ref: str, where: str) -> Var:
        source, _, pick = ref.partition(".")
        value = self.values[source]
        if not pick:
            if isinstance(value, tuple):
                raise RequestError(
                    where, f"{source!r} has {len(value)} outputs: name one ({source}.0)"
                )
            return value
        if not isinstance(value, tuple):
            raise RequestError(where, f"{source!r} has one output: refer to it as {source!r}")
        if not pick.isdigit() or int(pick) >= len(value):
            raise RequestError(
                where, f"{source!r} has outputs {source}.0 to {source}.{len(value) - 1}"
            )
        return value[int(pick)]

    def _args(self, node: GraphNode, where: str) -> dict[str, Value]:
        out: dict[str, Value] = {}
        for arg, ref in node.inputs.items():
            if isinstance(ref, list):
                out[arg] = tuple(
                    self._ref(r, f"{where}.inputs.{arg}[{i}]") for i, r in enumerate(ref)
                )
            else:
                out[arg] = self._ref(ref, f"{where}.inputs.{arg}")
        return out

    def _weights_of(self, node: GraphNode) -> dict[str, np.ndarray]:
        return dict(self.by_node.get(node.id, {}))

    # -- nodes --------------------------------------------------------------------------------
    def _node(self, index: int) -> None:
        node = self.graph.nodes[index]
        where = f"nodes[{index}]"
        op = resolve_op(node.op, f"{where}.op")
        args = self._args(node, where)
        try:
            if isinstance(op, Primitive):
                built = self._primitive(index, node, op, args, where)
            else:
                built = self._catalog(index, node, op, args, where)
        except OpsetError as exc:
            raise RequestError(
                "target", f"{where} ({node.op}) is not available for {self.b.target}: {exc}"
            ) from None
        except MILBuildError as exc:
            raise _fault(where, exc) from None
        self.nodes.append(built)

    def _keep(self, node: GraphNode, weight: str, array: np.ndarray) -> str:
        key = f"{node.id}.{weight}"
        self.weights[key], self.consts[key] = array, f"{node.id}_{const_name(weight)}"
        return key

    def _catalog(
        self, index: int, node: GraphNode, op: CatalogOp, args: dict[str, Value], where: str
    ) -> BuiltNode:
        inputs: dict[str, Var] = {}
        for arg, value in args.items():
            if isinstance(value, tuple):
                raise RequestError(f"{where}.inputs.{arg}", f"{op.name} takes one value here")
            inputs[arg] = value
        assert op.bind is not None
        bound = op.bind({arg: v.tensor for arg, v in inputs.items()})
        for key, value in node.params.items():
            if key in bound and bound[key] != value:
                raise RequestError(
                    f"{where}.params.{key}",
                    f"{value!r} contradicts its inputs: its inputs fix {bound[key]!r}",
                )
        try:
            params = parse_params(op, {**bound, **node.params})
            given = self._weights_of(node)
            specs = op.weights(params)
            config = None
            if node.quantize is not None:  # its faults come before the weights'
                config = read_quantize(node.quantize, "quantize")
                check_quantize(op.name, specs, config, self.b.target)
            if self.seed is not None:
                given.update(
                    random_weights([s for s in specs if s.name not in given], self.seed + index)
                )
            prepared = prepare_weights(specs, given)
        except RequestError as exc:
            raise RequestError(f"{where}.{exc.field}", exc.message) from None
        if config is not None:
            quantized = quantize_weights(
                op.name,
                specs,
                prepared,
                config,
                self.b.target,
                field=f"{where}.quantize",
                weights_field=f"{where}.weights",
            )
            for w, q in quantized.items():
                self.b.compressed[f"{node.id}_{const_name(w)}"] = q.compressed
                self.quantized[f"{node.id}.{w}"] = q
        out_name = self.exported.get(node.id, node.id)
        scope = NodeScope(self.b, node.id, where, inputs, out_name)
        # the scope stands in for the Builder a catalog op builds with (its methods, node-named)
        (result,) = op.build(scope, params, prepared)  # type: ignore[arg-type]
        unread = set(inputs) - scope.read
        if unread:
            raise RequestError(f"{where}.inputs.{min(unread)}", f"not an input of {op.name} here")
        keys = {w: self._keep(node, w, a) for w, a in prepared.items()}
        self.values[node.id] = result
        return BuiltNode(index, node, op, params, _names(args), (result.name,), keys)

    def _primitive(
        self, index: int, node: GraphNode, op: Primitive, args: dict[str, Value], where: str
    ) -> BuiltNode:
        tensors, consts_ = set(op.tensor_args), set(op.param_args)
        for arg in args:
            if arg not in tensors:
                hint = " (it belongs in params)" if arg in consts_ else ""
                raise RequestError(
                    f"{where}.inputs.{arg}", f"not a tensor argument of {op.name}{hint}"
                )
        for arg in node.params:
            if arg not in consts_:
                hint = " (it belongs in inputs or weights)" if arg in tensors else ""
                raise RequestError(f"{where}.params.{arg}", f"not an argument of {op.name}{hint}")
        keys, consts = {}, {}
        for w, given in self._weights_of(node).items():
            if w not in op.weight_args or w in args or w in node.params:
                why = (
                    "it is an input too"
                    if w in args
                    else "it is a param too"
                    if w in node.params
                    else f"not a tensor argument of {op.name}"
                )
                raise RequestError(f"{where}.weights.{w}", why)
            array = _weight(f"{where}.weights.{w}", given)
            consts[w], keys[w] = array, self._keep(node, w, array)
        params = {k: v for k, v in node.params.items() if v is not None}
        out = self._out_names(node, op)
        produced = self.b.op_outputs(op.name, node.id, out=out, **args, **consts, **params)
        if not produced:
            raise RequestError(where, f"{op.name} has no output to use")
        self.values[node.id] = produced[0] if len(produced) == 1 else produced
        return BuiltNode(index, node, op, None, _names(args), tuple(v.name for v in produced), keys)

    def _out_names(self, node: GraphNode, op: Primitive) -> list[str] | None:
        """The names of a primitive's outputs when the graph exports them, else the default."""
        if node.id in self.exported:
            return [self.exported[node.id]]
        picks = {
            ref.partition(".")[2]: name
            for ref, name in self.exported.items()
            if producer(ref) == node.id and "." in ref
        }
        count = op.record.output_count(node.params) if picks else None
        if count is None:
            return None
        return [picks.get(str(i), f"{node.id}_{i}") for i in range(count)]


def _fault(where: str, exc: MILBuildError) -> RequestError:
    """A build fault as the request's: a ceiling is a limit (413), anything else invalid (422)."""
    if isinstance(exc, CeilingError):
        return RequestError(
            where, str(exc), kind=ErrorKind.TOO_LARGE, title="Tensor too large", limit=exc.limit
        )
    return RequestError(where, str(exc))


def _names(args: Mapping[str, Value]) -> dict[str, str | tuple[str, ...]]:
    return {
        arg: tuple(v.name for v in value) if isinstance(value, tuple) else value.name
        for arg, value in args.items()
    }


def _weight(field: str, given: np.ndarray) -> np.ndarray:
    """A primitive's constant argument: numbers, finite, floats within the fp16 range (a float
    constant takes the dtype of its partner tensor, fp16 on the ANE), 64-bit integers (what
    JSON lists give) as int32 within its range."""
    array = np.asarray(given)
    if array.dtype.kind not in "fiub" or array.dtype.itemsize > 8:
        raise RequestError(field, f"dtype {array.dtype} is not a number type")
    if array.dtype.kind == "f":
        array = array.astype(np.float32, copy=False)
        check_values(field, array, DType.FP16)
    elif array.dtype.kind in "iu" and array.dtype.itemsize == 8:
        low, high = DType.INT32.int_range
        if array.size and (int(array.min()) < low or int(array.max()) > high):
            raise RequestError(field, f"integers beyond int32 [{low}, {high}]")
        array = array.astype(np.int32)
    return np.ascontiguousarray(array)


def build_graph(
    graph: GraphParams,
    weights: Mapping[str, np.ndarray] | None = None,
    *,
    target: str | Target = DEFAULT_TARGET,
    name: str | None = None,
    random_seed: int | None = None,
    ceilings: Ceilings = Ceilings(),
) -> GraphBuild:
    """Build a graph's program. Missing weights of catalog-op nodes are drawn from
    `random_seed` when it is given (primitive nodes' weights are always given); every value is
    held to `ceilings`."""
    tgt, name = target_and_name(target, name or GRAPH_OP)
    return _Builder(graph, weights or {}, tgt, random_seed, ceilings).run(name)
