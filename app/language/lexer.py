"""Tokens of `model.mil` text, each with the offset it starts at (for line:column errors)."""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from app.language.errors import MilSyntaxError

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>[-+]?(?:0[xX][0-9a-fA-F]+(?:\.[0-9a-fA-F]*)?[pP][-+]?\d+
                   |(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)
                   |inf\b|nan\b))
  | (?P<arrow>->)
  | (?P<ellipsis>\.\.\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[()\[\]{}<>,=;?])
    """,
    re.VERBOSE,
)
_ESCAPE = re.compile(r"\\(.)")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0"}


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "string", "number", "ident", "arrow", "ellipsis", "punct", "end"
    text: str
    offset: int


def unquote(text: str) -> str:
    return _ESCAPE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(1)), text[1:-1])


class Source:
    """The text, its tokens, and offset -> (line, column) for error messages."""

    def __init__(self, text: str, name: str = "model.mil") -> None:
        self.text = text
        self.name = name
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.tokens = self._tokenize()

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self._line_starts, offset)
        return line, offset - self._line_starts[line - 1] + 1

    def error(self, message: str, offset: int) -> MilSyntaxError:
        line, column = self.position(offset)
        return MilSyntaxError(message, line, column, self.name)

    def _tokenize(self) -> list[Token]:
        text, pos, out = self.text, 0, []
        match = _TOKEN.match
        while pos < len(text):
            m = match(text, pos)
            if m is None:
                raise self.error(f"unexpected character {text[pos]!r}", pos)
            kind = m.lastgroup
            assert kind is not None  # every alternative of _TOKEN is a named group
            if kind != "space":
                out.append(Token(kind, m.group(), pos))
            pos = m.end()
        out.append(Token("end", "", len(text)))
        return out
