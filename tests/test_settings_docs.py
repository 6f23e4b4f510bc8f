"""docs/settings.md in step with app/settings.py: every setting is named there, and each row of
its table is a real setting with the default the code has."""

import re
from pathlib import Path

from app.settings import Settings

PAGE = Path(__file__).resolve().parent.parent / "docs" / "settings.md"
ROW = re.compile(r"^\| `(ANE_[A-Z0-9_]+)` \| ([^|]+) \|", re.M)


def _documented_default(cell: str) -> str:
    """The value a row gives: `INFO` -> INFO, 2147483648 (2 GiB) -> 2147483648, empty (off) -> ''."""
    cell = cell.strip()
    if cell.startswith("empty"):
        return ""
    return cell.split(" (")[0].strip("`")


def test_every_setting_is_named_on_the_page():
    text = PAGE.read_text(encoding="utf-8")
    missing = [
        f"ANE_{name.upper()}"
        for name in Settings.model_fields
        if f"`ANE_{name.upper()}`" not in text
    ]
    assert not missing, f"docs/settings.md does not name {missing}"


def test_each_row_has_the_default_of_the_code():
    rows = ROW.findall(PAGE.read_text(encoding="utf-8"))
    assert len(rows) >= 20, "the settings table was not found"
    for env, cell in rows:
        field = Settings.model_fields.get(env.removeprefix("ANE_").lower())
        assert field is not None, f"{env} is not a setting of app/settings.py"
        default = field.default
        shown = _documented_default(cell)
        if isinstance(default, int | float) and not isinstance(default, bool):
            assert float(shown) == default, (env, shown, default)
        else:
            assert shown == str(default), (env, shown, default)
