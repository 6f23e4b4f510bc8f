"""Constants of a Core AI program: named by their order in the program, sub-byte values packed.

The authoring API names each large constant's blob after a hash whose seed depends on where the
process's memory happens to lie, so two processes write different bytes for one program. Every
constant is made here instead, its blob named `w<n>` in the order the program asks for it.

Sub-byte constants (int4, uint4, uint2) are packed as the Linux runtime reads them: two (four)
values per byte, the first in the low bits. The authoring API would store one value per byte,
which that runtime misreads. Whether Apple's device compiler reads the same packing is not yet
confirmed on a device; kernel.json says so (`SUBBYTE_NOTE`).
"""

from __future__ import annotations

import numpy as np

from app.language.packing import pack_bits

SUBBYTE_NOTE = (
    "sub-byte weights (int4/uint4/uint2) are packed two or four values per byte, the first in "
    "the low bits, as coreai-core's CPU runtime reads them; the packing Apple's device compiler "
    "(coreai-build) expects is not yet confirmed on a device"
)
# Smaller constants are written inline in the program text (the authoring API's own limit).
_INLINE_BELOW = 256
_SUBBYTE = frozenset({"int4", "uint4", "uint2"})


class Constants:
    """Makes the constants of one module; `count` names the next blob."""

    def __init__(self) -> None:
        self.count = 0

    def make(self, array: np.ndarray, dtype_name: str):
        """A `coreai.constant` holding `array` as Core AI dtype `dtype_name` (a facade Value)."""
        from coreai._compiler.dialects._coreai_ops_gen import ConstantOp
        from coreai._compiler.ir import DenseResourceElementsAttr
        from coreai.authoring import TensorType
        from coreai.authoring.constant import constant
        from coreai.authoring.operation import Value

        from app.coreai.dtype_map import coreai_dtype, mil_dtype, numpy_dtype

        dtype = coreai_dtype(dtype_name)
        array = np.asarray(array)
        subbyte = dtype_name in _SUBBYTE
        if not subbyte and array.size < _INLINE_BELOW:
            # asarray, not ascontiguousarray: that one makes a 0-d scalar 1-d
            return constant(np.asarray(array, numpy_dtype(dtype_name)), dtype=dtype)
        if not subbyte:
            buffer = np.ascontiguousarray(array, numpy_dtype(dtype_name))
        else:  # the one bit packer: LSB first, as weight.bin and MIL immediates
            buffer = np.frombuffer(pack_bits(array, mil_dtype(dtype_name)), np.uint8)
        mlir_type = TensorType(tuple(array.shape), dtype)._to_mlir()
        name = f"w{self.count}"
        self.count += 1
        attr = DenseResourceElementsAttr.get_from_buffer(buffer.data, name, mlir_type)
        return Value._from_mlir(ConstantOp(value=attr).result)
