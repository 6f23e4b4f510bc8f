"""A cursor over `model.mil` tokens, with `expect` helpers that fail with line:column."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from app.language.errors import MilSyntaxError
from app.language.lexer import Source, Token

T = TypeVar("T")


class Cursor:
    def __init__(self, source: Source) -> None:
        self.source = source
        self.tokens = source.tokens
        self.i = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.tokens[self.i]
        if token.kind != "end":
            self.i += 1
        return token

    def at(self, text: str) -> bool:
        token = self.token
        return token.text == text and token.kind in ("punct", "ident", "arrow", "ellipsis")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def error(self, message: str, token: Token | None = None) -> MilSyntaxError:
        token = token or self.token
        found = "end of text" if token.kind == "end" else repr(token.text)
        return self.source.error(f"{message}, found {found}", token.offset)

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.error(f"expected {text!r}")
        return self.advance()

    def name(self, what: str = "a name") -> str:
        """An identifier (`inf`/`nan` are numbers to the lexer but valid names here)."""
        token = self.token
        if token.kind == "ident" or (token.kind == "number" and token.text in ("inf", "nan")):
            self.i += 1
            return token.text
        raise self.error(f"expected {what}")

    def separated(self, close: str, item: Callable[[], T]) -> list[T]:
        """`item (',' item)*` up to (and consuming) `close`; empty when `close` comes first."""
        out: list[T] = []
        if self.accept(close):
            return out
        while True:
            out.append(item())
            if self.accept(close):
                return out
            self.expect(",")
