"""Checks user weights against a kernel's WeightSpecs, or draws seeded random ones.

Large weights are checked in chunks so validating a 256 MiB tensor does not allocate another one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping

import numpy as np

from app.errors import RequestError
from app.kernels.op import WeightSpec
from app.mil import DType
from app.tensors.fp16 import all_finite

FP16_MAX = 65504.0
_CHUNK = 1 << 20  # elements per validation chunk


def check_values(field: str, array: np.ndarray, dtype: DType) -> None:
    """Finite values, within the fp16 range when stored as fp16 (`field` names the weight)."""
    # Two reductions per chunk and no temporaries: max/min propagate NaN, and a finite max and
    # min bound every |value|, so they answer both questions in one pass each.
    flat = array.reshape(-1)
    if flat.dtype == np.float16:  # within the fp16 range by type: only NaN/Inf can be wrong
        if not all_finite(flat):
            raise RequestError(field, "contains NaN or Inf")
        return
    fp16_range = dtype is DType.FP16
    for start in range(0, flat.size, _CHUNK):
        chunk = flat[start : start + _CHUNK]
        hi, lo = float(chunk.max()), float(chunk.min())
        if not (np.isfinite(hi) and np.isfinite(lo)):
            raise RequestError(field, "contains NaN or Inf")
        if fp16_range and max(hi, -lo) > FP16_MAX:
            raise RequestError(
                field, f"has values beyond ±{FP16_MAX:g}, the fp16 range it is stored in"
            )


def prepare_weights(
    specs: list[WeightSpec], given: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Validated weights in the shapes the program uses (views, not copies, where possible)."""
    _check_known(specs, given)
    out = {}
    for spec in specs:
        _check_present(spec, given)
        array = np.asarray(given[spec.name])
        if array.dtype.kind not in "fiu" or array.dtype.itemsize > 8:
            raise RequestError(f"weights.{spec.name}", f"dtype {array.dtype} is not a number type")
        _check_shape(spec, array.shape)
        if array.dtype.kind != "f":
            array = array.astype(np.float32)
        elif array.dtype == np.float64:
            array = array.astype(np.float32)  # the store only has fp16/fp32
        check_values(f"weights.{spec.name}", array, spec.dtype)
        out[spec.name] = np.ascontiguousarray(array).reshape(spec.shape)
    return out


def _check_known(specs: list[WeightSpec], given: Mapping[str, np.ndarray]) -> None:
    expected = {s.name for s in specs}
    for name in given:
        if name not in expected:
            known = ", ".join(s.name for s in specs) or "none"
            raise RequestError(f"weights.{name}", f"unknown weight; this op takes: {known}")


def _check_present(spec: WeightSpec, given: Mapping[str, np.ndarray]) -> None:
    if spec.name not in given:
        raise RequestError(f"weights.{spec.name}", f"missing weight of shape {list(spec.shape)}")


def _check_shape(spec: WeightSpec, shape: tuple[int, ...]) -> None:
    if shape != spec.shape and shape not in spec.also_accepts:
        accepted = " or ".join(str(list(s)) for s in (spec.shape, *spec.also_accepts))
        raise RequestError(
            f"weights.{spec.name}",
            f"expected shape {accepted} ({spec.expr}), received {list(shape)}",
        )


class WeightsOnRead(Mapping[str, np.ndarray]):
    """Weights read from their source each time one is asked for, none of them held: what a
    caller passes for a program whose weights are compressed as they are read (a model kit's
    quantized decoder layers), so that only the compressed form of each stays in memory. Their
    shapes are known before any is read."""

    @abstractmethod
    def shape(self, name: str) -> tuple[int, ...]:
        """Weight `name`'s shape, nothing read."""

    def __contains__(self, name: object) -> bool:
        return any(name == key for key in self)  # Mapping's own would read the weight


class PreparedWeights(Mapping[str, np.ndarray]):
    """An op's weights validated (`prepare_weights`), those in `held` held and the others read
    from `source` and validated again each time one is asked for (they are compressed in the
    program: only the request's own account of them, kernel.json's digest, reads them again)."""

    def __init__(
        self,
        specs: list[WeightSpec],
        held: Mapping[str, np.ndarray],
        source: Mapping[str, np.ndarray],
    ):
        self._specs = {s.name: s for s in specs}
        self._held = held
        self._source = source

    def __getitem__(self, name: str) -> np.ndarray:
        if name in self._held:
            return self._held[name]
        return prepare_weights([self._specs[name]], {name: self._source[name]})[name]

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __iter__(self):
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


def check_names(specs: list[WeightSpec], given: WeightsOnRead) -> None:
    """`prepare_weights`' checks of names and shapes on weights read on demand, none read."""
    _check_known(specs, given)
    for spec in specs:
        _check_present(spec, given)
        _check_shape(spec, given.shape(spec.name))


def random_weights(specs: list[WeightSpec], seed: int) -> dict[str, np.ndarray]:
    """Reproducible weights: the same seed gives the same tensors on every machine."""
    rng = np.random.default_rng(seed)
    out = {}
    for spec in specs:
        values = spec.init_offset + spec.init_scale * rng.standard_normal(
            spec.shape, dtype=np.float32
        )
        out[spec.name] = values.astype(spec.dtype.numpy)
    return out
