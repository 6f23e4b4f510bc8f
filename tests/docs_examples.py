"""The examples of README.md and docs/*.md as the docs tests see them: every fenced block, its
page, line and language, and whether it runs.

A block runs when its language is a shell (`sh`, `bash`) or `python`, unless its first line says
it does not: `# not run by the docs tests: <reason>` (`// not run by the docs tests: <reason>` in
Swift). The marker is part of the page, so a reader sees which examples were not run and why.
Swift blocks never run here and must carry it. Other languages (`json`, `toml`, `text`, ...) are
data, shown as they are. A fence without a language is refused: a reader cannot tell what it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

RUNNABLE = {"sh": "bash", "bash": "bash", "python": "python"}
NEEDS_MARKER = {"swift"}  # languages that cannot run on this machine at all
MARKER = re.compile(r"^\s*(?:#|//)\s*not run by the docs tests:\s*(?P<reason>\S.*)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"

    @property
    def opt_out(self) -> str | None:
        """The reason given by the block's marker, or None when it has none."""
        first = self.code.splitlines()[0] if self.code.strip() else ""
        match = MARKER.match(first)
        return match.group("reason").strip() if match else None

    @property
    def runs(self) -> bool:
        return self.language in RUNNABLE and self.opt_out is None


def blocks(page: Path) -> list[Block]:
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    return [
        Block(page, t.map[0] + 1, t.info.strip().split(" ")[0].lower(), t.content)
        for t in tokens
        if t.type in ("fence", "code_block") and t.map
    ]


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    tokens = MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8"))
    return {anchor(tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"}


def links(page: Path) -> list[tuple[int, str]]:
    """(line, href) of every link of the page that points into the repository."""
    found = []
    for token in MarkdownIt("commonmark").parse(page.read_text(encoding="utf-8")):
        for child in token.children or []:
            href = child.attrGet("href") if child.type == "link_open" else None
            if href and not re.match(r"^[a-z]+:", href):
                found.append((token.map[0] + 1, str(href)))
    return found
