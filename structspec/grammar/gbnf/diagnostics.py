"""Diagnostics shared by the compiler (which raises the first error) and the linter (which lists all).

Codes are stable: tools and CI configurations match on them. README documents each one.
"""

from __future__ import annotations

from dataclasses import dataclass

from structspec.errors import GrammarError

ERROR = "error"
WARNING = "warning"

#: code -> (severity, short title)
CODES: dict[str, tuple[str, str]] = {
    "E001": (ERROR, "syntax error"),
    "E002": (ERROR, "unterminated literal, class or token reference"),
    "E003": (ERROR, "invalid escape sequence"),
    "E101": (ERROR, "undefined rule"),
    "E102": (ERROR, "missing root rule"),
    "E103": (ERROR, "duplicate rule definition"),
    "E104": (ERROR, "left recursion"),
    "E105": (ERROR, "empty character class or reversed range"),
    "E106": (ERROR, "repetition bounds out of order"),
    "E107": (ERROR, "rule can never finish"),
    "E108": (ERROR, "grammar too large to compile"),
    "E109": (ERROR, "unknown token"),
    "E110": (ERROR, "too many parse stacks (ambiguity limit)"),
    "W201": (WARNING, "unused rule"),
    "W202": (WARNING, "nullable expression inside an unbounded repetition"),
    "W203": (WARNING, "duplicate alternative"),
    "W204": (WARNING, "overlapping character class ranges"),
    "W205": (WARNING, "grammar accepts the empty string"),
    "W206": (WARNING, "unbounded whitespace run"),
}


@dataclass(frozen=True)
class Diagnostic:
    """One finding at a 1-based source position."""

    code: str
    message: str
    line: int
    column: int

    @property
    def severity(self) -> str:
        return CODES[self.code][0]

    def to_error(self, source: str) -> GrammarError:
        lines = source.splitlines()
        source_line = lines[self.line - 1] if 0 < self.line <= len(lines) else None
        return GrammarError(self.code, self.message, self.line, self.column, source_line)
