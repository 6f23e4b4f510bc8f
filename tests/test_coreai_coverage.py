"""Core AI's translation against the op records: every primitive the builder emits either
translates or is named as not translating, with why; nothing is named that does not exist."""

from app.coreai.coverage import NOT_TRANSLATED, coverage
from app.coreai.translate import RULES, STATE_OPS
from app.mil import ops


def test_every_primitive_translates_or_says_why_not():
    missing = [c.op for c in coverage() if not c.translates and not c.how]
    assert missing == [], f"no Core AI rule and no reason in app/coreai/coverage.py: {missing}"
    assert [c.op for c in coverage()] == [r.name for r in ops.built()]


def test_the_tables_name_only_built_primitives_and_never_twice():
    built = {r.name for r in ops.built()}
    translated = set(RULES) | set(STATE_OPS)
    assert translated <= built and set(NOT_TRANSLATED) <= built
    assert not translated & set(NOT_TRANSLATED)
    assert all(reason.strip() for reason in NOT_TRANSLATED.values())
