"""Which MIL primitives Core AI's translation covers: every op the builder emits either has a
rule (app/coreai/rules.py; the compressed forms app/coreai/compressed.py; the state ops become
handles in app/coreai/translate.py) or is named below as not translating, with why.

    coverage() -> one row per primitive the builder emits, in the records' order

A primitive with neither (a record added without a word here) shows as `translates: False` with
no reason; tests/test_coreai_coverage.py refuses that.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from app.coreai.translate import RULES, STATE_OPS
from app.mil import ops

# The primitives without a Core AI form, and why: refused by name before anything is written.
_SPARSE = (
    "no rule yet: coreai.authoring's sparse_with_bitmask_to_dense is the counterpart, not yet "
    "checked against the reference decompression"
)
NOT_TRANSLATED: dict[str, str] = {
    "constexpr_affine_dequantize": (
        "an iOS16 op, written only in ios17 programs (ios18 ones quantize with "
        "constexpr_blockwise_shift_scale, which translates)"
    ),
    "constexpr_sparse_to_dense": _SPARSE,
    "constexpr_sparse_blockwise_shift_scale": _SPARSE,
}


@dataclass(frozen=True)
class Coverage:
    op: str
    translates: bool
    how: str  # the rule that writes it, or why it has none ("" when nobody said)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def coverage() -> list[Coverage]:
    rows = []
    for record in ops.built():
        name = record.name
        if name in STATE_OPS:
            how = "a read_handle/write_handle on the state's handle"
            if name == "coreml_update_state":
                how = "a write_handle, then a read_handle of what it wrote, on the state's handle"
            rows.append(Coverage(name, True, how))
        elif name in RULES:
            rows.append(Coverage(name, True, f"a rule in {RULES[name].__module__}"))
        else:
            rows.append(Coverage(name, False, NOT_TRANSLATED.get(name, "")))
    return rows
