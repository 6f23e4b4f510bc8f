"""Floats as Apple's compiler spells them in `model.mil`: C's `%a` applied to the value as a double.

Seen in the goldens: `0x0p+0`, `0x1p-24` (fp16 subnormal, normalised once widened to double),
`0x1.388p+13`, `-0x1.e28358p-6` (fp32), `-inf`. The rest follows the same printf rule:
`-0x0p+0` for negative zero and `nan` for every NaN (BSD printf drops the sign of a NaN).
Doubles that are subnormal *as doubles* (fp64 values below 2^-1022) are written normalised, as
Apple's libc does (`0x1p-1074`); no golden holds such a value.
"""

from __future__ import annotations

import math
import re
import struct

_HEX_FLOAT = re.compile(r"^([+-]?)0x([0-9a-fA-F]+)(?:\.([0-9a-fA-F]*))?p([+-]?\d+)$")


def format_hex(value: float) -> str:
    """`%a` of `value` (a Python float, i.e. a double)."""
    if math.isnan(value):
        return "nan"
    sign = "-" if math.copysign(1.0, value) < 0 else ""
    if math.isinf(value):
        return f"{sign}inf"
    if value == 0.0:
        return f"{sign}0x0p+0"
    bits = struct.unpack("<Q", struct.pack("<d", abs(value)))[0]
    exponent = (bits >> 52) & 0x7FF
    mantissa = bits & ((1 << 52) - 1)
    if exponent == 0:
        # A double subnormal: shift until the leading one reaches the implicit bit.
        exponent = 1
        while not mantissa & (1 << 52):
            mantissa <<= 1
            exponent -= 1
        mantissa &= (1 << 52) - 1
    digits = f"{mantissa:013x}".rstrip("0")
    power = exponent - 1023
    fraction = f".{digits}" if digits else ""
    return f"{sign}0x1{fraction}p{power:+d}"


def parse_float(text: str) -> float:
    """Read a float literal in any spelling the printer writes (hex, `inf`, `nan`) or decimal."""
    lowered = text.lower()
    if lowered in ("inf", "+inf"):
        return math.inf
    if lowered == "-inf":
        return -math.inf
    if lowered in ("nan", "-nan", "+nan"):
        return math.nan
    match = _HEX_FLOAT.match(text)
    if match:
        sign, whole, fraction, power = match.groups()
        fraction = fraction or ""
        mantissa = int(whole + fraction, 16)
        value = math.ldexp(mantissa, int(power) - 4 * len(fraction))
        return -value if sign == "-" else value
    return float(text)
