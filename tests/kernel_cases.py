"""The catalog's example requests, as test cases: each op's first example (SMALL, one small
valid params dict per op) and the rest (VARIANTS, which reach every branch of its kernel).
They are declared in the op modules (app/kernels/<op>.py), as is the space of params the loader
test draws from (`param_strategy`, over each op's `param_space`)."""

from hypothesis import strategies as st

from app.kernels import CATALOG

SMALL = {name: op.examples[0] for name, op in CATALOG.items()}
VARIANTS = [(name, params) for name, op in CATALOG.items() for params in op.examples[1:]]


class HypothesisDraw:
    """An op's `param_space` drawn by Hypothesis: axes kept small (a test builds and loads each
    draw), choices free where a sweep takes them in turn."""

    SMALL_AXIS = 48
    SMALL_CHOICE = 16  # sizes chosen from a list multiply (heads × head_dim): keep them smaller

    def __init__(self, draw):
        self.draw = draw

    def integer(self, low: int, high: int) -> int:
        return self.draw(st.integers(low, high))

    def dim(self, high: int = 1023, low: int = 1) -> int:
        return self.draw(st.integers(low, max(low, min(high, self.SMALL_AXIS))))

    def dim_choice(self, options):
        small = [o for o in options if o <= self.SMALL_CHOICE] or [min(options)]
        return self.draw(st.sampled_from(small))

    def choice(self, options):
        return self.draw(st.sampled_from(options))

    cycle = choice

    def boolean(self) -> bool:
        return self.draw(st.booleans())

    def log_uniform(self, low: float, high: float) -> float:
        return self.draw(st.floats(low, high))


def param_strategy(op: str) -> st.SearchStrategy:
    """Hypothesis's strategy over an op's sample space (its module's `param_space`)."""
    space = CATALOG[op].param_space
    return st.composite(lambda draw: space(HypothesisDraw(draw)))()
