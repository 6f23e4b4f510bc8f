"""A builder as one node of a graph sees it: the catalog op's program is built with the node's
inputs, its names prefixed with the node id, and its output taking the node's names.

Catalog ops build by calling `input(...)` for what they read and naming their result op `y`:
here `input` hands over the graph value bound to that input (after checking it has the type the
op expects) and `y` becomes the op named after the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from app.errors import RequestError
from app.mil import Builder, DType, TensorType, Var


class NodeScope:
    def __init__(
        self,
        builder: Builder,
        node_id: str,
        where: str,
        inputs: Mapping[str, Var],
        output_name: str,
    ):
        self._b, self._id, self._where = builder, node_id, where
        self._inputs, self._output_name = inputs, output_name
        self.target = builder.target
        self.read: set[str] = set()  # the inputs the op asked for

    def _name(self, name: str) -> str:
        return f"{self._id}_{name}"

    def input(self, name: str, dtype: DType, shape: Sequence[int]) -> Var:
        var = self._inputs.get(name)
        self.read.add(name)
        if var is None:
            raise RequestError(f"{self._where}.inputs.{name}", "this op needs this input")
        expected = TensorType(dtype, tuple(shape))
        if var.tensor != expected:
            raise RequestError(
                f"{self._where}.inputs.{name}",
                f"expected {expected} (from the node's params), got {var.tensor} from {var.name!r}",
            )
        return var

    def state(self, name: str, dtype: DType, shape: Sequence[int]) -> Var:
        raise RequestError(f"{self._where}.op", "ops with states cannot be graph nodes")

    def const(self, name: str, value, dtype: DType | None = None) -> Var:
        return self._b.const(self._name(name), value, dtype)

    def unique(self, base: str) -> str:
        return self._b.unique(self._name(base))

    def op(self, op_type: str, name: str, out: str | None = None, **args: object) -> Var:
        if name == "y":  # the op's result: the node itself
            return self._b.op(op_type, self._id, out=self._output_name, **args)
        return self._b.op(op_type, self._name(name), out=out, **args)

    def op_outputs(
        self, op_type: str, name: str, out: Sequence[str] | None = None, **args: object
    ) -> tuple[Var, ...]:
        return self._b.op_outputs(op_type, self._name(name), out=out, **args)
