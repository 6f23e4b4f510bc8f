# The compiled module's interface (_fp16.c), for the type checker: it reads no C.
import numpy as np

def convert(kind: int, source: np.ndarray, out: np.ndarray, /) -> tuple[int, int] | None:
    """kind 0: fp32 -> fp16, 1: bf16 -> fp16; (overflow, nonfinite), None without F16C."""

def available() -> bool:
    """Whether this CPU runs the conversion (F16C, AVX2)."""
