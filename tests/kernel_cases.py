"""The catalog's example requests, as test cases: each op's first example (SMALL, one small
valid params dict per op) and the rest (VARIANTS, which reach every branch of its kernel).
They are declared in the op modules (app/kernels/<op>.py)."""

from app.kernels import CATALOG

SMALL = {name: op.examples[0] for name, op in CATALOG.items()}
VARIANTS = [(name, params) for name, op in CATALOG.items() for params in op.examples[1:]]
