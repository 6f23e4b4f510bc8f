"""How large a tensor and a program may be: ceilings checked as each value's type is inferred,
before anything is allocated or multiplied further, so an absurd shape fails at the op that
makes it.

Shapes are Python integers here (no overflow), checked before they reach NumPy, protobuf or
JSON, which hold 64-bit integers at most. Every dimension must also fit MIL's int32 shape
values (a `reshape` target or a `tile` count is an int32 tensor).

The defaults (app/core/sizes.py) admit real models with room to spare. The service sets them from ANE_MAX_TENSOR_ELEMENTS,
ANE_MAX_TENSOR_BYTES, ANE_MAX_PROGRAM_ELEMENTS and ANE_MAX_PROGRAM_BYTES (app/settings.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.sizes import (
    DEFAULT_PROGRAM_BYTES,
    DEFAULT_PROGRAM_ELEMENTS,
    DEFAULT_TENSOR_BYTES,
    DEFAULT_TENSOR_ELEMENTS,
)
from app.mil.ir import MILBuildError
from app.mil.types import TensorType

INT32_MAX = (1 << 31) - 1


class CeilingError(MILBuildError):
    """A tensor or program over a ceiling (a limit, not a malformed program)."""

    def __init__(self, op: str, message: str, limit: int):
        self.limit = limit
        super().__init__(op, None, message)


@dataclass(frozen=True)
class Ceilings:
    tensor_elements: int = DEFAULT_TENSOR_ELEMENTS
    tensor_bytes: int = DEFAULT_TENSOR_BYTES
    program_elements: int = DEFAULT_PROGRAM_ELEMENTS  # over every value and constant
    program_bytes: int = DEFAULT_PROGRAM_BYTES

    def tensor(self, t: TensorType, what: str) -> tuple[int, int]:
        """(elements, bytes) of a value of type `t` that `what` (an op or input) makes, checked."""
        for d in t.shape:  # 0 only in an empty const (a list literal `[]`)
            if not 0 <= d <= INT32_MAX:
                raise MILBuildError(
                    what, None, f"dimension {d} of {list(t.shape)} is outside 0..{INT32_MAX}"
                )
        elements = t.size
        nbytes = -(-elements * t.dtype.bits // 8)
        if elements > self.tensor_elements:
            raise CeilingError(
                what,
                f"{t} holds {elements:,} elements, over the ceiling of "
                f"{self.tensor_elements:,} per tensor",
                self.tensor_elements,
            )
        if nbytes > self.tensor_bytes:
            raise CeilingError(
                what,
                f"{t} takes {nbytes:,} bytes, over the ceiling of {self.tensor_bytes:,} per tensor",
                self.tensor_bytes,
            )
        return elements, nbytes

    def program(self, elements: int, nbytes: int, what: str) -> None:
        """Check a program's running totals once `what` has added its values."""
        if elements > self.program_elements:
            raise CeilingError(
                what,
                f"the program's values reach {elements:,} elements here, "
                f"over the ceiling of {self.program_elements:,} per program",
                self.program_elements,
            )
        if nbytes > self.program_bytes:
            raise CeilingError(
                what,
                f"the program's values reach {nbytes:,} bytes here, over "
                f"the ceiling of {self.program_bytes:,} per program",
                self.program_bytes,
            )
